"""The literals the SQL applier writes without the driver (``consumers.sql.render``) read
back on the real servers as the values the driver binds: strings that try to break out of
their quotes, a backslash under both MariaDB quoting modes, negative numbers after a
minus, and the values left to the driver."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg

from consumers.sql.render import (
    Template,
    mysql_literal,
    mysql_literal_parts,
    postgresql_literal,
    render_bytes,
)
from stack.services.mariadb import MariaDB
from stack.services.postgresql import PostgreSQL

TRICKY: list[object] = [
    None, 0, -1, -(2**63), 2**64 - 1, 2**70, -(2**70), "", "it's", "''", "back\\slash",
    "\\'; SELECT 1; --", "é😀 \n\t\r \x1a end", "-- not a comment", "/* nor this */", "$$",
    "%s %(v0)s %%", True, False, Decimal("-0.000000000000000000000000000001"), 1.5,
    dt.date(2024, 2, 29), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
]


#: Values the literal functions leave to the driver's adapters: their text must be exactly
#: what the driver's ``mogrify`` writes (casts, escapes, forms).
DRIVER_MADE: list[object] = [
    *TRICKY, Decimal("NaN"), Decimal("12345678901234567890.123456789"), Decimal("-1E+5"),
    -0.0, 1e300, float("inf"), float("nan"), b"", b"\x00'\\\"\x1a\xff", bytearray(b"ab'"),
    dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
    dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(2024, 1, 2, 3, 4, 5, 7),
    dt.time(23, 59, 59, 999999), dt.time(0, 0), dt.time(1, 2, 3, 4, tzinfo=dt.UTC),
    dt.timedelta(hours=-838, seconds=1), dt.timedelta(days=2, microseconds=7),
    uuid.UUID(int=2**128 - 1), [1, None, 3], ["a'b", "c\\d"],
]


def _outcome(render: Callable[[object], str], value: object) -> str:
    """The text rendered, or the error raised (PyMySQL refuses inf and NaN, for one)."""
    try:
        return render(value)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _mogrify(cursor: Any) -> Callable[[object], str]:
    """The driver's own literal of one value."""
    return lambda value: str(cursor.mogrify("%s", (value,)))


def _one(row: tuple[object, ...] | None) -> object:
    assert row is not None and len(row) == 1, row
    return row[0]


def test_postgresql_literals_read_back_as_the_bound_values(postgresql: PostgreSQL) -> None:
    with postgresql.connect() as conn:
        cursor = psycopg.ClientCursor(conn)
        literal = postgresql_literal(cursor)
        for value in TRICKY:
            written = _one(conn.execute(f"SELECT {literal(value)}".encode()).fetchone())
            bound = _one(conn.execute("SELECT %s", (value,)).fetchone())
            assert written == bound == value, (value, literal(value))
            if type(value) is int and abs(value) < 2**62:  # (1 - -2**63 overflows BIGINT)
                # After a minus: "1 - -5", never the comment "1 --5".
                diff = _one(conn.execute(f"SELECT 1 -{literal(value)}".encode()).fetchone())
                assert diff == 1 - value
        cursor.close()


def _in_both_quoting_modes(mariadb: MariaDB) -> Iterator[tuple[str, Any]]:
    """(sql_mode, a cursor of a session in it): backslashes escape, then they do not."""
    conn = mariadb.connect()
    try:
        for mode in ("", "NO_BACKSLASH_ESCAPES"):
            with conn.cursor() as cur:
                cur.execute(f"SET SESSION sql_mode = '{mode}'")
                yield mode, cur
    finally:
        conn.close()


def test_mariadb_literals_read_back_as_the_bound_values_in_both_quoting_modes(
        mariadb_target: MariaDB) -> None:
    for mode, cur in _in_both_quoting_modes(mariadb_target):
        literal = mysql_literal(cur)
        for value in TRICKY:
            if isinstance(value, (Decimal, float, dt.date)):
                continue  # MariaDB hands these back in its own forms; driver-made
            cur.execute(f"SELECT {literal(value)}")
            written = _one(cur.fetchone())
            cur.execute("SELECT %s", (value,))
            bound = _one(cur.fetchone())
            assert written == bound, (mode, value, literal(value))
            assert written == (int(value) if isinstance(value, bool) else value), (
                mode, value)


def test_the_driver_made_literals_equal_psycopgs_mogrify(postgresql: PostgreSQL) -> None:
    with postgresql.connect() as conn:
        cursor = psycopg.ClientCursor(conn)
        literal = postgresql_literal(cursor)
        for value in DRIVER_MADE:
            assert _outcome(literal, value) == \
                _outcome(_mogrify(cursor), value), value
        cursor.close()


def test_the_driver_made_literals_equal_pymysqls_mogrify_in_both_quoting_modes(
        mariadb_target: MariaDB) -> None:
    for mode, cur in _in_both_quoting_modes(mariadb_target):
        literal = mysql_literal(cur)
        for value in DRIVER_MADE:
            if isinstance(value, uuid.UUID):
                continue  # PyMySQL has no encoder for it (neither has the applier)
            assert _outcome(literal, value) == \
                _outcome(_mogrify(cur), value), (mode, value)


def test_statements_written_as_bytes_read_back_as_the_values_in_both_quoting_modes(
        mariadb_target: MariaDB) -> None:
    """The form of a row holding a value of many MiB (``render_bytes``): every byte value,
    and text with each character either quoting mode escapes, come back as they went."""
    texts = [value for value in TRICKY if isinstance(value, str)]
    blobs = [bytes(range(256)) * 4, b"\\'\x00\"\x1a\n\r\xff" * 1000, b""]
    schema = f"render_{uuid.uuid4().hex[:8]}"
    template = Template(f"INSERT INTO {schema}.big_values VALUES (%s, %s)", ["a", "b"])
    for mode, cur in _in_both_quoting_modes(mariadb_target):
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {schema}")
        cur.execute(f"CREATE TEMPORARY TABLE {schema}.big_values (a LONGTEXT, b LONGBLOB) "
                    "CHARSET utf8mb4")
        parts = mysql_literal_parts(cur)
        encoding = cur.connection.encoding
        for text, blob in zip(texts, blobs * len(texts), strict=False):
            cur.execute(render_bytes(template, {"a": text, "b": blob}, parts, encoding))
            cur.execute(f"SELECT a, b FROM {schema}.big_values")
            assert cur.fetchall() == ((text, blob),), (mode, text, blob[:20])
            cur.execute(f"DELETE FROM {schema}.big_values")
        cur.execute(f"DROP TEMPORARY TABLE {schema}.big_values")
        cur.execute(f"DROP DATABASE {schema}")
