"""A real Debezium consumer reads the Debezium-envelope topics: Kafka Connect (Maven Central)
with Debezium's JDBC sink writes PostgreSQL tables from the JSON topics (JsonConverter with
schemas) and from the Avro topics (Apicurio's converter in Confluent mode, schemas from the
registry), and both equal the source row by row: inserts, updates, deletes (with their
tombstones), a key change, a composite key, NULLs, unicode and exact numbers."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from stack.connect import (
    ConnectWorker,
    apicurio_avro_converter,
    converter_settings,
    json_converter,
)
from stack.services.postgresql import PostgreSQL

from .conftest import ChangeService

ORDERS = """CREATE TABLE {s}.orders (
  id INT PRIMARY KEY, name VARCHAR(40), qty SMALLINT, price DECIMAL(12,2),
  big BIGINT UNSIGNED, ratio DOUBLE, day DATE, at DATETIME(6), stamp TIMESTAMP(6) NULL,
  dur TIME(6), state ENUM('new','paid','sent'), payload VARBINARY(16), flag TINYINT
) DEFAULT CHARSET=utf8mb4"""
ORDER_COLUMNS = ("id", "name", "qty", "price", "big", "ratio", "day", "at", "stamp", "dur",
                 "state", "payload", "flag")
LINES = """CREATE TABLE {s}.lines (order_id INT, line INT, note TEXT,
  PRIMARY KEY (order_id, line)) DEFAULT CHARSET=utf8mb4"""
LINE_COLUMNS = ("order_id", "line", "note")

NAMES = ["Zoë Šimůnková", "東京 太郎", "O'Brien", "Renée 😀", None, ""]


def _workload(svc: ChangeService) -> None:
    s = svc.schema
    rows = []
    for i in range(1, 31):
        rows.append((i, NAMES[i % len(NAMES)], i * 7 - 100, Decimal(i * 1234567) / 100,
                     18446744073709551615 - i if i % 3 else None, i / 7,
                     dt.date(2000 + i, 1 + i % 12, 1 + i % 28),
                     dt.datetime(2024, 1, 1, 0, 0, i, i * 1000 + 7),
                     dt.datetime(2030, 5, 5, 5, 5, 5, i) if i % 4 else None,
                     dt.timedelta(hours=i % 24, microseconds=i), ("new", "paid", "sent")[i % 3],
                     bytes([0, i, 255]) if i % 5 else None, i % 2))
    marks = ", ".join(["%s"] * len(ORDER_COLUMNS))
    svc.src(f"INSERT INTO {s}.orders VALUES ({marks})", params=rows, many=True)
    svc.src(f"INSERT INTO {s}.lines VALUES (%s, %s, %s)",
            params=[(i, j, f"line {j} ü") for i in range(1, 6) for j in range(3)], many=True)
    svc.src(f"UPDATE {s}.orders SET name = 'päid ✓', state = 'paid', price = price * 2, "
            f"stamp = NULL WHERE id % 4 = 0")
    svc.src(f"DELETE FROM {s}.orders WHERE id IN (5, 6, 7)",
            f"DELETE FROM {s}.lines WHERE order_id = 5")
    svc.src(f"UPDATE {s}.orders SET id = 1001, name = 'moved' WHERE id = 2")  # key change
    svc.src(f"UPDATE {s}.lines SET line = 9, note = NULL WHERE order_id = 1 AND line = 0")
    svc.src(f"INSERT INTO {s}.orders (id, name) VALUES (6, 'back again')")  # deleted key reused


def _norm(value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, dt.time):
        return dt.timedelta(hours=value.hour, minutes=value.minute, seconds=value.second,
                            microseconds=value.microsecond)
    if isinstance(value, Decimal) and value == value.to_integral_value() and \
            value.as_tuple().exponent == 0:
        return int(value)
    return value


def _pg_rows(pg: PostgreSQL, table: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]] | None:
    with psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="postgres",
                         options="-c timezone=UTC", autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if exists is None or exists[0] is None:
            return None
        rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
    return sorted((tuple(_norm(v) for v in r) for r in rows), key=repr)


def _src_rows(svc: ChangeService, table: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    rows = svc.src(f"SELECT {', '.join(columns)} FROM {svc.schema}.{table}")
    return sorted((tuple(_norm(v) for v in r) for r in rows), key=repr)


def _sink(name: str, topics: list[str], pg: PostgreSQL,
          converter: dict[str, str]) -> dict[str, str]:
    return {
        "name": name, "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "tasks.max": "1", "topics": ",".join(topics),
        "connection.url": f"jdbc:postgresql://127.0.0.1:{pg.port}/postgres",
        "connection.username": "postgres", "connection.password": "",
        "insert.mode": "upsert", "delete.enabled": "true", "primary.key.mode": "record_key",
        "schema.evolution": "basic", "use.time.zone": "UTC",
        **converter_settings("key", converter), **converter_settings("value", converter),
    }


def test_debezium_jdbc_sink_writes_postgresql_equal_to_the_source(
        make_service: Callable[..., ChangeService], postgresql: PostgreSQL, tmp_path: Path,
        unused_port: int) -> None:
    svc = make_service({
        "dbz_json": {"envelope": "debezium", "format": "json", "partitions": 2,
                     "topic": "{service}.j.{schema}.{table}"},
        "dbz_avro": {"envelope": "debezium", "format": "avro", "partitions": 2,
                     "topic": "{service}.a.{schema}.{table}"},
    })
    svc.src(ORDERS.format(s=svc.schema), LINES.format(s=svc.schema))
    svc.start()
    _workload(svc)
    svc.wait_source_applied()
    tables = {"orders": ORDER_COLUMNS, "lines": LINE_COLUMNS}
    expected = {t: _src_rows(svc, t, cols) for t, cols in tables.items()}
    assert len(expected["orders"]) == 28 and len(expected["lines"]) == 12

    v2 = svc.registry.url + "/apis/registry/v2"
    worker = ConnectWorker(tmp_path / "connect", svc.bootstrap, unused_port)
    worker.start([
        _sink("sink-json", [svc.topic(t, "dbz_json") for t in tables], postgresql,
              json_converter(schemas=True)),
        _sink("sink-avro", [svc.topic(t, "dbz_avro") for t in tables], postgresql,
              apicurio_avro_converter(v2)),
    ])
    try:
        for group in ("dbz_json", "dbz_avro"):
            for table, columns in tables.items():
                # The sink names a table after its topic, dots as underscores.
                pg_table = svc.topic(table, group).replace(".", "_")
                deadline = time.monotonic() + 120
                while (found := _pg_rows(postgresql, pg_table, columns)) != expected[table]:
                    for name in ("sink-json", "sink-avro"):
                        failure = worker.failure(name)
                        assert failure is None, f"{name}: {failure[:3000]}"
                    assert time.monotonic() < deadline, (
                        f"{pg_table}: {found} != {expected[table]}; see {worker.log}")
                    time.sleep(0.5)
    finally:
        worker.stop()
        with psycopg.connect(host="127.0.0.1", port=postgresql.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            for group in ("dbz_json", "dbz_avro"):
                for table in tables:
                    conn.execute(f"DROP TABLE IF EXISTS "
                                 f"{svc.topic(table, group).replace('.', '_')}")
