"""The MongoDB applier: THL row changes into documents, through pymongo.

Mapping (``config.MongoTarget``): database = source schema, collection = source table (both
templates, ``naming``), ``_id`` = the primary key, document = the row (``types`` holds the type
map) + ``_seqno``, the seqno of the change that wrote it (``layouts``).

Without transactions (FerretDB, a standalone mongod, or ``transactions: off``) a block is
made durable in three steps, one request in flight:

1. the data: every document's last write of the block (``blocks``), each guarded by its seqno
   so a replayed write never goes backwards; deletes leave tombstones so a replayed older
   write cannot bring a deleted row back. A write refused because the document is already
   at that seqno or newer (E11000) is "already applied"; the rest of that command is
   checked against the stored ``_seqno``s and sent again, so one stale write never stops
   the writes after it;
2. heartbeats (guarded the same way);
3. the position in ``tungsten_<service>.trep_commit_seqno``, a compare-and-set against the
   seqno this applier last read or wrote (``positions``).

A crash anywhere before step 3 leaves the position where it was: the runtime applies the
same seqnos again, and the guards make that a no-op for what was written. With transactions
(a real replica set or sharded cluster), the three steps run in one
``session.with_transaction``; stale writes are filtered by reading the stored ``_seqno``s
inside the transaction first (a write error would abort it).

Provisioning (``consumers.provisioning``): a table's first provisioned chunk empties its
collection first, replay-safely (``blocks.Clear``: tombstones guarded by the chunk's seqno,
once per clear thanks to a marker in ``tungsten_<service>.provisioned``); every write is an
upsert already, and updates and deletes of a table without a key that find no row are left
out while the table is being provisioned.

Statement events are skipped (DDL has no meaning here); TRUNCATE, renamed tables and
columns and dropped tables are carried out by ``truncate`` and the ``Restructures`` calls
(``restructure``). Tables without a primary key are
applied: see ``blocks.KeylessOp`` for how their rows are identified and replayed safely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from bson.int64 import Int64
from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.check import CheckRange, CheckResult
from consumers.errors import TerminalError, key_changed
from consumers.heartbeat import Heartbeat
from consumers.mongodb import readback, restructure
from consumers.mongodb.blocks import (
    Clear,
    KeyedWrites,
    KeylessOp,
    RawDoc,
    Unencodable,
    Write,
    key_of,
)
from consumers.mongodb.config import MongoTarget
from consumers.mongodb.context import TargetContext
from consumers.mongodb.errors import classified, classify, data_error
from consumers.mongodb.layouts import Layout, Layouts
from consumers.mongodb.naming import Namespace
from consumers.mongodb.positions import HEARTBEAT, MongoTracking
from consumers.mongodb.server import (
    ServerTraits,
    Unsupported,
    detect,
    use_decimal128,
    use_transactions,
)
from consumers.mongodb.types import ID, OP, TypeOptions, ValueRefused, thl_value
from consumers.mongodb.writes import DocumentWriter
from consumers.naming import NameOwners
from consumers.position import Position
from consumers.provisioning import chunk_of, idempotent_tables
from consumers.registry import ApplierContext
from consumers.zero_dates import ZeroDateTally, count_zero_dates
from replicator import crashpoints
from thl_topics.event import ColumnSpec, RowChange, ThlEvent, ThlValue
from thl_topics.schema_change import SchemaChange

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Update statements per command on FerretDB (see ``rename_column``).
FERRETDB_UPDATES = 50


@dataclass(frozen=True)
class _KeyCheck:
    """A collection's key to look at (``MongoApplier._check_key``): the layout of the first
    row by it in the block, that row's column specs, which key columns are JSON text, and
    its seqno."""

    layout: Layout
    specs: list[ColumnSpec]
    json_text: list[bool]
    seqno: int


class MongoApplier:
    """Applies THL events to one MongoDB deployment (or MongoDB-wire server)."""

    def __init__(self, cfg: MongoTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.target = cfg.display_url()
        self.service = ctx.service.service
        self.group = ctx.group
        self.tracking_db = ctx.tracking_schema
        # The runtime reads the capabilities before connecting: declare the guarantee that
        # holds whatever the server turns out to be (auto may still use transactions).
        atomicity = Atomicity.TRANSACTIONAL if cfg.transactions == "on" \
            else Atomicity.SEQNO_GUARDED
        self.capabilities = Capabilities(
            atomicity=atomicity, statements=StatementPolicy.SKIP, keyless_tables=True,
            checks=True,
            # Writes collapse per document inside a block, are written ahead every
            # batch_ops documents while the block goes on, and each block costs a position
            # write: larger blocks than a SQL target's pay off (the time limit still bounds
            # the latency).
            block=BlockLimits(events=1000, rows=20_000, bytes=32 * 1024 * 1024, ms=500))
        self._client: MongoClient[RawDoc] | None = None
        self.traits: ServerTraits | None = None
        self._transactions = False
        # The parts of the applier, each on its client (``client``, ``server``).
        deployment = TargetContext(cfg, self.target, lambda: self.client, lambda: self.server)
        self._tracking = MongoTracking(deployment, self.tracking_db, self.group)
        self._layouts = Layouts(deployment, self.service, NameOwners(
            "collection", "collection", record=self._tracking.record_name))
        self._documents = DocumentWriter(deployment, self.tracking_db)
        #: Writes the seqnos of an open block already collected while the next ones are
        #: converted (``_write_ahead``); one request in flight.
        self._writer: ThreadPoolExecutor | None = None
        self._inflight: Future[None] | None = None
        # The open block.
        self._open = False
        self._writes = KeyedWrites()
        self._keyless: dict[Namespace, list[KeylessOp]] = {}
        #: Collections a provisioned first chunk of the open block empties first.
        self._clears: dict[Namespace, Clear] = {}
        #: (collection, key columns) whose documents this session found keyed by them.
        self._keys_seen: set[tuple[Namespace, tuple[str, ...]]] = set()
        #: Keys of the open block to look at before its writes go out (``_check_key``).
        self._key_checks: dict[tuple[Namespace, tuple[str, ...]], _KeyCheck] = {}
        self._beats: list[Heartbeat] = []
        self._seqno = -1
        self._seqno64 = Int64(-1)
        self._zeros = ZeroDateTally(self.target, ctx.metrics, log)
        self._ordinal = 0
        #: Highest ``_op`` applied per keyless collection (missing: read it from the target).
        self._marks: dict[Namespace, tuple[int, int]] = {}
        #: The seqno stored on the target as this applier last read, cleared or wrote it.
        self._expected: int | None = None

    # -- connection -------------------------------------------------------------------------

    @property
    def server(self) -> ServerTraits:
        """What the target is (known once connected)."""
        if self.traits is None:
            raise RuntimeError("not connected: connect() first")
        return self.traits

    @property
    def client(self) -> MongoClient[RawDoc]:
        if self._client is None:
            raise RuntimeError("not connected: connect() first")
        return self._client

    def connect(self) -> None:
        if self._client is None:
            self._client = MongoClient(self.cfg.url, **self.cfg.client_options())
        admin = self.client.admin
        build = classified(lambda: admin.command("buildInfo"), self.target, "reading buildInfo")
        hello = classified(lambda: admin.command("hello"), self.target, "reading hello")
        traits = detect(build, hello)
        try:
            self._transactions = use_transactions(self.cfg.transactions, traits)
            self._layouts.types = TypeOptions(
                decimal128=use_decimal128(self.cfg.decimal, traits),
                zero_dates=self.cfg.zero_dates)
        except Unsupported as exc:
            raise TerminalError(f"{self.target}: {exc}") from exc
        if self.traits != traits:
            log.info("%s: %s; transactions %s, decimals as %s", self.target, traits.name,
                     "on" if self._transactions else "off",
                     "Decimal128" if self._layouts.types.decimal128 else "strings")
        self.traits = traits
        self._layouts.clear()
        self._keys_seen.clear()
        self._layouts.owners.load(self._tracking.names())
        self._marks.clear()

    def position(self) -> Position | None:
        found, self._expected = self._tracking.read()
        self._marks.clear()
        return found

    def reset(self) -> None:
        self._tracking.clear()
        self._expected = None
        self._marks.clear()

    def close(self) -> None:
        self.rollback()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self._open = True
        self._key_checks = {}
        self._writes = KeyedWrites()
        self._keyless = {}
        self._clears = {}
        self._beats = []
        self._seqno = -1

    def rollback(self) -> None:
        try:
            self._wait()
        except Exception as exc:  # the block is abandoned anyway; rollback never raises
            log.debug("%s: abandoned write: %s", self.target, exc)
        self._open = False
        self._key_checks = {}
        self._writes = KeyedWrites()
        self._keyless = {}
        self._clears = {}
        self._beats = []
        self._zeros.rollback()
        # Writes of the abandoned block may or may not have landed: read the marks again.
        self._marks.clear()

    def apply(self, event: ThlEvent) -> None:
        if not self._open:
            raise RuntimeError("no open block: begin() first")
        if event.seqno != self._seqno or event.fragno == 0:
            # Row ordinals count across the fragments of a seqno.
            self._seqno, self._ordinal = event.seqno, 0
            self._seqno64 = Int64(event.seqno)
            if not self._transactions and (
                    len(self._writes) + sum(map(len, self._keyless.values()))
                    >= self.cfg.batch_ops):
                self._write_ahead()
        chunk = chunk_of(event)
        if chunk is not None and chunk.first and event.fragno == 0:
            self._clear(event, chunk.schema, chunk.table)
        loose = idempotent_tables(event)
        for item in event.data:
            if isinstance(item, RowChange):
                self._rows(item, event, (item.schema, item.table) in loose)

    def heartbeat(self, beat: Heartbeat) -> None:
        self._beats.append(beat)

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        """The collection is emptied at this seqno like a provisioning clear
        (``blocks.Clear``: every older live document becomes a tombstone, replay-safe)."""
        ns = self._layouts.namespace(schema, table, event)
        coll = self.client[ns.database][ns.collection]
        # A keyless table's documents carry ``_op``; its tombstones must carry the mark.
        keyless = self._mapped(lambda: coll.find_one({OP: {"$exists": True}}, {ID: 1})
                               is not None, f"reading {ns}", event.seqno)
        self._writes.drop(ns)
        self._keyless.pop(ns, None)
        self._clears[ns] = Clear(event.seqno, event.event_id, f"{schema}.{table}",
                                 keyless=keyless)

    # -- schema changes (``Restructures``: ``restructure``) ------------------------------------

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The table's collection moves to the new name's (``restructure.move``), and the
        record of who holds which collection (``trep_names``) with it."""
        old_src = f"{change.schema}.{change.table}"
        new_schema, new_table = change.new_schema or change.schema, \
            change.new_name or change.table
        new_src = f"{new_schema}.{new_table}"
        old = self._layouts.locate(change.schema, change.table, event)
        new = self._layouts.locate(new_schema, new_table, event)
        doing = f"{change.describe()} at seqno {event.seqno}"
        if not self._holds(old, old_src, doing):
            return
        other = self._layouts.owners.owner(str(new))
        if old != new and other not in (None, old_src, new_src):
            raise data_error(self.target, event, old_src, None, f"{doing}: collection {new} "
                             f"holds {other}; give {new_src} its own name in the target's "
                             "`database`/`collection` templates")
        self._mapped(self._wait, doing, event.seqno)
        if old != new:
            self._mapped(lambda: self._move(old, new, old_src, doing, event), doing, event.seqno)
        self._forget(change.schema, change.table, old)
        self._forget(new_schema, new_table, new)
        if self._mapped(lambda: restructure.exists(self.client, new), doing, event.seqno):
            self._layouts.namespace(new_schema, new_table, event)  # records who holds it

    def _move(self, old: Namespace, new: Namespace, source: str, doing: str,
              event: ThlEvent) -> None:
        there = restructure.exists(self.client, new)
        if not restructure.exists(self.client, old):
            log.info("%s: %s: %s, nothing to move", self.target, doing,
                     f"{new} is there already" if there else f"{old} is not there (no row "
                     "of the table reached the target)")
            return
        if there and old.database == new.database:
            raise data_error(self.target, event, source, None, f"{doing}: collection {new} "
                             "exists already (a table dropped or kept earlier?); rename or "
                             "drop it on the target, then resume")
        how = restructure.move(self.client, old, new, self.cfg.batch_ops)
        log.info("%s: %s: collection %s %s to %s", self.target, doing, old, how, new)

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        """The field is renamed (``$rename``) or, with ``keep_old``, copied into the new
        one; a key field of a composite ``_id`` moves the documents to the new ``_id``
        either way (``restructure``). Documents keep their ``_seqno``."""
        found = self._column_change(change, event)
        if found is None:
            return
        ns, doing = found
        source = f"{change.schema}.{change.table}"
        old = self._layouts.field(source, change.column or "", event)
        new = self._layouts.field(source, change.new_name or "", event)
        if old == new:
            return
        coll = self.client[ns.database][ns.collection]
        batch, seqno = self.cfg.batch_ops, event.seqno
        if self.server.scanning_updates:
            # FerretDB 1.24 stops answering every client on an update command of 100
            # statements or more (measured: 99 take 0.4 s, 100 never return).
            batch = min(batch, FERRETDB_UPDATES)

        def carry_out() -> tuple[int, str]:
            if not restructure.exists(self.client, ns):
                return 0, "nothing to change (no row of the table reached the target)"
            rekeyed = restructure.rekey(coll, old, new, seqno, batch)
            if rekeyed:  # a key column: renamed whatever keep_old says
                return rekeyed + restructure.rename_field(coll, old, new, seqno), "moved to " \
                    "the new _id (a key column)"
            if keep_old:
                return restructure.copy_field(coll, old, new, seqno, batch), "copied"
            return restructure.rename_field(coll, old, new, seqno), "renamed"

        count, how = self._mapped(carry_out, f"{doing} in {ns}", seqno)
        log.info("%s: %s: field %r of %s %s in %d document(s)", self.target, doing, old, ns,
                 how, count)

    def drop_column(self, change: SchemaChange, event: ThlEvent) -> None:
        """``evolve``: the field goes from the documents written before the drop
        (``$unset``, one update command); the ``_id`` of a key column stays as it is."""
        found = self._column_change(change, event)
        if found is None:
            return
        ns, doing = found
        field = self._layouts.field(f"{change.schema}.{change.table}", change.column or "",
                                    event)
        coll = self.client[ns.database][ns.collection]
        count = self._mapped(lambda: restructure.unset_field(coll, field, event.seqno),
                             f"{doing} in {ns}", event.seqno)
        log.info("%s: %s: field %r removed from %d document(s) of %s (schema_changes: "
                 "evolve)", self.target, doing, field, count, ns)

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The collection is dropped with its documents and tombstones."""
        source = f"{change.schema}.{change.table}"
        ns = self._layouts.locate(change.schema, change.table, event)
        doing = f"{change.describe()} at seqno {event.seqno}"
        if not self._holds(ns, source, doing):
            return
        self._mapped(self._wait, doing, event.seqno)

        def drop() -> bool:
            there = restructure.exists(self.client, ns)
            if there:
                self.client[ns.database].drop_collection(ns.collection)
            return there

        dropped = self._mapped(drop, f"{doing}: dropping {ns}", event.seqno)
        log.info("%s: %s: %s", self.target, doing, f"collection {ns} dropped" if dropped
                 else f"{ns} is not there (dropped already, or no row reached the target)")
        self._forget(change.schema, change.table, ns)

    def _column_change(self, change: SchemaChange, event: ThlEvent
                       ) -> tuple[Namespace, str] | None:
        """Before a column of a table changes in its documents: its collection and the
        change's description for the log, the writes sent ahead waited for and the table's
        layouts forgotten; None where the collection holds another table."""
        ns = self._layouts.locate(change.schema, change.table, event)
        doing = f"{change.describe()} at seqno {event.seqno}"
        if not self._holds(ns, f"{change.schema}.{change.table}", doing):
            return None
        self._mapped(self._wait, doing, event.seqno)
        self._layouts.forget(change.schema, change.table)
        return ns, doing

    def _holds(self, ns: Namespace, source: str, doing: str) -> bool:
        """Whether ``ns`` holds the table ``source`` (or no table is recorded for it):
        another table's collection is left alone."""
        owner = self._layouts.owners.owner(str(ns))
        if owner in (None, source):
            return True
        log.info("%s: %s: %s holds %s, not this table: left alone", self.target, doing, ns,
                 owner)
        return False

    def _forget(self, schema: str, table: str, ns: Namespace) -> None:
        """Forget what is known of a table that no longer lives in ``ns``: its layouts, its
        keyless marks and index, and its record in ``trep_names``."""
        self._layouts.forget(schema, table)
        self._marks.pop(ns, None)
        self._documents.forget(ns)
        if self._layouts.owners.owner(str(ns)) == f"{schema}.{table}":
            self._tracking.forget_name(str(ns))
            self._layouts.owners.release(str(ns))

    def pending(self) -> tuple[dict[Namespace, list[Write]], dict[Namespace, list[KeylessOp]]]:
        """What the open block will write: collapsed writes, and keyless changes in order."""
        return self._writes.by_namespace(), {ns: list(ops) for ns, ops in self._keyless.items()}

    def _write_ahead(self) -> None:
        """Hand the seqnos collected so far to the writer thread, and go on converting.

        Only on a seqno boundary (the writes of one seqno stay together: a guarded write
        never follows another of the same seqno) and with one request in flight: the last
        hand-over must have finished first. The block's position is still written only by
        ``commit``, after everything; a write error surfaces at the next hand-over or at the
        commit, with the seqno of the write.
        """
        self._mapped(self._wait, "writing ahead")
        self._check_keys()
        writes, keyless, clears = self._writes, self._keyless, self._clears
        self._writes, self._keyless, self._clears = KeyedWrites(), {}, {}
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongodb-write")
        self._inflight = self._writer.submit(self._documents.write_data, writes, keyless, None,
                                             self._marks, clears)

    def _wait(self) -> None:
        job, self._inflight = self._inflight, None
        if job is not None:
            job.result()

    def _mapped(self, call: Callable[[], _T], doing: str, seqno: int = -1) -> _T:
        """``call()`` with pymongo's and BSON's errors as the consumer's."""
        try:
            return call()
        except Unencodable as exc:
            raise data_error(self.target, exc.write, exc.write.table, None, str(exc)) from exc
        except PyMongoError as exc:
            raise classify(exc, self.target, doing, seqno) from exc

    # -- consistency checks (trepctl check) ---------------------------------------------------

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The live documents of a checked key range, as the source rows they stand for, in
        THL values (``readback``)."""
        if len(self._writes) or self._keyless or self._clears or self._inflight is not None:
            # The runtime gives a check a block of its own; write anything pending first.
            self._mapped(self._wait, "writing before a check")
            self._mapped(lambda: self._documents.write_data(self._writes, self._keyless, None,
                                                            self._marks, self._clears),
                         "writing before a check")
            self._writes, self._keyless, self._clears = KeyedWrites(), {}, {}
        yield from readback.read_range(self.client, self.cfg, self.service, check, self.target,
                                       self.server.ferretdb)

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
                      ) -> Iterator[list[ThlValue]]:
        """The child rows of a cascade (``consumers.cascades``) as the collection holds
        them (the open block's unwritten documents are not among them: the caller has
        those)."""
        yield from readback.rows_matching(self.client, self.cfg, self.service, schema, table,
                                          specs, columns, values, self.target,
                                          self.server.ferretdb)

    def record_check(self, result: CheckResult) -> None:
        """Upsert the range's document in ``tungsten_<service>.consistency``."""
        self._tracking.record_check(result)

    def commit(self, position: Position) -> None:
        if not self._open:
            raise RuntimeError("no open block: begin() first")
        try:
            self._mapped(self._wait, f"committing up to seqno {position.seqno}",
                         position.seqno)
            self._check_keys()
            if self._transactions:
                self._commit_in_transaction(position)
            else:
                self._write_block(position, None, self._marks)
        except Unencodable as exc:
            raise data_error(self.target, exc.write, exc.write.table, None, str(exc)) from exc
        except PyMongoError as exc:
            raise classify(exc, self.target, f"committing up to seqno {position.seqno}",
                           position.seqno) from exc
        finally:
            self._open = False
            self._writes, self._keyless, self._beats = KeyedWrites(), {}, []
            self._clears = {}
        self._expected = position.seqno
        self._zeros.commit(position.seqno)

    def _commit_in_transaction(self, position: Position) -> None:
        def block(session: ClientSession) -> None:
            # A retried transaction starts over: marks read inside it die with it.
            self._write_block(position, session, {})

        with self.client.start_session() as session:
            session.with_transaction(block, read_concern=ReadConcern("snapshot"),
                                     write_concern=WriteConcern("majority"))

    def _write_block(self, position: Position, session: ClientSession | None,
                     marks: dict[Namespace, tuple[int, int]]) -> None:
        self._documents.write_data(self._writes, self._keyless, session, marks, self._clears)
        if self._beats:
            self._documents.guarded(Namespace(self.tracking_db, HEARTBEAT),
                                    [self._tracking.heartbeat(b) for b in self._beats], session)
        crashpoints.reached("apply-before-position")
        self._advance(position, session)

    def _advance(self, position: Position, session: ClientSession | None) -> None:
        """The block's position, last (``positions.MongoTracking.advance``)."""
        self._tracking.advance(position, self._expected, session)

    # -- rows into writes --------------------------------------------------------------------

    def _clear(self, event: ThlEvent, schema: str, table: str) -> None:
        """A table's first provisioned chunk: its collection is emptied before the chunk's
        rows are written (``blocks.Clear``). The block's pending changes of that collection
        are dropped: whatever they would have written, the clear removes."""
        ns = self._layouts.namespace(schema, table, event)
        specs = next((item.column_specs or item.key_specs for item in event.data
                      if isinstance(item, RowChange)
                      and (item.schema, item.table) == (schema, table)), [])
        self._writes.drop(ns)
        self._keyless.pop(ns, None)
        self._clears[ns] = Clear(event.seqno, event.event_id, f"{schema}.{table}",
                                 keyless=not any(c.primary_key for c in specs))

    def _rows(self, change: RowChange, event: ThlEvent, loose: bool = False) -> None:
        after = self._layouts.layout(change, change.column_specs, event) \
            if change.column_values else None
        before = self._layouts.layout(change, change.key_specs, event) \
            if change.key_values else None
        layout = after or before
        keyed = layout is not None and bool(layout.key)
        if keyed and not loose and layout is not None:
            # From the before image where there is no after image: a DELETE may be the
            # first change by a new key, and would miss its document without a word.
            self._note_key(layout, change.column_specs if after is not None
                           else change.key_specs, change, event)
        for r in range(change.row_count):
            new = change.column_values[r] if after is not None else None
            old = change.key_values[r] if before is not None else None
            if keyed:
                self._keyed_row(event, after, new, before, old)
            elif layout is not None:
                self._keyless_row(event, layout, after, new, before, old, loose)
        if self.cfg.zero_dates == "null":
            count_zero_dates(self._zeros, f"{change.schema}.{change.table}", change)

    def _note_key(self, layout: Layout, specs: list[ColumnSpec], change: RowChange,
                  event: ThlEvent) -> None:
        """A key to look at before the block's writes go out (``_check_key``), once per
        collection and key a session; ``specs``: the image's of ``layout``."""
        names = tuple(layout.columns[i] for i in layout.key)
        mark = (layout.ns, names)
        if mark in self._keys_seen or mark in self._key_checks or layout.ns in self._clears:
            return
        self._key_checks[mark] = _KeyCheck(layout, specs, [
            self.cfg.is_json(change.schema, change.table, specs[i].name)
            for i in layout.key], event.seqno)

    def _check_keys(self) -> None:
        """Documents are found by ``_id``, made of the primary key's values: after the
        source's key changed (``ALTER TABLE ... DROP PRIMARY KEY, ADD PRIMARY KEY``), changes
        by the new key would miss the documents written by the old one and leave them
        behind, a silent divergence. So a sample of the documents written before a
        collection's first row of a key this session must be found by that key; else stop,
        saying how to repair (not where a provisioned first chunk empties the collection)."""
        checks, self._key_checks = self._key_checks, {}
        for mark, check in checks.items():
            if check.layout.ns not in self._clears:
                self._check_key(check)
            self._keys_seen.add(mark)

    def _check_key(self, check: _KeyCheck) -> None:
        layout, specs = check.layout, check.specs

        def ident(doc: dict[str, object]) -> object:
            row: list[ThlValue] = [None] * len(layout.columns)
            try:
                for i, j in zip(layout.key, check.json_text, strict=True):
                    row[i] = thl_value(specs[i], doc.get(layout.fields[i]), j)
                return layout.ident(row)
            except (ValueRefused, ValueError, TypeError):
                return None  # not this check's to judge: the row's own write will

        coll = self.client[layout.ns.database][layout.ns.collection]
        fields = [layout.fields[i] for i in layout.key]
        found = self._mapped(lambda: restructure.unfound(coll, fields, ident, check.seqno),
                             f"checking the _id of {layout.ns}", check.seqno)
        if found is not None:
            raise key_changed(self.target, layout.table, f"what made _id {found!r}",
                              [layout.columns[i] for i in layout.key], check.seqno,
                              f"collection {layout.ns}", "drop the collection")

    def _next(self) -> int:
        self._ordinal += 1
        return self._ordinal

    def _keyed_row(self, event: ThlEvent, after: Layout | None, new: Sequence[ThlValue] | None,
                   before: Layout | None, old: Sequence[ThlValue] | None) -> None:
        if before is not None and old is not None:
            old_id = self._layouts.ident(before, old, event)
            new_id = self._layouts.ident(after, new, event) \
                if after is not None and new is not None else None
            if new_id is None or key_of(new_id) != key_of(old_id):
                # A delete, or a key change: the old key's document becomes a tombstone.
                self._writes.add(before.ns, Write(event.seqno, self._next(), event.event_id,
                                                  before.table, old_id, None))
        if after is not None and new is not None:
            values = self._layouts.convert(after, new, event)
            ident = self._layouts.ident(after, new, event)
            # The row converter checked the width: the keys and values pair up.
            doc = dict(zip(after.doc_keys, [ident, self._seqno64, *values], strict=False))
            self._writes.add(after.ns, Write(event.seqno, self._next(), event.event_id,
                                             after.table, ident, doc))

    def _keyless_row(self, event: ThlEvent, layout: Layout, after: Layout | None,
                     new: Sequence[ThlValue] | None, before: Layout | None,
                     old: Sequence[ThlValue] | None, loose: bool = False) -> None:
        convert = self._layouts.convert
        after_doc = dict(zip(after.fields, convert(after, new, event), strict=True)) \
            if after is not None and new is not None else None
        before_doc = dict(zip(before.fields, convert(before, old, event), strict=True)) \
            if before is not None and old is not None else None
        self._keyless.setdefault(layout.ns, []).append(KeylessOp(
            event.seqno, self._next(), event.event_id, layout.table, before_doc, after_doc,
            loose))
