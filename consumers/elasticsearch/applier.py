"""The Elasticsearch applier: THL row changes into one index per table, through the bulk API.

Elasticsearch has no multi-document transactions, so this applier is *seqno-guarded*:

- A block is collapsed to the last write per document, ordered by (seqno, fragment, row):
  several changes of one row in one block, one transaction included, become one write.
- Every write of a keyed row carries the seqno as its external version
  (``version_type=external``): Elasticsearch keeps a write only if its seqno is higher than
  the document's, so replaying a seqno is a no-op (409 ``version_conflict_engine_exception``
  = already applied). An UPDATE that changes the key deletes the old id and writes the new.
- The data goes first, in bulk requests of ``bulk_max_bytes`` at most, one at a time; the
  position last: a document in the ``tungsten_<service>`` index, written as a
  compare-and-set (``if_seq_no``/``if_primary_term``, or ``op_type=create``) against the
  position this applier read or wrote, so a second writer of the group gets a
  PositionConflict instead of moving the position under the first.
- A crash anywhere leaves whole documents of applied seqnos, never a document older than it
  was: the runtime replays from the stored position and the versions absorb the replay.
- A document the server refuses (mapping, parsing) is a DataError at its seqno; the other
  documents of that seqno may be written already (no transactions), and skipping the seqno
  keeps them.

Deletes (``deletes``): ``hard`` removes the document; Elasticsearch remembers the deleted
version for ``index.gc_deletes`` (60 s by default) and forgets it when the node restarts
(elastic/elasticsearch#101178), so a replay from before a delete older than that writes the
row again until the replay reaches the delete. ``tombstone`` writes a ``_deleted: true``
document (key columns only) with the delete's version instead: replays stay no-ops forever;
the documents live in ``<index>.all`` and the index name is a filtered alias without them.

A transaction in several THL fragments is the exception: the applier may send it in
several bulks (it sends what it holds once ``bulk_max_bytes`` are pending, between
fragments), so a document can be written at an intermediate state of the seqno, and a
replay may collapse that seqno's changes differently. Its writes use
``version_type=external_gte``: the same seqno may replace its own writes (later fragments,
or the replay of the whole transaction, which ends at the same final state), an older seqno
never can.

Tables without a primary key: a document per distinct row, ``_id`` = SHA-256 of the row, with
``_rows`` = how many source rows are equal to it. Each block reads those documents
(``mget``), adds the changes it has not applied yet (the document records the last
(seqno, fragment) it applied in ``_applied_seqno``/``_applied_fragno``) and writes them with
``if_seq_no``/``if_primary_term``; ``_rows`` reaching 0 deletes the document (``hard``) or
marks it ``_deleted`` (``tombstone``). A renamed column moves those documents to the hash
of the renamed row; after any other column change (added, dropped, retyped), rows written
before it are not found by their new hash: rebuild its index.

Statement events are skipped (policy SKIP); the schema changes they carry are followed by
the applier itself (issue 28): ``truncate`` empties the index, ``rename_table`` clones it
under the new name, ``rename_column`` rewrites the documents' field, ``drop_table`` deletes
the index (``restructure.py``). Indices and their mappings come from the row
changes' column specs (``types.py``): ``dynamic: strict``, a new column is added to the
mapping before the first document that has it, and the source table and column types are
recorded in the mapping's ``_meta.tungsten``. Nothing is refreshed: documents become
searchable at the index's refresh interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError, helpers

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.check import CheckRange, CheckResult
from consumers.elasticsearch import readback
from consumers.elasticsearch.bulk import BulkSender, Write
from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.elasticsearch.context import TargetContext
from consumers.elasticsearch.documents import BlockDocuments, Counted
from consumers.elasticsearch.errors import request_error
from consumers.elasticsearch.indices import IndexMappings, TableIndex, column_layout
from consumers.elasticsearch.naming import (
    TOMBSTONE_SUFFIX,
    IndexNameError,
    index_name,
    index_owners,
)
from consumers.elasticsearch.positions import Expected, TrackingIndex
from consumers.elasticsearch.restructure import (
    Reshape,
    column_writes,
    dropped_source,
    follow_rename,
    moved_source,
    owner_of,
    renamed_columns,
    renamed_meta,
    tungsten_meta,
)
from consumers.elasticsearch.truncation import empty_index
from consumers.elasticsearch.types import (
    APPLIED_FRAGNO,
    APPLIED_SEQNO,
    DELETED,
    INTERNAL_FIELDS,
    ROWS,
    dumps,
)
from consumers.errors import DataError, TransientError
from consumers.heartbeat import Heartbeat
from consumers.naming import NameCollision
from consumers.position import Position
from consumers.provisioning import chunk_of
from consumers.registry import ApplierContext
from consumers.zero_dates import ZeroDateRefused, ZeroDateTally, count_zero_dates
from replicator import crashpoints
from thl_topics.event import ColumnSpec, RowChange, ThlEvent, ThlValue
from thl_topics.schema_change import SchemaChange

log = logging.getLogger(__name__)

#: Documents per bulk request while a renamed column is rewritten.
_BATCH = 1000


class ElasticsearchApplier:
    """Applies THL events to one Elasticsearch cluster."""

    def __init__(self, cfg: ElasticsearchTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.target = cfg.printable()
        self.service = ctx.service.service
        self.group = ctx.group
        self.tombstones = cfg.deletes == "tombstone"
        self.capabilities = Capabilities(
            atomicity=Atomicity.SEQNO_GUARDED, statements=StatementPolicy.SKIP,
            keyless_tables=True,
            # Bulk requests want thousands of documents; the position write is per block.
            block=BlockLimits(events=500, rows=10_000, ms=1000), checks=True)
        self._es: Elasticsearch | None = None
        # The parts of the applier, each on its client (``es``).
        cluster = TargetContext(cfg, self.target, lambda: self.es)
        self._tracking = TrackingIndex(cluster, self.service, ctx.group,
                                       ctx.tracking_schema.lower())
        self._mappings = IndexMappings(cluster, self.service)
        self._bulk = BulkSender(cluster, self._forget_table)
        self._tables: dict[tuple[str, str], TableIndex] = {}
        #: Which table each index holds, to refuse a second table on one index.
        self._owners = index_owners()
        #: The position document's (_seq_no, _primary_term) as last read or written; None:
        #: no position stored (the next commit creates it).
        self._expected: Expected = None
        self._documents = BlockDocuments(cfg)
        self._beats: list[bytes] = []
        self._zeros = ZeroDateTally(self.target, ctx.metrics, log)

    @property
    def es(self) -> Elasticsearch:
        """The client (``connect`` first)."""
        if self._es is None:
            raise RuntimeError("not connected: connect() first")
        return self._es

    # -- connection -------------------------------------------------------------------------

    def connect(self) -> None:
        if self._es is None:
            self._es = Elasticsearch(**self.cfg.client_options())
        # A new session starts from what the cluster holds: indices may have been deleted
        # or recreated while this group was offline.
        self._tables.clear()
        self._owners.clear()
        try:
            self._mappings.features = self._mappings.detect_features()
            self._tracking.create()
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, "connecting") from exc

    def position(self) -> Position | None:
        found, self._expected = self._tracking.read()
        return found

    def reset(self) -> None:
        self._tracking.clear()
        self._expected = None

    def close(self) -> None:
        self.rollback()
        if self._es is not None:
            try:
                self._es.close()
            except Exception as exc:  # closing must not raise
                log.debug("close: %s", exc)
            self._es = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self.rollback()

    def apply(self, event: ThlEvent) -> None:
        self._documents.start(event)
        for item in event.data:
            if isinstance(item, RowChange):
                self._rows(item, event)
            # Statements never arrive: the policy is SKIP.
        if self._documents.pending_bytes >= self.cfg.bulk_max_bytes:
            # Bound memory inside a block (a large transaction): send what is collapsed so
            # far. Only between fragments, so a table without a key never sees a fragment
            # half applied.
            self._flush()

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        """Every document of the table's index goes at this seqno (``truncation``)."""
        self._flush()
        found = self._tables.get((schema, table))
        if found is None:
            alias = self._alias(schema, table, event.seqno)
            index = alias + TOMBSTONE_SUFFIX if self.tombstones else alias
            try:
                if not self.es.indices.exists(index=index):
                    return  # never made here: nothing to empty
            except (ApiError, TransportError) as exc:
                raise request_error(exc, self.target, f"reading index {index}",
                                    seqno=event.seqno) from exc
            found = self._tables[(schema, table)] = self._open_table(schema, table, [],
                                                                     event.seqno)
        try:
            done = empty_index(self.es, self._bulk, found, event.seqno, self.tombstones)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, f"emptying index {found.index} (TRUNCATE "
                                "at the source)", seqno=event.seqno) from exc
        log.info("%s: index %s emptied at seqno %d (TRUNCATE at the source): %d document(s)",
                 self.target, found.index, event.seqno, done)

    # -- schema changes (issue 28) -----------------------------------------------------------

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The table's index is cloned under the new table's name, the old one goes
        (``restructure.follow_rename``); documents keep their ids and versions."""
        self._flush()
        old = self._names(change.schema, change.table, event.seqno)
        new_schema, new_name = change.new_schema or change.schema, change.new_name or ""
        new = self._names(new_schema, new_name, event.seqno)
        what = f"renaming index {old[1]} to {new[1]} (table {change.schema}.{change.table} " \
            f"renamed to {new_schema}.{new_name})"
        if new[1] == self._tracking.index:
            raise DataError(f"{self.target}: table {new_schema}.{new_name} would go to index "
                            f"{new[1]}, the replicator's tracking index; name another one in "
                            f"`indices` (seqno {event.seqno})", seqno=event.seqno)
        self._forget_names(old[1], (change.schema, change.table), (new_schema, new_name))
        try:
            done = self._rename_index(change, old, new, (new_schema, new_name))
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, what, seqno=event.seqno) from exc
        self._forget_names(new[1], (new_schema, new_name))
        log.info("%s: %s at seqno %d: %s", self.target, what, event.seqno, {
            "absent": "no such index (never made here, or renamed already): nothing to do",
            "both": "both indices exist and the old one is not being renamed: left alone",
            "other": "the index holds another table: left alone",
            "renamed": "done"}[done])

    def _rename_index(self, change: SchemaChange, old: tuple[str, str],
                      new: tuple[str, str], to: tuple[str, str]) -> str:
        meta = tungsten_meta(self.es, old[1])
        if meta is None:
            return "absent"
        if owner_of(meta) == (self.service, *to):
            return "absent"  # one index for both names, its owner changed already
        if owner_of(meta) != (self.service, change.schema, change.table):
            return "other"
        renamed = renamed_meta(meta, *to)
        if old[1] == new[1]:  # both names make the same index: only its owner changes
            self.es.indices.put_mapping(index=new[1], meta=renamed)
            return "renamed"
        alias = (new[0], {"bool": {"must_not": {"term": {DELETED: True}}}}) \
            if self.tombstones else None
        return follow_rename(self.es, old[1], new[1], renamed, alias, self.target)

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        """The new field gets the old one's mapping and every document that has the old
        field gets the new one (``restructure.column_writes``): moved (``evolve``), or copied
        with the old one kept (``lenient``; a key column is moved all the same). The old
        field stays in the mapping (Elasticsearch cannot remove one); ``_meta`` no longer
        lists it when moved."""
        old, new = change.column or "", change.new_name or ""
        what = f"renaming column {old} to {new} of table {change.schema}.{change.table}"

        def rename(table: TableIndex) -> str:
            if new in INTERNAL_FIELDS or new in self.cfg.document_fields:
                raise DataError(f"{self.target}: {what} (seqno {event.seqno}): {new} is the "
                                "name of a field the replicator adds to every document; drop "
                                "that document field from the target's `document_fields`, or "
                                "rename the column with a filter", seqno=event.seqno)
            moved = not keep_old or self._is_key(table, old, new)
            self._rename_field(table, old, new, not moved, event.seqno)
            done = self._rewrite(table, lambda src: moved_source(src, old, new, not moved),
                                 what, event.seqno)
            return f"{'moved' if moved else 'old field kept'}, {done} document(s)"
        self._column_change(change, what, rename, event)

    def drop_column(self, change: SchemaChange, event: ThlEvent) -> None:
        """``evolve``: the field goes from every document (scan and bulk at each document's
        own version; keyless documents move to the hash of their row without it) and from
        ``_meta``; it stays in the mapping, empty (Elasticsearch cannot remove one)."""
        name = change.column or ""
        what = f"dropping column {name} of table {change.schema}.{change.table}"

        def drop(table: TableIndex) -> str:
            self._unlist(table, name)
            done = self._rewrite(table, lambda src: dropped_source(src, name), what,
                                 event.seqno)
            return f"{done} document(s) (schema_changes: evolve)"
        self._column_change(change, what, drop, event)

    def _column_change(self, change: SchemaChange, what: str,
                       carry_out: Callable[[TableIndex], str], event: ThlEvent) -> None:
        """``carry_out`` on the table's index, if this table has one here; the table's
        cached mapping is forgotten after it, whatever happens."""
        self._flush()
        table = self._existing(change.schema, change.table, event.seqno)
        if table is None:
            log.info("%s: %s at seqno %d: no index of the table here: nothing to do",
                     self.target, what, event.seqno)
            return
        try:
            done = carry_out(table)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, f"{what} (index {table.index})",
                                seqno=event.seqno) from exc
        finally:
            # The next row reads the mapping and ``_meta`` afresh.
            self._forget_table(table)
        log.info("%s: %s (index %s) at seqno %d: %s", self.target, what, table.index,
                 event.seqno, done)

    def _rewrite(self, table: TableIndex, reshape: Reshape, what: str, seqno: int) -> int:
        """Every document ``reshape`` changes, written back; how many writes."""
        self.es.indices.refresh(index=table.index)
        done = self._send_all(column_writes(self.es, table, reshape, what, seqno,
                                            frozenset(self.cfg.document_fields)))
        self.es.indices.refresh(index=table.index)
        return done

    def _unlist(self, table: TableIndex, column: str) -> None:
        """``_meta`` no longer lists ``column`` (a replay finds it gone already)."""
        meta = tungsten_meta(self.es, table.index) or {}
        tungsten = dict(meta.get("tungsten") or {})
        columns = list(tungsten.get("columns") or [])
        kept = [c for c in columns if c.get("name") != column]
        if kept != columns:
            self.es.indices.put_mapping(index=table.index,
                                        meta={**meta, "tungsten": {**tungsten, "columns": kept}})

    def _is_key(self, table: TableIndex, old: str, new: str) -> bool:
        # A replay finds the spec under the new name already.
        spec = table.columns.get(old) or table.columns.get(new)
        return bool(spec and ColumnSpec.from_avro(spec).primary_key)

    def _rename_field(self, table: TableIndex, old: str, new: str, keep_old: bool,
                      seqno: int) -> None:
        """The mapping of ``new`` = that of ``old``; ``_meta`` lists the renamed column."""
        found = self.es.indices.get_mapping(index=table.index).body
        mapping = next(iter(found.values()))["mappings"]
        properties = mapping.get("properties") or {}
        meta = dict(mapping.get("_meta") or {})
        tungsten = dict(meta.get("tungsten") or {})
        columns = renamed_columns(list(tungsten.get("columns") or []), old, new, keep_old)
        added = {new: properties[old]} if old in properties and new not in properties \
            else None
        if added is None and columns == tungsten.get("columns"):
            return  # done before (a replay)
        meta["tungsten"] = {**tungsten, "columns": columns}
        try:
            self.es.indices.put_mapping(index=table.index, properties=added, meta=meta)
        except ApiError as exc:
            if exc.status_code == 400:
                raise self._mappings.refused(table, exc, seqno) from exc
            raise

    def _send_all(self, writes: Iterator[Write]) -> int:
        """Send writes in batches as they come (an index may not fit in memory)."""
        done = 0
        batch: list[Write] = []
        for write in writes:
            batch.append(write)
            if len(batch) >= _BATCH:
                done += self._send_moves(batch)
                batch = []
        return done + self._send_moves(batch)

    def _send_moves(self, batch: list[Write]) -> int:
        """Deletes go only once every other write of the batch is in: an item retried
        after overload must not leave a keyless document deleted before its copy is made."""
        self._bulk.send([w for w in batch if w.action != "delete"])
        self._bulk.send([w for w in batch if w.action == "delete"])
        return len(batch)

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The table's index goes (in tombstone mode its alias with it)."""
        self._flush()
        _, index = self._names(change.schema, change.table, event.seqno)
        self._forget_names(index, (change.schema, change.table))
        try:
            meta = tungsten_meta(self.es, index)
            mine = meta is not None and \
                owner_of(meta) == (self.service, change.schema, change.table)
            if mine:
                self.es.indices.delete(index=index, ignore_unavailable=True)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, f"deleting index {index} (table "
                                f"{change.schema}.{change.table} dropped at the source)",
                                seqno=event.seqno) from exc
        log.info("%s: table %s.%s dropped at seqno %d: index %s %s", self.target,
                 change.schema, change.table, event.seqno, index,
                 "deleted" if mine else "absent or another table's: nothing to do")

    def _names(self, schema: str, table: str, seqno: int) -> tuple[str, str]:
        """(the name a table is read by, the index its documents are in)."""
        alias = self._alias(schema, table, seqno)
        return alias, alias + TOMBSTONE_SUFFIX if self.tombstones else alias

    def _forget_names(self, index: str, *tables: tuple[str, str]) -> None:
        """Tables and an index whose cached state a schema change makes stale."""
        for key in tables:
            self._tables.pop(key, None)
        self._owners.release(index)

    def _existing(self, schema: str, name: str, seqno: int) -> TableIndex | None:
        """The table's index if it is there and this table's (None: leave it alone)."""
        _, index = self._names(schema, name, seqno)
        try:
            meta = tungsten_meta(self.es, index)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, f"reading index {index}",
                                seqno=seqno) from exc
        if meta is None or owner_of(meta) != (self.service, schema, name):
            return None
        found = self._tables.get((schema, name))
        if found is None:
            found = self._tables[(schema, name)] = self._open_table(schema, name, [], seqno)
        return found

    def heartbeat(self, beat: Heartbeat) -> None:
        """A ``heartbeat`` document in the tracking index, sent with the block's data."""
        self._beats.append(self._tracking.heartbeat(beat))

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The documents of a checked key range, as the source rows they stand for, in THL
        values (consumers.check): the index's mapping says how each field decodes."""
        self._flush()
        alias = self._alias(check.schema, check.table, -1)
        yield from readback.read_range(self.es, alias, check, self.target)

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
                      ) -> Iterator[list[ThlValue]]:
        """The child rows of a cascade (``consumers.cascades``) as the index holds them
        (the open block's unsent documents are not among them: the caller has those)."""
        yield from readback.rows_matching(self.es, self._alias(schema, table, -1), specs,
                                          columns, values, self.target)

    def record_check(self, result: CheckResult) -> None:
        """A ``check`` document in the tracking index, per table and range."""
        self._tracking.record_check(result)

    def commit(self, position: Position) -> None:
        self._flush()
        crashpoints.reached("apply-before-position")
        self._expected = self._tracking.write(position, self._expected)
        self._zeros.commit(position.seqno)
        self.rollback()

    def rollback(self) -> None:
        self._documents.clear()
        self._beats.clear()
        self._zeros.rollback()

    # -- tables -----------------------------------------------------------------------------

    def _table(self, change: RowChange, specs: list[ColumnSpec], seqno: int,
               check_key: bool = True) -> TableIndex:
        key = (change.schema, change.table)
        table = self._tables.get(key)
        if table is None:
            table = self._open_table(change.schema, change.table, specs, seqno, check_key)
            self._tables[key] = table
        return table

    def _alias(self, schema: str, table: str, seqno: int) -> str:
        """The name a table's documents are read by (its index, or the alias over it)."""
        try:
            return index_name(self.cfg.index, self.service, schema, table, self.cfg.indices,
                              reserve=len(TOMBSTONE_SUFFIX) if self.tombstones else 0,
                              policy=self.cfg.names)
        except IndexNameError as exc:
            at = f" (seqno {seqno})" if seqno >= 0 else ""
            raise DataError(f"{self.target}: {exc}{at}", seqno=seqno) from exc

    def _open_table(self, schema: str, name: str, specs: list[ColumnSpec],
                    seqno: int, check_key: bool = True) -> TableIndex:
        alias = self._alias(schema, name, seqno)
        index = alias + TOMBSTONE_SUFFIX if self.tombstones else alias
        if index == self._tracking.index:
            raise DataError(f"{self.target}: table {schema}.{name} would go to index {index}, "
                            "the replicator's tracking index; name another one in `indices`",
                            seqno=seqno)
        try:
            self._owners.claim(index, f"{schema}.{name}")
        except NameCollision as exc:
            raise DataError(f"{self.target}: {exc} (seqno {seqno})", seqno=seqno) from exc
        table = TableIndex(schema, name, index, alias)
        quoted = dumps(index)
        table.index_prefix = b'{"index":{"_index":' + quoted + b',"_id":'
        table.delete_prefix = b'{"delete":{"_index":' + quoted + b',"_id":'
        try:
            self._mappings.create_or_read(table, specs, seqno, check_key)
        except (ApiError, TransportError) as exc:
            self._owners.release(index)
            raise request_error(exc, self.target, f"creating index {index} for table "
                                f"{schema}.{name}", seqno=seqno) from exc
        except DataError:
            self._owners.release(index)
            raise
        return table

    def _forget_table(self, table: TableIndex) -> None:
        """The table's index went away: the table is opened (its index made) again."""
        self._tables.pop((table.schema, table.table), None)
        self._owners.release(table.index)

    # -- rows -------------------------------------------------------------------------------

    def _rows(self, change: RowChange, event: ThlEvent) -> None:
        specs = change.column_specs or change.key_specs
        chunk = chunk_of(event)
        # A table's first provisioned chunk empties its index: no document is left to miss.
        clearing = chunk is not None and chunk.first and event.fragno == 0 and \
            (chunk.schema, chunk.table) == (change.schema, change.table)
        table = self._table(change, specs, event.seqno, check_key=not clearing)
        after_layout = column_layout(change.column_specs) if change.column_specs else None
        before_layout = column_layout(change.key_specs) if change.key_specs else None
        for layout, layout_specs in ((after_layout, change.column_specs),
                                     (before_layout, change.key_specs)):
            if layout is not None and layout not in table.layouts:
                self._mappings.update(table, layout_specs, event.seqno,
                                      check_key=not clearing)
        extra = self._documents.optional_fields(change.schema, change.table, event.seqno,
                                                event.tstamp)
        if clearing:
            self._clear(table, event, extra, keyed=any(s.primary_key for s in specs))
        zero_dates = self.cfg.zero_dates
        after = table.encoder(change.column_specs, after_layout, zero_dates) \
            if after_layout is not None else None
        before = table.encoder(change.key_specs, before_layout, zero_dates) \
            if before_layout is not None else None
        try:
            if not any(s.primary_key for s in specs):
                self._documents.keyless(table, change, event, after, before, extra)
            else:
                self._documents.keyed(table, change, event, after, before, extra)
        except ZeroDateRefused as exc:
            raise DataError(f"{self.target}: {table.qualified}, {exc}, seqno {event.seqno}",
                            seqno=event.seqno) from exc
        if zero_dates == "null":
            count_zero_dates(self._zeros, table.qualified, change)

    def _clear(self, table: TableIndex, event: ThlEvent, extra: dict[str, Any],
               keyed: bool) -> None:
        """A table's first provisioned chunk: every document it has goes (versioned with
        this seqno, so the chunk's own rows, written after, win on their ids)."""
        self._flush()
        try:
            if not self.es.indices.exists(index=table.index):
                return
            self.es.indices.refresh(index=table.index)
            ids = [hit["_id"] for hit in helpers.scan(
                self.es, index=table.index, query={"query": {"match_all": {}}}, size=1000,
                _source=False)]
        except (ApiError, TransportError) as exc:
            raise TransientError(f"{self.target}: listing {table.index} to provision it: "
                                 f"{exc}") from exc
        if ids and not keyed:
            raise DataError(
                f"{self.target}: {table.schema}.{table.table} has no key and its index "
                f"{table.index} holds documents: re-provisioning it cannot be made replay-safe "
                "document by document; delete the index, then provision again",
                seqno=event.seqno)
        version = self._documents.version(event.seqno)
        for doc_id in ids:
            self._documents.delete(table, doc_id, event, version, {}, extra)

    # -- sending ----------------------------------------------------------------------------

    def _flush(self) -> None:
        writes = list(self._documents.writes.values())
        writes.extend(self._counted_writes())
        beats = self._beats
        self._documents.sent()
        self._beats = []
        if writes:
            self._bulk.send(writes)
        if beats:
            self._bulk.bulk(b"".join(beats), "recording heartbeats")

    def _counted_writes(self) -> list[Write]:
        """Writes of the keyless documents: read each, add what it has not applied yet."""
        if not self._documents.counted:
            return []
        by_index: dict[str, list[Counted]] = {}
        for counted in self._documents.counted.values():
            by_index.setdefault(counted.table.index, []).append(counted)
        writes = []
        for index, group in by_index.items():
            try:
                docs = self.es.mget(index=index, ids=[c.doc_id for c in group], realtime=True,
                                    source_includes=[ROWS, APPLIED_SEQNO, APPLIED_FRAGNO,
                                                     DELETED]).body["docs"]
            except (ApiError, TransportError) as exc:
                raise request_error(exc, self.target, f"reading documents of {index}",
                                    seqno=group[0].deltas[0][0]) from exc
            for counted, doc in zip(group, docs, strict=True):
                write = self._counted_write(counted, doc)
                if write is not None:
                    writes.append(write)
        return writes

    def _counted_write(self, counted: Counted, doc: dict[str, Any]) -> Write | None:
        found = bool(doc.get("found"))
        source = doc.get("_source") or {}
        rows = int(source.get(ROWS, 0)) if found and not source.get(DELETED) else 0
        applied = (int(source.get(APPLIED_SEQNO, -1)), int(source.get(APPLIED_FRAGNO, -1))) \
            if found else (-1, -1)
        last = applied
        for seqno, fragno, delta in counted.deltas:
            if (seqno, fragno) > applied:
                # Never below zero: after a hard delete's version is forgotten, a replay
                # may start counting from a document that is not there.
                rows = max(0, rows + delta)
                last = max(last, (seqno, fragno))
        if last == applied:
            return None  # every change is in the document already
        table = counted.table
        guard: dict[str, Any] = ({"if_seq_no": doc["_seq_no"],
                                  "if_primary_term": doc["_primary_term"]}
                                 if found else {"op_type": "create"})
        if rows == 0 and not self.tombstones:
            if not found:
                return None
            action: dict[str, Any] = {"delete": {"_index": table.index, "_id": counted.doc_id,
                                                 **guard}}
            return Write(dumps(action) + b"\n", last[0], table, counted.doc_id, "delete",
                         versioned=False)
        body = dict(counted.values)
        body.update(self._documents.optional_fields(table.schema, table.table, last[0],
                                                    counted.tstamp))
        body.update({ROWS: rows, APPLIED_SEQNO: last[0], APPLIED_FRAGNO: last[1]})
        if rows == 0:
            body[DELETED] = True
        kind = "create" if not found else "index"
        action = {kind: {"_index": table.index, "_id": counted.doc_id,
                         **({} if not found else guard)}}
        return Write(dumps(action) + b"\n" + dumps(body) + b"\n", last[0], table,
                     counted.doc_id, kind, versioned=False)
