"""Consistency checks computed on the source inside the replication stream (``trepctl check``).

Like Tungsten's, the source's checksum of a row range travels through the THL, so every
consumer group computes its own at the same point of the log and compares. Here each range
is read in a consistent snapshot (``START TRANSACTION WITH CONSISTENT SNAPSHOT``, whose binlog
position MariaDB reports) and its count and digest (``thl_topics.checksum``) are emitted as
an event right after the transaction that ends at that position, as provisioning emits its
chunks: no lock on the source, and a target compares exactly the same state.

Ranges go by primary key, ``limit`` rows each (a table without a key is one range). A check
is not resumed after a restart: it starts over, and the targets' results (keyed by table and
range) are overwritten.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from extractor.binlog_position import BinlogPosition
from extractor.provision import position_key
from extractor.snapshot import SourceTable, chunk_query, describe
from extractor.transactions import TransactionAssembler
from replicator.config import ServiceSettings
from replicator.filters import ItemFilter
from replicator.requests import CheckRequest, read_request, write_request
from thl_topics.checksum import METHOD, range_digest
from thl_topics.records import META_CHECK, decode_key, encode_key
from thl_topics.values import from_thl

log = logging.getLogger(__name__)


@dataclass
class _Range:
    """A range read in a snapshot the stream has not reached yet."""

    position: BinlogPosition
    marks: dict[str, Any]


class Checker:
    """Runs one check request inside the extractor's stream (one thread)."""

    def __init__(self, service: ServiceSettings, zk: KazooClient, filters: ItemFilter,
                 connect: Callable[[], pymysql.connections.Connection[Any]]) -> None:
        self.service = service
        self.zk = zk
        self.filters = filters
        self._connect = connect
        self.request: CheckRequest | None = None
        self._queue: list[tuple[str, str]] = []
        self._table: SourceTable | None = None
        self._range = 0
        self._last: list[Any] | None = None
        self._held: _Range | None = None
        self._polled = 0.0

    @property
    def active(self) -> bool:
        return self.request is not None and self.request.state in ("requested", "running")

    def poll(self) -> None:
        """Between transactions: take up a new (or interrupted) request."""
        if self.active:
            return
        now = time.monotonic()
        if now - self._polled < 1.0:
            return
        self._polled = now
        try:
            req = read_request(self.zk, self.service, CheckRequest)
        except KazooException:
            return
        if req is not None and req.state in ("requested", "running"):
            self._start(req)

    def _start(self, req: CheckRequest) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                            "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
                existing = [(str(s), str(t)) for s, t in cur.fetchall()]
        finally:
            conn.close()
        wanted = [(s, t) for s, t in req.tables] if req.tables else existing
        missing = [f"{s}.{t}" for s, t in wanted if (s, t) not in existing]
        self.request = req
        if missing:
            req.state, req.message = "failed", f"no such table: {', '.join(missing)}"
            self._write()
            return
        self._queue = [(s, t) for s, t in wanted if s != self.service.tracking_schema
                       and s not in ("mysql", "information_schema", "performance_schema", "sys")
                       and self.filters.keeps(s, t)]
        req.resolved = [list(t) for t in self._queue]
        req.state, req.ranges, req.rows_done = "running", {}, 0
        req.message = f"{len(self._queue)} table(s), {req.limit} rows per range"
        self._table, self._held = None, None
        self._write()
        log.info("check %s: %s", req.id, req.message)

    def step(self, position: BinlogPosition, assembler: TransactionAssembler,
             budget_s: float = 0.3) -> None:
        """At a transaction boundary: emit the ranges whose snapshot is at ``position``."""
        deadline = time.monotonic() + budget_s
        while self.active and time.monotonic() < deadline:
            held = self._held
            if held is None:
                held = self._held = self._read_range()
                if held is None:
                    return
            here, there = position_key(position), position_key(held.position)
            if here < there:
                return
            self._held = None
            if here > there:
                continue  # the stream passed it: read the range again
            assembler.snapshot([], position, f"check:{held.marks['id']}:{held.marks['range']}",
                               json.dumps(held.marks), key=META_CHECK)
            self._advance(held.marks)

    def _read_range(self) -> _Range | None:
        req = self.request
        if req is None:
            return None
        if self._table is None:
            if not self._queue:
                req.state, req.message = "done", f"{sum(req.ranges.values())} range(s) emitted"
                self._write()
                log.info("check %s: %s", req.id, req.message)
                return None
            schema, table = self._queue[0]
            conn = self._connect()
            try:
                self._table = describe(conn, schema, table)
            finally:
                conn.close()
            self._range, self._last = 0, None
        source = self._table
        keyless = not source.key
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = dict(cur.fetchall())
                at = BinlogPosition(str(status["Binlog_snapshot_file"]),
                                    int(status["Binlog_snapshot_position"]))
                after = None if self._last is None else [
                    from_thl(next(c for c in source.specs if c.name == k), v)
                    for k, v in zip(source.key, self._last, strict=True)]
                sql, params = chunk_query(source, after, None if keyless else req.limit)
                cur.execute(sql, params)
                rows = [source.values(r) for r in cur.fetchall()]
            conn.commit()
        finally:
            conn.close()
        count, digest = range_digest(source.specs, rows)
        names = [c.name for c in source.specs]
        hi = None if keyless or not rows else [rows[-1][names.index(k)] for k in source.key]
        end = keyless or len(rows) < req.limit
        marks = {
            "id": req.id, "table": [source.schema, source.table], "range": self._range,
            "limit": req.limit, "lo": encode_key(self._last) if self._last is not None else None,
            "hi": encode_key(hi) if hi is not None and not end else None,
            "key": source.key, "columns": [c.to_avro() for c in source.specs],
            "count": count, "digest": digest, "method": METHOD, "end": end}
        return _Range(at, marks)

    def _advance(self, marks: dict[str, Any]) -> None:
        req = self.request
        if req is None or self._table is None:
            return
        name = f"{self._table.schema}.{self._table.table}"
        req.ranges[name] = marks["range"] + 1
        req.rows_done += int(marks["count"])
        self._range += 1
        self._last = decode_key(marks["hi"]) if marks["hi"] is not None else self._last
        if marks["end"]:
            self._queue.pop(0)
            self._table = None
        self._write()

    def _write(self) -> None:
        if self.request is None:
            return
        try:
            write_request(self.zk, self.service, self.request)
        except KazooException as exc:
            log.debug("check progress not published: %s", exc)
