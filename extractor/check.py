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
from typing import Any

from kazoo.client import KazooClient

from extractor.binlog_position import BinlogPosition
from extractor.snapshot import SourceTable, describe, read_chunk
from extractor.snapshot_job import Connect, Held, SnapshotJob
from extractor.transactions import TransactionAssembler
from replicator.config import ServiceSettings
from replicator.filters import ItemFilter
from replicator.requests import CheckRequest
from thl_topics.checksum import METHOD, range_digest
from thl_topics.event import ThlValue
from thl_topics.records import META_CHECK, decode_key, encode_key

log = logging.getLogger(__name__)


class Checker(SnapshotJob[CheckRequest, Held]):
    """Runs one check request inside the extractor's stream (one thread)."""

    REQUEST = CheckRequest
    #: An interrupted check starts over.
    TAKES_UP = ("requested", "running")
    STEP_BUDGET_S = 0.3
    NAME = "check"
    LOG = log

    def __init__(self, service: ServiceSettings, zk: KazooClient, filters: ItemFilter,
                 connect: Connect) -> None:
        super().__init__(service, zk, filters, connect)
        self._queue: list[tuple[str, str]] = []
        self._table: SourceTable | None = None
        self._range = 0
        self._last: list[ThlValue] | None = None

    def _take_up(self, req: CheckRequest, next_seqno: int) -> None:
        with self._connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                        "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
            existing = [(str(s), str(t)) for s, t in cur.fetchall()]
        wanted = [(s, t) for s, t in req.tables] if req.tables else existing
        missing = [f"{s}.{t}" for s, t in wanted if (s, t) not in existing]
        self.request = req
        if missing:
            self.fail(f"no such table: {', '.join(missing)}")
            return
        self._queue = [(s, t) for s, t in wanted if s != self.service.tracking_schema
                       and s not in ("mysql", "information_schema", "performance_schema", "sys")
                       and self.filters.keeps(s, t)]
        if not self._queue:
            # Said, not "done" with nothing in it: a check that compared nothing is no proof.
            asked = ", ".join(f"{s}.{t}" for s, t in wanted) or "every table"
            self.fail(f"no replicated table to check: the service's filters (and the tracking "
                      f"and system schemas) leave none of {asked}")
            return
        req.resolved = [list(t) for t in self._queue]
        req.state, req.ranges, req.rows_done = "running", {}, 0
        req.message = f"{len(self._queue)} table(s), {req.limit} rows per range"
        self._table, self._held = None, None
        self._write()
        log.info("check %s: %s", req.id, req.message)

    def _read(self) -> Held | None:
        req = self.request
        if req is None:
            return None
        if self._table is None:
            if not self._queue:
                self._conclude("done", f"{sum(req.ranges.values())} range(s) emitted")
                log.info("check %s: %s", req.id, req.message)
                return None
            schema, table = self._queue[0]
            with self._connection() as conn:
                self._table = describe(conn, schema, table)
            self._range, self._last = 0, None
        source = self._table
        with self._connection() as conn:
            chunk = read_chunk(conn, source, self._last, req.limit)
        count, digest = range_digest(source.specs, chunk.rows)
        marks = {
            "id": req.id, "table": [source.schema, source.table], "range": self._range,
            "limit": req.limit, "lo": encode_key(self._last) if self._last is not None else None,
            "hi": encode_key(chunk.last) if chunk.last is not None and not chunk.end else None,
            "key": source.key, "columns": [c.to_avro() for c in source.specs],
            "count": count, "digest": digest, "method": METHOD, "end": chunk.end}
        return Held(chunk.position, marks)

    def _emit(self, held: Held, assembler: TransactionAssembler, position: BinlogPosition
              ) -> None:
        assembler.snapshot([], position, f"check:{held.marks['id']}:{held.marks['range']}",
                           json.dumps(held.marks), key=META_CHECK)
        self._advance(held.marks)

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
