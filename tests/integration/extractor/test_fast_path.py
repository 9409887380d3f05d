"""The extractor's fast path (cached table maps, direct Avro writer) against the reference
path (pymysqlreplication parsing every table map, fastavro writing from the schema), value by
value and byte by byte on the type matrix, across ALTER TABLEs that change the table map."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader

from extractor import table_map_cache
from extractor.service import _EVENTS
from extractor.transactions import BinlogPosition, TransactionAssembler
from replicator.filters import ReplicateFilter
from stack.services.mariadb import MariaDB
from thl_topics.codec import ThlCodec
from thl_topics.event import RowChange, ThlEvent

from .test_type_matrix import COLUMNS, ROWS


def _sql(source: MariaDB, *statements: str, params: Any = None) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=source.port, user="root", password="",
                           charset="utf8mb4", autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00', sql_mode = ''")
            for i, stmt in enumerate(statements):
                cur.execute(stmt, params if i == len(statements) - 1 else None)
        conn.commit()
    finally:
        conn.close()


def _position(source: MariaDB) -> BinlogPosition:
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        assert row is not None
        return BinlogPosition(row[0], int(row[1]))


def _extract(source: MariaDB, schema: str, start: BinlogPosition,
             end: BinlogPosition) -> list[ThlEvent]:
    events: list[ThlEvent] = []
    assembler = TransactionAssembler(
        emit=events.append, next_seqno=0, epoch=0, service="fast", source_id="fast",
        filters=ReplicateFilter([f"{schema}.*"], []), fragment_rows=3, fragment_bytes=1 << 20)
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": source.port, "user": "root",
                             "passwd": ""},
        server_id=5000 + uuid.uuid4().int % 1000, log_file=start.file, log_pos=start.pos,
        resume_stream=True, blocking=False, only_events=_EVENTS, is_mariadb=False,
        enable_logging=False)
    try:
        for event in stream:
            at = BinlogPosition(stream.log_file, stream.log_pos)
            assembler.feed(event, at)
            if (at.file, at.pos) >= (end.file, end.pos):
                break
    finally:
        stream.close()
    return events


def _rows(events: list[ThlEvent]) -> Iterator[tuple[int, str, str, list[Any], list[Any]]]:
    """Every row image in source order: an UPDATE's after image, then its before image."""
    for event in events:
        for item in event.data:
            if not isinstance(item, RowChange):
                continue
            for i in range(item.row_count):
                if item.column_values:
                    yield event.seqno, item.action.value, "after", \
                        [s.to_avro() for s in item.column_specs], item.column_values[i]
                if item.key_values:
                    yield event.seqno, item.action.value, "before", \
                        [s.to_avro() for s in item.key_specs], item.key_values[i]


def test_fast_path_equals_the_reference_on_the_type_matrix(mariadb_source: MariaDB) -> None:
    schema = f"fast_{uuid.uuid4().hex[:8]}"
    source = mariadb_source
    _sql(source, f"CREATE DATABASE {schema}")
    start = _position(source)
    _sql(source, f"CREATE TABLE {schema}.types ({COLUMNS}) DEFAULT CHARSET=utf8mb4")
    placeholders = ", ".join(["%s"] * len(ROWS[0]))
    for row in ROWS:
        _sql(source, f"INSERT INTO {schema}.types VALUES ({placeholders})", params=row)
    # Many statements on one table in one transaction: table maps repeat, rows merge.
    _sql(source, *(f"UPDATE {schema}.types SET vc = 'u{n}' WHERE id = {n % 4 + 1}"
                   for n in range(12)))
    # The table map changes: a new column, a changed ENUM, a dropped column, a rename.
    _sql(source, f"ALTER TABLE {schema}.types ADD COLUMN extra VARCHAR(10) DEFAULT 'x'")
    _sql(source, f"UPDATE {schema}.types SET extra = CONCAT('e', id)")
    _sql(source, f"ALTER TABLE {schema}.types MODIFY e ENUM('a','b','ç😀','new')")
    _sql(source, f"UPDATE {schema}.types SET e = 'new' WHERE id = 2")
    _sql(source, f"ALTER TABLE {schema}.types DROP COLUMN txt, RENAME COLUMN vc TO vc2")
    _sql(source, f"DELETE FROM {schema}.types WHERE id IN (1, 3)")
    end = _position(source)
    try:
        table_map_cache.uninstall()
        reference = _extract(source, schema, start, end)
        table_map_cache.install()
        hits = table_map_cache.Stats.hits
        fast = _extract(source, schema, start, end)
        assert table_map_cache.Stats.hits > hits, "the cache served no table map"
    finally:
        table_map_cache.install()
    ref_rows, fast_rows = list(_rows(reference)), list(_rows(fast))
    # 4 inserts; 12 + 4 + 1 updates (after and before images); 2 deletes.
    assert len(ref_rows) == len(fast_rows) == 4 + (12 + 4 + 1) * 2 + 2
    for ref, got in zip(ref_rows, fast_rows, strict=True):
        assert got[:4] == ref[:4], f"seqno {ref[0]}: specs differ"
        for spec, want, value in zip(ref[3], ref[4], got[4], strict=True):
            assert type(value) is type(want) and value == want, \
                f"seqno {ref[0]} column {spec['name']}: fast {value!r} != reference {want!r}"
    names = [s["name"] for s in fast_rows[-1][3]]
    assert "vc2" in names and "txt" not in names and "extra" in names
    codec = ThlCodec()
    assert codec.fast
    assert len(reference) == len(fast)
    for event in reference + fast:
        assert codec.encode(event) == codec.encode_reference(event), f"seqno {event.seqno}"
        assert codec.decode(codec.encode(event)) == event
