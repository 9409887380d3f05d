"""Provisioning: existing rows of source tables published through the THL, while streaming.

Why consistent snapshots per chunk, not chunk watermarks: MariaDB's
``START TRANSACTION WITH CONSISTENT SNAPSHOT`` also reports the binlog position the snapshot
is consistent with (``binlog_snapshot_file``/``_position``). A chunk read in such a snapshot
holds exactly the effect of every transaction before that position and none after it, so the
extractor emits the chunk right after the transaction that ends there: no lock on the source,
no window of uncertain keys to reconcile, one total order in the THL. Chunks go by primary
key (``provision_chunk_rows`` rows each); a table without a key goes in one piece, with a
warning.

The stream and the provisioner share one thread: at a transaction boundary the stream asks
for a chunk; if the snapshot's position is where the stream stands, the chunk is emitted at
once; if the source is ahead, the rows are kept and emitted when the stream reaches that
position (a chunk whose position the stream passed is thrown away and read again). Checks
(``extractor.check``) go the same way: what both share is ``extractor.snapshot_job``.

Targets apply a table's first chunk by emptying the table first, every chunk as upserts, and
the binlog changes of a table being provisioned (marked ``provisioning``) idempotently, so a
change to a row whose chunk has not come yet never fails and the state after the last chunk
is the source's.

Progress lives in the THL: every chunk event carries a ``provision`` header (request id,
table, chunk number, last key). A restarted extractor reads them from the request's first
seqno and resumes at the next chunk, so a chunk is never published twice. The request itself
(tables, state, progress for ``trepctl``) is a ZooKeeper node, ``extractor/provision``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import pymysql
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from extractor.binlog_position import BinlogPosition
from extractor.config import ExtractorConfig
from extractor.snapshot import SourceTable, describe, quote, read_chunk
from extractor.snapshot_job import Connect, Held, SnapshotJob
from extractor.transactions import TransactionAssembler
from replicator.config import ServiceSettings
from replicator.filters import ItemFilter
from replicator.requests import ProvisionRequest, read_request, write_request
from thl_topics.event import RowAction, RowChange, Statement, ThlValue
from thl_topics.reader import ThlReader
from thl_topics.records import HEADER_PROVISION, decode_key, encode_key
from thl_topics.schema_change import ChangeKind, SchemaChange

log = logging.getLogger(__name__)


@dataclass
class _Held(Held):
    """A chunk read in a snapshot the stream has not reached yet."""

    items: list[Statement | RowChange]
    rows: int


@dataclass
class _Table:
    """Provisioning progress of one table."""

    schema: str
    table: str
    chunk: int = 0
    last: list[ThlValue] | None = None
    done: bool = False
    rows: int = 0


class Provisioner(SnapshotJob[ProvisionRequest, _Held]):
    """Runs one provisioning request inside the extractor's stream (one thread)."""

    REQUEST = ProvisionRequest
    STEP_BUDGET_S = 0.5
    NAME = "provisioning"
    LOG = log

    def __init__(self, service: ServiceSettings, cfg: ExtractorConfig, zk: KazooClient,
                 filters: ItemFilter, connect: Connect) -> None:
        super().__init__(service, zk, filters, connect)
        self.cfg = cfg
        self._tables: list[_Table] = []
        self._described: dict[tuple[str, str], SourceTable] = {}
        #: The request's opening event (the tables' DDL) is in the THL.
        self._begun = False
        #: provision_rows_per_s: no new chunk before this time.
        self._not_before = 0.0
        #: Rows provisioned by this process (metrics).
        self.rows_total = 0
        self.chunks_total = 0

    # -- requests ---------------------------------------------------------------------------

    def resume(self, reader: ThlReader, next_seqno: int, new_service: bool) -> None:
        """At lead: pick up the request (``provision: initial`` makes one for a new service)
        and, for a running one, find in the THL how far it got."""
        try:
            req = read_request(self.zk, self.service)
        except KazooException as exc:
            log.warning("provisioning: cannot read the request yet: %s", exc)
            return
        if req is None and new_service and self.cfg.provision == "initial":
            req = ProvisionRequest(message="extractor.provision: initial")
            write_request(self.zk, self.service, req)
        self.request = req
        if req is None or req.state not in ("requested", "running"):
            return
        if req.state == "requested":
            with self.stops_on_missing_table():
                self._start(next_seqno)
        else:
            self._tables = [_Table(s, t) for s, t in req.resolved]
            self._begun = False
            self._scan(reader, req)
        log.info("provisioning %s: %s", req.id, self._progress_text())

    def _take_up(self, req: ProvisionRequest, next_seqno: int) -> None:
        self.request = req
        self._start(next_seqno)

    def _start(self, next_seqno: int) -> None:
        req = self.request
        if req is None:
            return
        with self._connection() as conn:
            tables = self._resolve(conn, req)
            estimates = self._estimate(conn, tables)
        req.resolved = [list(t) for t in tables]
        req.estimates = estimates
        req.rows_total = sum(estimates.values())
        req.started_seqno = next_seqno
        req.state = "running" if tables else "done"
        req.message = f"{len(tables)} table(s)"
        self._tables = [_Table(s, t) for s, t in tables]
        self._begun = False
        self._write()
        log.info("provisioning %s: %d table(s), ~%d rows: %s", req.id, len(tables),
                 req.rows_total, ", ".join(f"{s}.{t}" for s, t in tables))

    def _resolve(self, conn: pymysql.connections.Connection[Any], req: ProvisionRequest
                 ) -> list[tuple[str, str]]:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
                        "TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ('mysql', "
                        "'information_schema', 'performance_schema', 'sys') "
                        "ORDER BY TABLE_SCHEMA, TABLE_NAME")
            existing = [(str(s), str(t)) for s, t in cur.fetchall()]
        if req.tables:
            wanted = [(s, t) for s, t in req.tables]
            missing = [f"{s}.{t}" for s, t in wanted if (s, t) not in existing]
            if missing:
                raise LookupError(f"cannot provision {', '.join(missing)}: no such table")
        elif req.schemas:
            wanted = [(s, t) for s, t in existing if s in req.schemas]
        else:
            wanted = existing
        return [(s, t) for s, t in wanted if s != self.service.tracking_schema
                and self.filters.keeps(s, t)]

    def _estimate(self, conn: pymysql.connections.Connection[Any],
                  tables: list[tuple[str, str]]) -> dict[str, int]:
        out = {}
        with conn.cursor() as cur:
            for s, t in tables:
                cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                            "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (s, t))
                row = cur.fetchone()
                out[f"{s}.{t}"] = int(row[0] or 0) if row else 0
        return out

    def _scan(self, reader: ThlReader, req: ProvisionRequest) -> None:
        """Restore progress from the chunks already in the THL (the log is the truth)."""
        by_name = {(t.schema, t.table): t for t in self._tables}
        start = reader.offset_of(max(req.started_seqno, 0))
        req.rows_done = 0
        for msg in reader.raw(start):
            headers = dict(msg.headers() or [])
            raw = headers.get(HEADER_PROVISION)
            if raw is None:
                continue
            marks = json.loads(raw)
            if marks.get("id") != req.id:
                continue
            if marks.get("begin"):
                self._begun = True
                continue
            table = by_name.get((marks["table"][0], marks["table"][1]))
            if table is None or marks["chunk"] < table.chunk:
                continue
            if marks.get("fragment_last", True):
                table.chunk = marks["chunk"] + 1
                table.last = decode_key(marks["last"]) if marks["last"] is not None else None
                table.done = bool(marks["end"])
                table.rows += int(marks["rows"])
                req.rows_done += int(marks["rows"])

    # -- chunks -----------------------------------------------------------------------------

    def provisioning(self) -> set[tuple[str, str]]:
        """Tables of the running request not done yet: a target may lack any of their rows
        until the table's chunks have come, so their changes must not fail there."""
        if not self.active:
            return set()
        return {(t.schema, t.table) for t in self._tables if not t.done}

    def _open(self, position: BinlogPosition, assembler: TransactionAssembler) -> None:
        if not self._begun:
            self._begin(position, assembler)

    def _stepped(self) -> None:
        self._publish_progress()

    def _begin(self, position: BinlogPosition, assembler: TransactionAssembler) -> None:
        """The request's opening event: every table's DDL, for targets that run DDL, before
        any change to those tables is marked ``provisioning``."""
        req = self.request
        if req is None:
            return
        items: list[Statement | RowChange] = []
        with self._connection() as conn:
            with conn.cursor() as cur:
                for schema in dict.fromkeys(t.schema for t in self._tables):
                    items.append(Statement(f"CREATE DATABASE IF NOT EXISTS {quote(schema)}"))
                for t in self._tables:
                    source = self._source(conn, t)
                    if source.lossy_definition:
                        log.warning(
                            "provisioning %s.%s: the server reports the ENUM/SET members of "
                            "%s with '?' (4-byte characters in MariaDB's utf8mb3 data "
                            "dictionary); no CREATE TABLE is sent for it: create it on "
                            "targets that run DDL before provisioning", t.schema, t.table,
                            ", ".join(source.lossy_definition))
                        continue
                    cur.execute(f"SHOW CREATE TABLE {source.qualified}")
                    ddl = str(cur.fetchone()[1])
                    # A no-op where the table exists already (re-provisioning).
                    items.append(Statement(
                        ddl.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1),
                        default_schema=t.schema, schema_changes=[
                            SchemaChange(ChangeKind.CREATE_TABLE, t.schema, t.table)]))
        assembler.snapshot(items, position, f"provision:{req.id}:begin",
                           json.dumps({"id": req.id, "begin": True}))
        self._begun = True

    def _source(self, conn: pymysql.connections.Connection[Any], table: _Table) -> SourceTable:
        key = (table.schema, table.table)
        source = self._described.get(key)
        if source is None:
            source = self._described[key] = describe(conn, *key)
        return source

    def _next_table(self) -> _Table | None:
        return next((t for t in self._tables if not t.done), None)

    def _read(self) -> _Held | None:
        if time.monotonic() < self._not_before:
            return None  # provision_rows_per_s: not yet
        table = self._next_table()
        if table is None:
            self._finish()
            return None
        with self._connection() as conn:
            source = self._source(conn, table)
            if not source.key and table.chunk == 0:
                log.warning("provisioning %s.%s: no primary key; the whole table goes in "
                            "one chunk", table.schema, table.table)
            chunk = read_chunk(conn, source, table.last, self.cfg.provision_chunk_rows)
        rows = chunk.rows
        items: list[Statement | RowChange] = [RowChange(
            RowAction.INSERT, table.schema, table.table, column_specs=source.specs,
            column_values=rows)]
        marks = {"id": self.request.id if self.request else "", "table": [table.schema,
                 table.table], "chunk": table.chunk, "first": table.chunk == 0,
                 "end": chunk.end, "rows": len(rows),
                 "last": encode_key(chunk.last) if chunk.last is not None else None}
        return _Held(chunk.position, marks, items, len(rows))

    def _emit(self, held: _Held, assembler: TransactionAssembler,
              position: BinlogPosition) -> None:
        table = next(t for t in self._tables
                     if [t.schema, t.table] == held.marks["table"])
        assembler.snapshot(held.items, position,
                           f"provision:{held.marks['id']}:{held.marks['chunk']}",
                           json.dumps(held.marks))
        table.chunk += 1
        table.last = decode_key(held.marks["last"]) if held.marks["last"] else table.last
        table.done = bool(held.marks["end"])
        table.rows += held.rows
        self.rows_total += held.rows
        self.chunks_total += 1
        if self.request is not None:
            self.request.rows_done += held.rows
            self.request.current = f"{table.schema}.{table.table}"
        if table.done:
            log.info("provisioning: %s.%s done (%d rows)", table.schema, table.table,
                     table.rows)
        if self.cfg.provision_rows_per_s:
            self._not_before = max(time.monotonic(), self._not_before) + \
                held.rows / self.cfg.provision_rows_per_s

    def _finish(self) -> None:
        req = self.request
        if req is None or req.state == "done":
            return
        req.current = ""
        self._conclude("done", f"{len(self._tables)} table(s), {req.rows_done} rows")
        log.info("provisioning %s: done, %s", req.id, req.message)

    # -- progress ---------------------------------------------------------------------------

    def _progress_text(self) -> str:
        req = self.request
        if req is None:
            return "none"
        return f"{req.state}: {req.rows_done}/{req.rows_total} rows {req.current}".strip()

    def status_text(self) -> str:
        """One line for the extractor's status (``provisioning`` field)."""
        return self._progress_text() if self.active else "NONE"
