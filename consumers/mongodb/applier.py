"""The MongoDB applier: THL row changes into documents, through pymongo.

Mapping (``config.MongoTarget``): database = source schema, collection = source table (both
templates), ``_id`` = the primary key (a sub-document in key order for a composite key; the
THL carries the key's columns in table order, and that is the order used), document = the row
(``types`` holds the type map) + ``_seqno``, the seqno of the change that wrote it.

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
   seqno this applier last read or wrote (an upsert of ``{_id: 0, seqno: expected}``, which
   collides with the stored document if another writer moved it).

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

Statement events are skipped (DDL has no meaning here). Tables without a primary key are
applied: see ``blocks.KeylessOp`` for how their rows are identified and replayed safely.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from bson.errors import InvalidDocument
from bson.int64 import Int64
from pymongo import ASCENDING, DESCENDING, MongoClient
from pymongo.client_session import ClientSession
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DocumentTooLarge, PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.check import CheckRange, CheckResult
from consumers.errors import (
    DataError,
    PositionConflict,
    TerminalError,
)
from consumers.heartbeat import Heartbeat
from consumers.mongodb.blocks import (
    Clear,
    KeyedWrites,
    KeylessOp,
    Namespace,
    Unencodable,
    Write,
    chunks,
    fresh,
    key_of,
    row_document,
)
from consumers.mongodb.config import MongoTarget
from consumers.mongodb.errors import DUPLICATE_KEY, classify, error_text
from consumers.mongodb.server import (
    ServerTraits,
    Unsupported,
    detect,
    use_decimal128,
    use_transactions,
)
from consumers.mongodb.types import (
    DELETED,
    ID,
    OP,
    SEQNO,
    Converter,
    RowConverter,
    TypeOptions,
    ValueRefused,
    collection_problem,
    converter,
    database_problem,
    escape_name,
    field_name,
    key_converter,
    refused_field,
    thl_value,
)
from consumers.oversize import largest, mib, too_large
from consumers.position import Position
from consumers.provisioning import chunk_of, idempotent_tables
from consumers.registry import ApplierContext
from replicator import crashpoints
from thl_topics.event import ColumnSpec, RowChange, ThlEvent, ThlValue

log = logging.getLogger(__name__)

_T = TypeVar("_T")
RawDoc = dict[str, Any]
#: The position document's ``_id`` (Tungsten's ``task_id``: one apply channel).
TASK_ID = 0
COMMIT_SEQNO = "trep_commit_seqno"
HEARTBEAT = "heartbeat"
#: Per collection, the seqno of the last provisioning clear (``blocks.Clear``).
PROVISIONED = "provisioned"
CONSISTENCY = "consistency"


@dataclass(frozen=True)
class _Layout:
    """How the rows of one table (with one column layout) become documents."""

    ns: Namespace
    #: ``schema.table`` of the source.
    table: str
    columns: tuple[str, ...]
    fields: tuple[str, ...]
    #: ``_id``, ``_seqno``, then the fields: the keys of a row's document, in order.
    doc_keys: tuple[str, ...]
    convert: RowConverter
    #: Positions of the primary key columns (empty: the table has no key), in key order.
    key: tuple[int, ...]
    key_converters: tuple[Converter, ...]

    def ident(self, row: Sequence[ThlValue]) -> Any:
        """The ``_id`` of a row: the key's value, or a sub-document of a composite key."""
        if len(self.key) == 1:
            i = self.key[0]
            return self.key_converters[0](row[i])
        return {self.fields[i]: conv(row[i])
                for i, conv in zip(self.key, self.key_converters, strict=True)}


def namespace(cfg: MongoTarget, service: str, schema: str, table: str) -> Namespace:
    """Where the documents of a source table live: the ``database`` and ``collection``
    templates, with schema and table escaped in the collection name (``escape_names``)."""
    escape = escape_name if cfg.escape_names else str
    return Namespace(cfg.database.format(schema=schema, service=service),
                     cfg.collection.format(schema=escape(schema), table=escape(table)))


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
        self._types = TypeOptions()
        self._layouts: dict[tuple[object, ...], _Layout] = {}
        self._namespaces: dict[tuple[str, str], Namespace] = {}
        self._mark_indexes: set[Namespace] = set()
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
        self._beats: list[Heartbeat] = []
        self._seqno = -1
        self._seqno64 = Int64(-1)
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

    def _call(self, call: Callable[[], _T], doing: str, seqno: int = -1,
              event_id: str = "") -> _T:
        try:
            return call()
        except PyMongoError as exc:
            raise classify(exc, self.target, doing, seqno, event_id) from exc

    def connect(self) -> None:
        if self._client is None:
            self._client = MongoClient(self.cfg.url, **self.cfg.client_options())
        admin = self.client.admin
        build = self._call(lambda: admin.command("buildInfo"), "reading buildInfo")
        hello = self._call(lambda: admin.command("hello"), "reading hello")
        traits = detect(build, hello)
        try:
            self._transactions = use_transactions(self.cfg.transactions, traits)
            self._types = TypeOptions(decimal128=use_decimal128(self.cfg.decimal, traits))
        except Unsupported as exc:
            raise TerminalError(f"{self.target}: {exc}") from exc
        if self.traits != traits:
            log.info("%s: %s; transactions %s, decimals as %s", self.target, traits.name,
                     "on" if self._transactions else "off",
                     "Decimal128" if self._types.decimal128 else "strings")
        self.traits = traits
        self._layouts.clear()
        self._namespaces.clear()
        self._marks.clear()

    def position(self) -> Position | None:
        coll = self.client[self.tracking_db][COMMIT_SEQNO]
        doc = self._call(lambda: coll.find_one({ID: TASK_ID}), f"reading {COMMIT_SEQNO}")
        self._marks.clear()
        if doc is None or doc.get("seqno") is None:
            self._expected = None
            return None
        self._expected = int(doc["seqno"])
        return Position(seqno=int(doc["seqno"]), epoch=int(doc.get("epoch_number") or 0),
                        event_id=str(doc.get("eventid") or ""),
                        source_id=str(doc.get("source_id") or ""),
                        fragno=int(doc.get("fragno") or 0),
                        last_frag=bool(doc.get("last_frag", True)),
                        shard_id=str(doc.get("shard_id") or ""))

    def reset(self) -> None:
        coll = self.client[self.tracking_db][COMMIT_SEQNO]
        self._call(lambda: coll.delete_one({ID: TASK_ID}), f"clearing {COMMIT_SEQNO}")
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
        self._writes = KeyedWrites()
        self._keyless = {}
        self._clears = {}
        self._beats = []
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
        writes, keyless, clears = self._writes, self._keyless, self._clears
        self._writes, self._keyless, self._clears = KeyedWrites(), {}, {}
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongodb-write")
        self._inflight = self._writer.submit(self._write_data, writes, keyless, None,
                                             self._marks, clears)

    def _wait(self) -> None:
        job, self._inflight = self._inflight, None
        if job is not None:
            job.result()

    def _mapped(self, call: Callable[[], None], doing: str, seqno: int = -1) -> None:
        """``call()`` with pymongo's and BSON's errors as the consumer's."""
        try:
            call()
        except Unencodable as exc:
            raise self._data_error(exc.write, exc.write.table, None, str(exc)) from exc
        except PyMongoError as exc:
            raise classify(exc, self.target, doing, seqno) from exc

    # -- consistency checks (trepctl check) ---------------------------------------------------

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The live documents of a checked key range, as the source rows they stand for, in
        THL values (``consumers.check``): the type map backwards. The range is cut here,
        not in the query: key order is the source's (typed) order, not BSON's."""
        if len(self._writes) or self._keyless or self._clears or self._inflight is not None:
            # The runtime gives a check a block of its own; write anything pending first.
            self._mapped(self._wait, "writing before a check")
            self._mapped(lambda: self._write_data(self._writes, self._keyless, None,
                                                  self._marks, self._clears),
                         "writing before a check")
            self._writes, self._keyless, self._clears = KeyedWrites(), {}, {}
        ns = namespace(self.cfg, self.service, check.schema, check.table)
        fields = [field_name(c.name, self.cfg.escape_names) for c in check.specs]
        json_text = [self.cfg.is_json(check.schema, check.table, c.name) for c in check.specs]
        names = [c.name for c in check.specs]
        key_at = [names.index(k) for k in check.key]
        coll = self.client[ns.database][ns.collection]
        try:
            for doc in coll.find({DELETED: {"$exists": False}}):
                try:
                    values = [thl_value(spec, doc.get(f), j)
                              for spec, f, j in zip(check.specs, fields, json_text,
                                                    strict=True)]
                except ValueRefused as exc:
                    raise DataError(f"{self.target}: {ns}: document {doc.get(ID)!r} cannot be "
                                    f"checked: {exc}") from exc
                if key_at and not check.contains([values[i] for i in key_at]):
                    continue
                yield values
        except PyMongoError as exc:
            raise classify(exc, self.target, f"reading {ns} for a check") from exc

    def record_check(self, result: CheckResult) -> None:
        """Upsert the range's document in ``tungsten_<service>.consistency`` (Tungsten's
        ``consistency`` table's columns as fields)."""
        doc = {ID: {"db": result.schema, "tbl": result.table, "id": result.range},
               "db": result.schema, "tbl": result.table, "id": result.range,
               "row_offset": result.range * result.limit, "row_limit": result.limit,
               "this_crc": result.target_digest[:40], "this_cnt": result.target_count,
               "master_crc": result.source_digest[:40], "master_cnt": result.source_count,
               "ts": dt.datetime.now(dt.UTC).replace(tzinfo=None), "method": result.method,
               "group": self.group, "seqno": Int64(result.seqno), "check": result.to_json()}
        coll = self.client[self.tracking_db][CONSISTENCY]
        self._call(lambda: coll.replace_one({ID: doc[ID]}, doc, upsert=True),
                   "recording a consistency check", result.seqno)

    def commit(self, position: Position) -> None:
        if not self._open:
            raise RuntimeError("no open block: begin() first")
        try:
            self._mapped(self._wait, f"committing up to seqno {position.seqno}",
                         position.seqno)
            if self._transactions:
                self._commit_in_transaction(position)
            else:
                self._write_block(position, None, self._marks)
        except Unencodable as exc:
            raise self._data_error(exc.write, exc.write.table, None, str(exc)) from exc
        except PyMongoError as exc:
            raise classify(exc, self.target, f"committing up to seqno {position.seqno}",
                           position.seqno) from exc
        finally:
            self._open = False
            self._writes, self._keyless, self._beats = KeyedWrites(), {}, []
            self._clears = {}
        self._expected = position.seqno

    def _commit_in_transaction(self, position: Position) -> None:
        def block(session: ClientSession) -> None:
            # A retried transaction starts over: marks read inside it die with it.
            self._write_block(position, session, {})

        with self.client.start_session() as session:
            session.with_transaction(block, read_concern=ReadConcern("snapshot"),
                                     write_concern=WriteConcern("majority"))

    def _write_data(self, writes: KeyedWrites, keyless: dict[Namespace, list[KeylessOp]],
                    session: ClientSession | None,
                    marks: dict[Namespace, tuple[int, int]],
                    clears: dict[Namespace, Clear] | None = None) -> None:
        # Before the writes: every write of a cleared collection left in the block comes
        # from the chunk's seqno or later (``_clear`` dropped the older ones).
        by_ns = writes.by_namespace()
        for ns, clear in (clears or {}).items():
            self._empty(ns, clear, session, marks,
                        {key_of(w.ident) for w in by_ns.get(ns, [])})
        for ns, run in by_ns.items():
            self._guarded(ns, run, session)
        for ns, ops in keyless.items():
            self._apply_keyless(ns, ops, session, marks)

    def _write_block(self, position: Position, session: ClientSession | None,
                     marks: dict[Namespace, tuple[int, int]]) -> None:
        self._write_data(self._writes, self._keyless, session, marks, self._clears)
        if self._beats:
            self._guarded(Namespace(self.tracking_db, HEARTBEAT),
                          [self._beat(b) for b in self._beats], session)
        crashpoints.reached("apply-before-position")
        self._advance(position, session)

    # -- rows into writes --------------------------------------------------------------------

    def _namespace(self, schema: str, table: str, event: ThlEvent) -> Namespace:
        found = self._namespaces.get((schema, table))
        if found is not None:
            return found
        found = namespace(self.cfg, self.service, schema, table)
        problem = database_problem(found.database, self.server.ferretdb)
        what = f"database {found.database!r}"
        if problem is None:
            problem = collection_problem(found.database, found.collection)
            what = f"collection {found.collection!r}"
        if problem is not None:
            raise self._data_error(event, f"{schema}.{table}", None,
                                   f"{what} cannot be used on {self.server.name}: {problem}; "
                                   "map the table elsewhere with the target's `database` and "
                                   "`collection` templates, or filter it out")
        self._namespaces[(schema, table)] = found
        return found

    def _layout(self, change: RowChange, specs: list[ColumnSpec], event: ThlEvent) -> _Layout:
        signature = (change.schema, change.table, *[
            (c.name, c.type, c.length, c.scale, c.unsigned, c.primary_key, c.blob,
             c.charset is None)
            for c in specs])
        found = self._layouts.get(signature)
        if found is not None:
            return found
        table = f"{change.schema}.{change.table}"
        ns = self._namespace(change.schema, change.table, event)
        fields = tuple(field_name(c.name, self.cfg.escape_names) for c in specs)
        if not self.cfg.escape_names:
            for spec, name in zip(specs, fields, strict=True):
                problem = refused_field(name, self.server.ferretdb)
                if problem is not None:
                    raise self._data_error(event, table, spec.name,
                                           f"the column name cannot be a field name: {problem};"
                                           " set escape_names: true or rename the column")
        if len(set(fields)) != len(fields):
            raise self._data_error(event, table, None, "two columns map to the same field")
        key = tuple(i for i, c in enumerate(specs) if c.primary_key)
        found = _Layout(ns, table, tuple(c.name for c in specs), fields, (ID, SEQNO, *fields),
                        RowConverter([converter(c, self._types, self.cfg.is_json(
                            change.schema, change.table, c.name)) for c in specs]), key,
                        tuple(key_converter(specs[i], self._types) for i in key))
        self._layouts[signature] = found
        return found

    def _convert(self, layout: _Layout, row: Sequence[ThlValue], event: ThlEvent
                 ) -> list[Any]:
        try:
            return layout.convert(row)
        except (ValueError, TypeError) as exc:
            failed = layout.convert.failed(row)
            column, why = (layout.columns[failed[0]], failed[1]) if failed else (None, str(exc))
            raise self._data_error(event, layout.table, column,
                                   f"the value cannot be stored: {why}") from exc

    def _ident(self, layout: _Layout, row: Sequence[ThlValue], event: ThlEvent) -> Any:
        try:
            return layout.ident(row)
        except (ValueError, TypeError) as exc:
            raise self._data_error(event, layout.table, None,
                                   f"the primary key cannot be an _id: {exc}") from exc

    def _clear(self, event: ThlEvent, schema: str, table: str) -> None:
        """A table's first provisioned chunk: its collection is emptied before the chunk's
        rows are written (``blocks.Clear``). The block's pending changes of that collection
        are dropped: whatever they would have written, the clear removes."""
        ns = self._namespace(schema, table, event)
        specs = next((item.column_specs or item.key_specs for item in event.data
                      if isinstance(item, RowChange)
                      and (item.schema, item.table) == (schema, table)), [])
        self._writes.drop(ns)
        self._keyless.pop(ns, None)
        self._clears[ns] = Clear(event.seqno, event.event_id, f"{schema}.{table}",
                                 keyless=not any(c.primary_key for c in specs))

    def _rows(self, change: RowChange, event: ThlEvent, loose: bool = False) -> None:
        after = self._layout(change, change.column_specs, event) \
            if change.column_values else None
        before = self._layout(change, change.key_specs, event) if change.key_values else None
        layout = after or before
        keyed = layout is not None and bool(layout.key)
        for r in range(change.row_count):
            new = change.column_values[r] if after is not None else None
            old = change.key_values[r] if before is not None else None
            if keyed:
                self._keyed_row(event, after, new, before, old)
            elif layout is not None:
                self._keyless_row(event, layout, after, new, before, old, loose)

    def _next(self) -> int:
        self._ordinal += 1
        return self._ordinal

    def _keyed_row(self, event: ThlEvent, after: _Layout | None, new: Sequence[ThlValue] | None,
                   before: _Layout | None, old: Sequence[ThlValue] | None) -> None:
        if before is not None and old is not None:
            old_id = self._ident(before, old, event)
            new_id = self._ident(after, new, event) if after is not None and new is not None \
                else None
            if new_id is None or key_of(new_id) != key_of(old_id):
                # A delete, or a key change: the old key's document becomes a tombstone.
                self._writes.add(before.ns, Write(event.seqno, self._next(), event.event_id,
                                                  before.table, old_id, None))
        if after is not None and new is not None:
            values = self._convert(after, new, event)
            ident = self._ident(after, new, event)
            # The row converter checked the width: the keys and values pair up.
            doc = dict(zip(after.doc_keys, [ident, self._seqno64, *values], strict=False))
            self._writes.add(after.ns, Write(event.seqno, self._next(), event.event_id,
                                             after.table, ident, doc))

    def _keyless_row(self, event: ThlEvent, layout: _Layout, after: _Layout | None,
                     new: Sequence[ThlValue] | None, before: _Layout | None,
                     old: Sequence[ThlValue] | None, loose: bool = False) -> None:
        after_doc = dict(zip(after.fields, self._convert(after, new, event), strict=True)) \
            if after is not None and new is not None else None
        before_doc = dict(zip(before.fields, self._convert(before, old, event), strict=True)) \
            if before is not None and old is not None else None
        self._keyless.setdefault(layout.ns, []).append(KeylessOp(
            event.seqno, self._next(), event.event_id, layout.table, before_doc, after_doc,
            loose))

    def _beat(self, beat: Heartbeat) -> Write:
        def naive(value: dt.datetime | None) -> dt.datetime | None:
            return value.astimezone(dt.UTC).replace(tzinfo=None) if value else None
        fields = {"seqno": Int64(beat.seqno), "eventid": beat.event_id,
                  "source_tstamp": naive(beat.source_tstamp),
                  "target_tstamp": naive(beat.target_tstamp), "lag_millis": beat.lag_millis,
                  "salt": beat.salt, "name": beat.name}
        return Write(beat.seqno, 0, beat.event_id, f"{self.tracking_db}.{HEARTBEAT}",
                     Int64(beat.id), row_document(Int64(beat.id), beat.seqno, fields.items()))

    # -- writing -----------------------------------------------------------------------------

    def _data_error(self, event: ThlEvent | Write | KeylessOp, table: str, column: str | None,
                    why: str) -> DataError:
        where = f"seqno {event.seqno} (event {event.event_id}), table {table}"
        if column is not None:
            where += f", column {column}"
        return DataError(f"{self.target}: {where}: {why}", seqno=event.seqno,
                         event_id=event.event_id)

    def _update(self, ns: Namespace, specs: list[dict[str, Any]],
                session: ClientSession | None) -> RawDoc:
        db: Database[RawDoc] = self.client[ns.database]
        return db.command({"update": ns.collection, "updates": specs, "ordered": True},
                          session=session)

    def _check_sizes(self, writes: list[Write]) -> None:
        """A document above the server's limit is a data error here, before it is sent:
        FerretDB stores one, a MongoDB server refuses it, pymongo's insert_many does not
        check. Cheap for the usual rows: only a document whose values could add up to the
        limit is encoded to know its size."""
        limit = self._max_bson()
        for w in writes:
            if w.raw is None and _upper_bound(w.document()) < limit:
                continue
            if w.encode() > limit:
                why = too_large(
                    "the document", w.table, w.seqno, w.encode(),
                    largest((w.document() or {}).items()),
                    f"the {mib(self._max_bson())} the server takes (maxBsonObjectSize, "
                    "fixed in MongoDB)", "no setting raises it")
                raise DataError(f"{self.target}: {why}", seqno=w.seqno, event_id=w.event_id)

    def _send(self, ns: Namespace, writes: list[Write], session: ClientSession | None
              ) -> list[RawDoc]:
        """One ordered update command of these writes; its write errors."""
        self._check_sizes(writes)
        reply = self._update(ns, [w.spec() for w in writes], session)
        errors: list[RawDoc] = reply.get("writeErrors") or []
        return errors

    def _max_bson(self) -> int:
        return self.server.max_bson_size

    def _guarded(self, ns: Namespace, writes: list[Write], session: ClientSession | None
                 ) -> None:
        """Apply guarded writes of one namespace; already applied ones change nothing."""
        self._check_sizes(writes)
        if session is None and self.server.scanning_updates:
            self._insert_first(ns, writes)
            return
        for run in chunks(writes, self.cfg.batch_ops):
            if session is not None:
                # Inside a transaction a write error aborts everything: leave out, by their
                # stored seqnos, the writes a replay would find already applied.
                run = fresh(run, self._stored_seqnos(ns, run, session))
                if run:
                    errors = self._send(ns, run, session)
                    if errors:
                        index = int(errors[0].get("index", 0))
                        raise self._refused(run[index if 0 <= index < len(run) else 0],
                                            errors[0])
                continue
            errors = self._send(ns, run, None)
            if not errors:
                continue
            if all(e.get("code") == DUPLICATE_KEY for e in errors):
                # Already applied writes (a replay) stop an ordered command, and FerretDB
                # does not say which one it stopped at: send again what is not applied yet.
                run = fresh(run, self._stored_seqnos(ns, run, None))
                if not run or not self._send(ns, run, None):
                    continue
            self._one_by_one(ns, run)

    def _insert_first(self, ns: Namespace, writes: list[Write]) -> None:
        """Guarded writes where every update statement scans the collection (FerretDB).

        Documents that do not exist yet (most rows of an insert) go in with one unordered
        ``insert_many``; for the ones that collide with an existing ``_id``, the stored
        ``_seqno``s are read, the already applied ones are left alone, and the others are
        deleted and inserted again, each in one statement: a few scans per thousand
        documents instead of one per document. A crash between that delete and insert
        leaves those documents missing until the runtime applies the block again from the
        stored position (which it does first).
        """
        taken = self._insert(ns, writes)
        for start in range(0, len(taken), self.cfg.batch_ops):
            run = taken[start:start + self.cfg.batch_ops]
            newer = fresh(run, self._stored_seqnos(ns, run, None))
            if not newer:
                continue
            coll = self.client[ns.database][ns.collection]
            coll.delete_many({ID: {"$in": [w.ident for w in newer]}})
            # With their _id gone, a duplicate key can only come from another unique index.
            self._insert(ns, newer, duplicates_refused=True)

    def _insert(self, ns: Namespace, writes: list[Write], duplicates_refused: bool = False
                ) -> list[Write]:
        """Insert the documents of these writes (unordered); the ones whose ``_id`` exists.

        Through ``insert_many``: pymongo sends the documents as OP_MSG document sequences,
        which FerretDB takes faster than one command document holding them all.
        """
        coll = self.client[ns.database][ns.collection]
        try:
            coll.insert_many([w.document() for w in writes], ordered=False)
        except BulkWriteError as exc:
            taken = []
            for error in exc.details.get("writeErrors") or []:
                index = int(error.get("index", -1))
                w = writes[index] if 0 <= index < len(writes) else writes[0]
                if error.get("code") != DUPLICATE_KEY or duplicates_refused:
                    raise self._refused(w, error) from exc
                taken.append(w)
            return taken
        except (DocumentTooLarge, InvalidDocument) as exc:
            # Slow path, for the error only: encode each to find the culprit.
            self._check_sizes(writes)
            raise classify(exc, self.target, f"inserting into {ns}", writes[-1].seqno,
                           writes[-1].event_id) from exc
        return []

    def _one_by_one(self, ns: Namespace, writes: list[Write]) -> None:
        """Each write alone, to tell an already applied one from the one the server refuses."""
        for w in writes:
            errors = self._send(ns, [w], None)
            if not errors:
                continue
            if errors[0].get("code") == DUPLICATE_KEY and self._stored_seqnos(
                    ns, [w], None).get(key_of(w.ident), -1) >= w.seqno:
                continue  # already applied
            raise self._refused(w, errors[0])

    def _refused(self, w: Write, error: RawDoc) -> DataError:
        if error.get("code") == DUPLICATE_KEY:
            why = ("a unique index other than _id refuses the document (duplicate key): "
                   f"{error_text(error)}")
        else:
            why = f"the server refuses the document: {error_text(error)}"
        return self._data_error(w, w.table, None, why)

    def _stored_seqnos(self, ns: Namespace, writes: list[Write],
                       session: ClientSession | None) -> dict[Any, int]:
        coll = self.client[ns.database][ns.collection]
        ids = [w.ident for w in writes]
        found: dict[Any, int] = {}
        for doc in coll.find({ID: {"$in": ids}}, {SEQNO: 1}, session=session):
            seqno = doc.get(SEQNO)
            found[key_of(doc[ID])] = int(seqno) if seqno is not None else -1
        return found

    # -- tables without a primary key ----------------------------------------------------------

    def _apply_keyless(self, ns: Namespace, ops: list[KeylessOp],
                       session: ClientSession | None,
                       marks: dict[Namespace, tuple[int, int]]) -> None:
        coll = self.client[ns.database][ns.collection]
        mark = marks.get(ns)
        if mark is None:
            mark = self._read_mark(ns, session)
        inserts: list[Write] = []
        try:
            for op in ops:
                if op.before is None:
                    inserts.append(op.insert())
                    continue
                if inserts:
                    self._guarded(ns, inserts, session)
                    inserts = []
                if op.mark <= mark:
                    continue  # applied before a restart
                found = coll.find_one({**op.before, DELETED: {"$exists": False}}, {ID: 1},
                                      sort=[(ID, ASCENDING)], session=session)
                if found is None and op.loose:
                    # Provisioning: the row may not be here yet; its chunk brings it.
                    continue
                if found is None:
                    raise self._data_error(
                        op, op.table, None,
                        f"no document of {ns} equals the row to "
                        f"{'update' if op.after is not None else 'delete'}: the target has "
                        "diverged from the source")
                # By _id alone: the one filter FerretDB does not answer with a scan.
                reply = self._update(ns, [{"q": {ID: found[ID]},
                                           "u": op.replacement(found[ID]),
                                           "upsert": False}], session)
                errors = reply.get("writeErrors")
                if errors:
                    raise self._data_error(op, op.table, None, "the server refuses the "
                                           f"document: {error_text(errors[0])}")
                if reply.get("n") == 0:
                    raise PositionConflict(
                        f"{self.target}: {ns}: a document went away under this consumer "
                        f"while seqno {op.seqno} was applied: another process applies the "
                        "same consumer group to this target", seqno=op.seqno)
                mark = op.mark
            if inserts:
                self._guarded(ns, inserts, session)
        finally:
            marks[ns] = mark

    def _empty(self, ns: Namespace, clear: Clear, session: ClientSession | None,
               marks: dict[Namespace, tuple[int, int]], written: set[Any]) -> None:
        """Carry out a provisioning clear (``blocks.Clear``), unless it was done before.

        ``written``: the documents (``key_of``) the block writes next in this collection,
        at the chunk's seqno or later; they get no tombstone (one at the chunk's seqno would
        refuse the chunk's own row, the guard being strict) and are replaced anyway.
        """
        marker = self.client[self.tracking_db][PROVISIONED]
        key = str(ns)
        done = marker.find_one({ID: key}, {SEQNO: 1}, session=session)
        if done is not None and int(done.get(SEQNO, -1)) >= clear.seqno:
            return  # a replay: this clear (or a later one) happened already
        coll = self.client[ns.database][ns.collection]
        # Not written by the replicator (no _seqno): no replay can need them.
        coll.delete_many({SEQNO: {"$exists": False}}, session=session)
        ids = [doc[ID] for doc in coll.find(
            {SEQNO: {"$lt": Int64(clear.seqno)}, DELETED: {"$exists": False}}, {ID: 1},
            session=session) if key_of(doc[ID]) not in written]
        if ids:
            self._guarded(ns, [clear.tombstone(i) for i in ids], session)
        if clear.keyless and ns in marks:
            # The tombstones carry this mark (a mark not known yet is read from them).
            marks[ns] = max(marks[ns], (clear.seqno, 0))
        self._guarded(Namespace(self.tracking_db, PROVISIONED), [Write(
            clear.seqno, 0, clear.event_id, clear.table, key,
            row_document(key, clear.seqno, [("database", ns.database),
                                            ("collection", ns.collection)]))], session)
        log.info("%s: %s emptied for provisioning at seqno %d (%d document(s))", self.target,
                 ns, clear.seqno, len(ids))

    def _read_mark(self, ns: Namespace, session: ClientSession | None) -> tuple[int, int]:
        coll = self.client[ns.database][ns.collection]
        if ns not in self._mark_indexes and session is None:
            # Finds the highest _op without a scan (idempotent; outside transactions only).
            coll.create_index([(f"{OP}.s", DESCENDING), (f"{OP}.r", DESCENDING)],
                              name="tungsten_op")
            self._mark_indexes.add(ns)
        top = coll.find_one({OP: {"$exists": True}}, {OP: 1},
                            sort=[(f"{OP}.s", DESCENDING), (f"{OP}.r", DESCENDING)],
                            session=session)
        if top is None:
            return (-1, -1)
        return int(top[OP]["s"]), int(top[OP]["r"])

    # -- the position ------------------------------------------------------------------------

    def _advance(self, position: Position, session: ClientSession | None) -> None:
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        source_time = dt.datetime.fromtimestamp(position.tstamp / 1e6, dt.UTC).replace(
            tzinfo=None)
        doc = {ID: TASK_ID, "task_id": TASK_ID, "seqno": Int64(position.seqno),
               "fragno": position.fragno, "last_frag": position.last_frag,
               "source_id": position.source_id, "epoch_number": Int64(position.epoch),
               "eventid": position.event_id,
               "applied_latency": max(0, int((now - source_time).total_seconds())),
               "update_timestamp": now, "shard_id": position.shard_id,
               "extract_timestamp": source_time}
        # Matches only the position this applier expects; otherwise the upsert collides with
        # the stored document's _id and nothing is written.
        expected: Any = Int64(self._expected) if self._expected is not None else None
        reply = self._update(Namespace(self.tracking_db, COMMIT_SEQNO),
                             [{"q": {ID: TASK_ID, "seqno": expected}, "u": doc,
                               "upsert": True}], session)
        errors = reply.get("writeErrors")
        if errors:
            if errors[0].get("code") == DUPLICATE_KEY:
                stored = self.client[self.tracking_db][COMMIT_SEQNO].find_one(
                    {ID: TASK_ID}, session=session)
                found = stored.get("seqno") if stored else None
                raise PositionConflict(
                    f"{self.target}: {self.tracking_db}.{COMMIT_SEQNO} moved under this "
                    f"consumer (expected stored seqno "
                    f"{'none' if self._expected is None else self._expected}, found "
                    f"{'none' if found is None else found}): another process applies the same "
                    "consumer group to this target. The position was not written; run one "
                    "process per group.", seqno=position.seqno)
            raise DataError(f"{self.target}: writing {COMMIT_SEQNO}: "
                            f"{error_text(errors[0])}", seqno=position.seqno)



def _upper_bound(value: Any) -> int:
    """At least the BSON size of a value (a row's document, or a value in it): 4 bytes a
    UTF-8 character, 64 for numbers, dates and the like; nested documents summed."""
    if isinstance(value, (bytes, bytearray)):  # bson's Binary too
        return len(value) + 16
    if isinstance(value, str):
        return 4 * len(value) + 16
    if isinstance(value, dict):
        return sum(4 * len(k) + _upper_bound(v) for k, v in value.items()) + 16
    if isinstance(value, (list, tuple)):
        return sum(24 + _upper_bound(v) for v in value) + 16
    return 64
