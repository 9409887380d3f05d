"""Tables replicated by the consumer tests, with their PostgreSQL twins and comparisons."""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal
from typing import Any

from .conftest import Replication

ACCOUNTS_MYSQL = """CREATE TABLE {s}.accounts (
  id INT PRIMARY KEY, name VARCHAR(64), balance DECIMAL(20,4), note TEXT NULL,
  updated DATETIME(6), flag TINYINT) DEFAULT CHARSET=utf8mb4"""
ACCOUNTS_PG = """CREATE TABLE "{s}".accounts (
  id INT PRIMARY KEY, name VARCHAR(64), balance NUMERIC(20,4), note TEXT NULL,
  updated TIMESTAMP(6), flag SMALLINT)"""

NOPK_MYSQL = ("CREATE TABLE {s}.nopk (a INT, b VARCHAR(20) NULL, c DOUBLE NULL) "
              "DEFAULT CHARSET=utf8mb4")
NOPK_PG = 'CREATE TABLE "{s}".nopk (a INT, b VARCHAR(20) NULL, c DOUBLE PRECISION NULL)'

TYPES_MYSQL = """CREATE TABLE {s}.types (
  id INT PRIMARY KEY,
  u_big BIGINT UNSIGNED, s_big BIGINT, tiny TINYINT, u_tiny TINYINT UNSIGNED,
  small SMALLINT, u_med MEDIUMINT UNSIGNED, i INT, u_i INT UNSIGNED,
  dec65 DECIMAL(65,30), dec_small DECIMAL(10,4), f FLOAT, d DOUBLE,
  b64 BIT(64), b1 BIT(1), b9 BIT(9), y YEAR, t6 TIME(6), t0 TIME,
  dt6 DATETIME(6), dt0 DATETIME, ts6 TIMESTAMP(6) NULL DEFAULT NULL,
  ts0 TIMESTAMP NULL DEFAULT NULL, dte DATE,
  e ENUM('a','b','ç😀'), st SET('x','y','z'), j JSON,
  vc VARCHAR(50), ch CHAR(5), txt TEXT, ltxt LONGTEXT,
  vb VARBINARY(20), bn BINARY(4), bl BLOB) DEFAULT CHARSET=utf8mb4"""
TYPES_PG = """CREATE TABLE "{s}".types (
  id INT PRIMARY KEY,
  u_big NUMERIC(20), s_big BIGINT, tiny SMALLINT, u_tiny SMALLINT,
  small SMALLINT, u_med INTEGER, i INTEGER, u_i BIGINT,
  dec65 NUMERIC(65,30), dec_small NUMERIC(10,4), f REAL, d DOUBLE PRECISION,
  b64 BIT(64), b1 BIT(1), b9 BIT(9), y SMALLINT, t6 INTERVAL, t0 INTERVAL,
  dt6 TIMESTAMP(6), dt0 TIMESTAMP(0), ts6 TIMESTAMP(6), ts0 TIMESTAMP(0), dte DATE,
  e TEXT, st TEXT, j JSONB,
  vc VARCHAR(50), ch VARCHAR(5), txt TEXT, ltxt TEXT,
  vb BYTEA, bn BYTEA, bl BYTEA)"""
TYPES_COLUMNS = 34

#: Edge values PostgreSQL can hold too (no zero dates, no NUL in text: see the poison test).
TYPES_ROWS: list[tuple[Any, ...]] = [
    (1, 18446744073709551615, -9223372036854775808, -128, 255, -32768, 16777215, -2147483648,
     4294967295, "99999999999999999999999999999999999.999999999999999999999999999999",
     "-123456.7890", 3.40282e38, 1.7976931348623157e308,
     0xFFFFFFFFFFFFFFFF, 1, 0x1FF, 2155, "-838:59:59.000000", "838:59:59",
     "9999-12-31 23:59:59.999999", "1000-01-01 00:00:00", "2038-01-19 03:14:07.999999",
     "1970-01-01 00:00:01", "9999-12-31", "ç😀", "x,z", '{"k": [1, "é", null, 1.5e300]}',
     "héllo wörld 😀 'quote' \\\\ end", "ab", "text\nwith\ttabs", "x" * 70000,
     b"\x00\x01\x00\xff", b"\x00\x01", b"\x00" * 3 + b"\xfe" + b"\x00"),
    (2, 0, 9223372036854775807, 127, 0, 32767, 0, 2147483647, 0,
     "-0.000000000000000000000000000001", "0.0000", -1.17549e-38, -2.2250738585072014e-308,
     0, 0, 0, 1901, "-00:00:00.000001", "00:00:00", "0001-01-01 00:00:00.000001",
     "2024-02-29 12:34:56", "1970-01-01 00:00:01.000001", "2024-06-01 12:00:00",
     "0001-01-01", "a", "", "[]", "", "", "", "", b"", b"", b""),
    (3,) + (None,) * (TYPES_COLUMNS - 1),
]


def create_tables(rep: Replication, *ddl: tuple[str, str | None]) -> None:
    """Create on the source (the THL carries it to MariaDB) and on PostgreSQL by hand; a
    table without PostgreSQL DDL is made there by the applier from the THL."""
    for mysql, pg in ddl:
        rep.src(mysql.format(s=rep.schema))
        if pg is not None:
            rep.pgsql(f'CREATE SCHEMA IF NOT EXISTS "{rep.schema}"', pg.format(s=rep.schema))


def _norm(column: str, value: Any) -> Any:
    """One comparable form for a MariaDB value and its PostgreSQL twin."""
    if value is None:
        return None
    if isinstance(value, memoryview):
        value = bytes(value)
    if column in ("b64", "b1", "b9"):
        return int.from_bytes(value, "big") if isinstance(value, bytes) else int(value, 2)
    if column == "f":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if column == "j":
        # JSONB keeps numbers as NUMERIC (1.5e300 comes back as its 301 digits): compare
        # numbers as exact decimals.
        return _exact(json.loads(value, parse_float=Decimal) if isinstance(value, str)
                      else value)
    if column == "bn" and isinstance(value, bytes):
        return value
    if isinstance(value, Decimal) and value == value.to_integral_value() and column in (
            "u_big",):
        return int(value)
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    return value


def compare(rep: Replication, table: str, columns: list[str], order: str) -> int:
    """Source, MariaDB target and PostgreSQL hold the same rows; the row count."""
    cols = ", ".join(columns)
    src = rep.src(f"SELECT {cols} FROM {rep.schema}.{table} ORDER BY {order}")
    tgt = rep.tgt(f"SELECT {cols} FROM {rep.schema}.{table} ORDER BY {order}")
    assert tgt == src, _diff(src, tgt, "mariadb")
    pg_order = order.replace("`", '"')
    pg = rep.pgsql(f'SELECT {cols} FROM "{rep.schema}".{table} ORDER BY {pg_order}')
    # Sorted here, not by ORDER BY: the servers disagree on where NULLs go.
    norm_src = sorted((tuple(_norm(c, v) for c, v in zip(columns, row, strict=True))
                       for row in src), key=_sort_key)
    norm_pg = sorted((tuple(_norm(c, v) for c, v in zip(columns, row, strict=True))
                      for row in pg), key=_sort_key)
    assert norm_pg == norm_src, _diff(norm_src, norm_pg, "postgresql")
    return len(src)


def _exact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return Decimal(value).normalize()
    return value


def _sort_key(row: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((v is not None, repr(v)) for v in row)


def _diff(src: list[Any], other: list[Any], name: str) -> str:
    if len(src) != len(other):
        return f"{name}: {len(other)} rows, source {len(src)}"
    for i, (a, b) in enumerate(zip(src, other, strict=True)):
        if a != b:
            cols = [(j, x, y) for j, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            return f"{name}: row {i} differs in columns {cols[:5]}"
    return f"{name}: equal?"

TYPES_NAMES = ["id", "u_big", "s_big", "tiny", "u_tiny", "small", "u_med", "i", "u_i", "dec65",
               "dec_small", "f", "d", "b64", "b1", "b9", "y", "t6", "t0", "dt6", "dt0", "ts6",
               "ts0", "dte", "e", "st", "j", "vc", "ch", "txt", "ltxt", "vb", "bn", "bl"]
ACCOUNTS_NAMES = ["id", "name", "balance", "note", "updated", "flag"]
NOPK_NAMES = ["a", "b", "c"]
