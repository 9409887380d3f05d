"""The MariaDB source writes the binlog the extractor needs; the target takes a round trip."""

from __future__ import annotations

import uuid
from decimal import Decimal

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from stack.services.mariadb import MariaDB

from .harness.config import server_id


def test_source_binlog_settings(mariadb_source: MariaDB) -> None:
    with mariadb_source.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata,"
            " @@server_id"
        )
        assert cur.fetchone() == (1, "ROW", "FULL", "FULL", 1)


def test_row_event_read_back_with_pymysqlreplication(mariadb_source: MariaDB) -> None:
    schema = f"smoke_{uuid.uuid4().hex[:8]}"
    with mariadb_source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        status = cur.fetchone()
        assert status is not None
        log_file, log_pos = status[0], status[1]
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, name VARCHAR(20), "
                    "amount DECIMAL(12,2))")
        cur.execute(f"INSERT INTO {schema}.t VALUES (1, 'héllo 😀', 12.50)")

    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb_source.port,
                             "user": "root", "passwd": ""},
        server_id=server_id(), log_file=log_file, log_pos=log_pos, resume_stream=True,
        blocking=False, only_events=[WriteRowsEvent], only_schemas=[schema],
    )
    try:
        rows = [(ev.table, ev.primary_key, row["values"])
                for ev in stream for row in ev.rows]
    finally:
        stream.close()
        with mariadb_source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {schema}")
    # binlog_row_metadata=FULL: names and primary key come from the event itself.
    assert rows == [("t", "id", {"id": 1, "name": "héllo 😀", "amount": Decimal("12.50")})]


def test_target_round_trip(mariadb_target: MariaDB) -> None:
    with mariadb_target.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS smoke")
        cur.execute("CREATE OR REPLACE TABLE smoke.rt (id BIGINT UNSIGNED PRIMARY KEY, "
                    "b VARBINARY(8), s VARCHAR(10))")
        cur.execute("INSERT INTO smoke.rt VALUES (%s, %s, %s)",
                    (18446744073709551615, b"\x00\x01\x00", "ü😀"))
        cur.execute("SELECT id, b, s FROM smoke.rt")
        assert cur.fetchall() == ((18446744073709551615, b"\x00\x01\x00", "ü😀"),)
        cur.execute("DROP DATABASE smoke")
