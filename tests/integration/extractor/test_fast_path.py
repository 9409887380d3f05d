"""The extractor's fast path (cached table maps, rows events decoded by ``row_decoder``,
direct Avro writer) against the reference path (pymysqlreplication parsing every table map and
every rows event, fastavro writing from the schema), value by value and byte by byte on the
type matrix, across ALTER TABLEs that change the table map, and on the tables the rows
decoder leaves to pymysqlreplication."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader

from extractor import row_decoder, table_map_cache
from extractor.binlog_position import BinlogPosition
from extractor.service import _EVENTS
from extractor.transactions import TransactionAssembler
from replicator.filters import ReplicateFilter
from stack.services.mariadb import MariaDB
from thl_topics.codec import ThlCodec
from thl_topics.event import RowChange, ThlEvent

from ..harness.config import server_id
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
        server_id=server_id(), log_file=start.file, log_pos=start.pos,
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


def _both_ways(source: MariaDB, schema: str, start: BinlogPosition,
               end: BinlogPosition) -> tuple[list[ThlEvent], list[ThlEvent]]:
    """(reference, fast) extractions of the same binlog range."""
    try:
        table_map_cache.uninstall()
        row_decoder.uninstall()
        reference = _extract(source, schema, start, end)
        table_map_cache.install()
        row_decoder.install()
        fast = _extract(source, schema, start, end)
    finally:
        table_map_cache.install()
        row_decoder.install()
    return reference, fast


def _assert_equal_rows(reference: list[ThlEvent], fast: list[ThlEvent]) -> list[Any]:
    ref_rows, fast_rows = list(_rows(reference)), list(_rows(fast))
    assert len(ref_rows) == len(fast_rows)
    for ref, got in zip(ref_rows, fast_rows, strict=True):
        assert got[:4] == ref[:4], f"seqno {ref[0]}: specs differ"
        for spec, want, value in zip(ref[3], ref[4], got[4], strict=True):
            assert type(value) is type(want) and value == want, \
                f"seqno {ref[0]} column {spec['name']}: fast {value!r} != reference {want!r}"
    codec = ThlCodec()
    assert codec.fast
    assert len(reference) == len(fast)
    for event in reference + fast:
        assert codec.encode(event) == codec.encode_reference(event), f"seqno {event.seqno}"
        assert codec.decode(codec.encode(event)) == event
    return fast_rows


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
    hits = table_map_cache.Stats.hits
    reference, fast = _both_ways(source, schema, start, end)
    assert table_map_cache.Stats.hits > hits, "the cache served no table map"
    # Every rows event of the type matrix was decoded by the fast path, none referred (the
    # counts are this schema's: other tests write to the same server meanwhile).
    assert row_decoder.Stats.decoded[schema] >= 4 + 12 + 3
    assert row_decoder.Stats.referred[schema] == 0
    fast_rows = _assert_equal_rows(reference, fast)
    # 4 inserts; 12 + 4 + 1 updates (after and before images); 2 deletes.
    assert len(fast_rows) == 4 + (12 + 4 + 1) * 2 + 2
    names = [s["name"] for s in fast_rows[-1][3]]
    assert "vc2" in names and "txt" not in names and "extra" in names


def test_rows_decoder_leaves_what_it_does_not_read_to_the_reference(
        mariadb_source: MariaDB) -> None:
    """Tables the decoder takes (latin1 text, many rows per event) and tables it refers
    (a GEOMETRY column, 260 columns) give the reference's values, in one transaction."""
    schema = f"fast_{uuid.uuid4().hex[:8]}"
    source = mariadb_source
    _sql(source, f"CREATE DATABASE {schema}")
    wide = ", ".join(f"c{i} INT" for i in range(259))
    _sql(source,
         f"CREATE TABLE {schema}.latin (id INT PRIMARY KEY, ch CHAR(10), vc VARCHAR(300),"
         " tx TEXT) DEFAULT CHARSET=latin1",
         f"CREATE TABLE {schema}.geo (id INT PRIMARY KEY, g GEOMETRY, n VARCHAR(5))",
         f"CREATE TABLE {schema}.wide (id INT PRIMARY KEY, {wide})")
    start = _position(source)
    many = ", ".join(f"({i}, 'ch{i}', '{'é' * (i % 300)}', 'ß€{i}')" for i in range(1, 401))
    _sql(source,
         f"INSERT INTO {schema}.latin VALUES {many}",
         f"INSERT INTO {schema}.geo VALUES (1, ST_GeomFromText('POINT(1 2)'), 'p'),"
         " (2, NULL, NULL)",
         f"INSERT INTO {schema}.wide (id, c0, c258) VALUES (1, 7, -7), (2, NULL, 0)",
         f"UPDATE {schema}.latin SET vc = CONCAT(vc, 'ü') WHERE id % 7 = 0",
         f"UPDATE {schema}.geo SET n = 'q' WHERE id = 1",
         f"UPDATE {schema}.wide SET c1 = 1",
         f"DELETE FROM {schema}.latin WHERE id > 390",
         f"DELETE FROM {schema}.geo WHERE id = 2")
    end = _position(source)
    reference, fast = _both_ways(source, schema, start, end)
    assert row_decoder.Stats.decoded[schema] > 0, "the decoder took no rows event"
    assert row_decoder.Stats.referred[schema] >= 5, "geo and wide were not referred"
    fast_rows = _assert_equal_rows(reference, fast)
    assert len(fast_rows) == 400 + 57 * 2 + 2 + 2 + 1 * 2 + 2 * 2 + 10 + 1
