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
marks it ``_deleted`` (``tombstone``). After a column change of such a table, rows written
before it are not found by their new hash: rebuild its index.

Statement events are skipped (policy SKIP: a TRUNCATE or DROP TABLE on the source leaves
the index as it is); indices and their mappings come from the row
changes' column specs (``types.py``): ``dynamic: strict``, a new column is added to the
mapping before the first document that has it, and the source table and column types are
recorded in the mapping's ``_meta.tungsten``. Nothing is refreshed: documents become
searchable at the index's refresh interval.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError, helpers

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.check import CheckRange, CheckResult
from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.elasticsearch.errors import (
    Outcome,
    classify_item,
    reason,
    refused_column,
    request_error,
    size_limit,
)
from consumers.elasticsearch.naming import (
    TOMBSTONE_SUFFIX,
    IndexCollision,
    IndexNameError,
    IndexOwners,
    document_id,
    index_name,
    row_id,
)
from consumers.elasticsearch.types import Features, JsonValue, RowEncoder, field_mapping
from consumers.errors import DataError, PositionConflict, TransientError
from consumers.heartbeat import Heartbeat
from consumers.oversize import largest, mib, too_large
from consumers.position import Position
from consumers.provisioning import chunk_of
from consumers.registry import ApplierContext
from replicator import crashpoints
from thl_topics.checksum import thl_value_of
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

log = logging.getLogger(__name__)

#: Fields the applier itself puts in documents (a source column of that name is refused).
DELETED = "_deleted"
ROWS = "_rows"
APPLIED_SEQNO = "_applied_seqno"
APPLIED_FRAGNO = "_applied_fragno"
INTERNAL_FIELDS: dict[str, dict[str, Any]] = {
    DELETED: {"type": "boolean"}, ROWS: {"type": "long"},
    APPLIED_SEQNO: {"type": "long"}, APPLIED_FRAGNO: {"type": "integer"},
}
DOCUMENT_FIELDS: dict[str, dict[str, Any]] = {
    "source_schema": {"type": "keyword"}, "source_table": {"type": "keyword"},
    "committime": {"type": "date"}, "seqno": {"type": "long"},
}
#: The tracking index: positions and heartbeats of every group of the service.
TRACKING_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "kind": {"type": "keyword"}, "group": {"type": "keyword"},
    "task_id": {"type": "integer"}, "seqno": {"type": "long"},
    "fragno": {"type": "integer"}, "last_frag": {"type": "boolean"},
    "source_id": {"type": "keyword"}, "epoch_number": {"type": "long"},
    "eventid": {"type": "keyword"}, "applied_latency": {"type": "long"},
    "update_timestamp": {"type": "date"}, "shard_id": {"type": "keyword"},
    "extract_timestamp": {"type": "date"}, "id": {"type": "long"},
    "source_tstamp": {"type": "date"}, "target_tstamp": {"type": "date"},
    "lag_millis": {"type": "long"}, "salt": {"type": "long"}, "name": {"type": "keyword"},
    # A consistency check's result, kept as it is (not searched).
    "check": {"type": "object", "enabled": False},
}}
#: Only what classification needs comes back from a bulk request.
_BULK_FILTER = "errors,items.*.status,items.*.error"


#: One encoder for every document (``json.dumps`` with options builds one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")


@dataclass
class _Table:
    """One source table: its index, what its mapping holds, its encoders."""

    schema: str
    table: str
    #: Where documents are written (in tombstone mode ``<alias>.all``).
    index: str
    #: The name applications read (the index itself in hard mode, the alias in tombstone).
    name: str
    #: Field names in the mapping.
    fields: set[str] = field(default_factory=set)
    #: Column specs by name as recorded in ``_meta`` (latest seen).
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Column layouts whose mapping is known to be in place.
    layouts: set[tuple[Any, ...]] = field(default_factory=set)
    encoders: dict[tuple[Any, ...], RowEncoder] = field(default_factory=dict)
    #: ``{"index":{"_index":"...","_id":`` etc., built once.
    index_prefix: bytes = b""
    delete_prefix: bytes = b""

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(slots=True)
class _Write:
    """One document write of the open block (the last one for its document)."""

    lines: bytes
    seqno: int
    table: _Table
    doc_id: str
    action: str
    #: Carries the seqno as external version (409 = already applied).
    versioned: bool = True


@dataclass(slots=True)
class _Counted:
    """A document of a table without a key, and the row count changes of the block."""

    table: _Table
    doc_id: str
    values: dict[str, JsonValue]
    #: (seqno, fragno, +1/-1) in THL order.
    deltas: list[tuple[int, int, int]]
    tstamp: int


class ElasticsearchApplier:
    """Applies THL events to one Elasticsearch cluster."""

    def __init__(self, cfg: ElasticsearchTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.target = cfg.printable()
        self.service = ctx.service.service
        self.group = ctx.group
        self.tracking_index = ctx.tracking_schema.lower()
        self.position_id = f"trep_commit_seqno:{ctx.group}:0"
        self.tombstones = cfg.deletes == "tombstone"
        self.capabilities = Capabilities(
            atomicity=Atomicity.SEQNO_GUARDED, statements=StatementPolicy.SKIP,
            keyless_tables=True,
            # Bulk requests want thousands of documents; the position write is per block.
            block=BlockLimits(events=500, rows=10_000, ms=1000), checks=True)
        self.features = Features()
        self._es: Elasticsearch | None = None
        self._tables: dict[tuple[str, str], _Table] = {}
        #: Which table each index holds, to refuse a second table on one index.
        self._owners = IndexOwners()
        #: The position document's (_seq_no, _primary_term) as last read or written; None:
        #: no position stored (the next commit creates it).
        self._expected: tuple[int, int] | None = None
        self._writes: dict[tuple[str, str], _Write] = {}
        self._counted: dict[tuple[str, str], _Counted] = {}
        self._beats: list[bytes] = []
        self._pending_bytes = 0
        #: The seqno being applied, and its version_type (external_gte when it comes in
        #: several fragments).
        self._open_seqno = -1
        self._version_type = b'"external"'

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
            self.features = self._features()
            self._ensure_tracking()
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, "connecting") from exc

    def _features(self) -> Features:
        wanted = {"yes": True, "no": False}
        unsigned = wanted.get(self.cfg.unsigned_long)
        scaled = wanted.get(self.cfg.scaled_float)
        if unsigned is None or scaled is None:
            try:
                nodes = self.es.nodes.info(metric="plugins",
                                           filter_path="nodes.*.modules.name").body
            except ApiError as exc:
                if exc.status_code not in (401, 403):
                    raise
                log.warning("%s: cannot list the nodes' modules (%s): mapping BIGINT "
                            "UNSIGNED and DECIMAL to double", self.target, exc.status_code)
                nodes = {}
            sets = [{m["name"] for m in node.get("modules", [])}
                    for node in nodes.get("nodes", {}).values()]
            common = set.intersection(*sets) if sets else set()
            if unsigned is None:
                unsigned = "x-pack-unsigned-long" in common
            if scaled is None:
                scaled = "mapper-extras" in common
        return Features(unsigned_long=unsigned, scaled_float=scaled)

    def _ensure_tracking(self) -> None:
        try:
            self.es.indices.create(index=self.tracking_index, mappings={
                **TRACKING_MAPPING, "_meta": {"tungsten": {"tracking": self.service}}},
                settings=self.cfg.index_settings or None)
        except ApiError as exc:
            if _error_kind(exc) != "resource_already_exists_exception":
                raise
            # An index made by an earlier version: add the fields it lacks (a no-op else).
            self.es.indices.put_mapping(index=self.tracking_index,
                                        properties=TRACKING_MAPPING["properties"])
        self._wait_for_primary(self.tracking_index)

    def _wait_for_primary(self, index: str) -> None:
        """Until the index's primary shard serves requests (a freshly created index, or one
        recovering after a restart, answers 503 no_shard_available until then)."""
        health = self.es.cluster.health(index=index, wait_for_status="yellow",
                                        timeout="30s").body
        if health.get("timed_out"):
            raise TransientError(f"{self.target}: index {index} is {health.get('status')}: "
                                 "its primary shard is not active yet")

    def position(self) -> Position | None:
        try:
            found = self.es.options(ignore_status=404).get(
                index=self.tracking_index, id=self.position_id).body
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, "reading the position") from exc
        if not found.get("found"):
            self._expected = None
            return None
        self._expected = (found["_seq_no"], found["_primary_term"])
        doc = found["_source"]
        return Position(seqno=doc["seqno"], epoch=doc["epoch_number"],
                        event_id=doc["eventid"], source_id=doc.get("source_id") or "",
                        fragno=doc.get("fragno") or 0, last_frag=doc.get("last_frag", True),
                        shard_id=doc.get("shard_id") or "")

    def reset(self) -> None:
        try:
            self.es.options(ignore_status=404).delete(index=self.tracking_index,
                                                      id=self.position_id, refresh=False)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.target, "clearing the position") from exc
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
        if event.seqno != self._open_seqno:
            self._open_seqno = event.seqno
            # The first fragment tells: a transaction that is not whole in it may be sent
            # in several bulks.
            self._version_type = b'"external"' if event.last_frag else b'"external_gte"'
        for item in event.data:
            if isinstance(item, RowChange):
                self._rows(item, event)
            # Statements never arrive: the policy is SKIP.
        if self._pending_bytes >= self.cfg.bulk_max_bytes:
            # Bound memory inside a block (a large transaction): send what is collapsed so
            # far. Only between fragments, so a table without a key never sees a fragment
            # half applied.
            self._flush()

    def heartbeat(self, beat: Heartbeat) -> None:
        """A ``heartbeat`` document in the tracking index, sent with the block's data."""
        doc = {"kind": "heartbeat", "group": self.group, "id": beat.id, "seqno": beat.seqno,
               "eventid": beat.event_id,
               "source_tstamp": _iso(beat.source_tstamp) if beat.source_tstamp else None,
               "target_tstamp": _iso(beat.target_tstamp), "lag_millis": beat.lag_millis,
               "salt": beat.salt, "name": beat.name}
        action = {"index": {"_index": self.tracking_index,
                            "_id": f"heartbeat:{self.group}:{beat.id}"}}
        self._beats.append(_dumps(action) + b"\n" + _dumps(doc) + b"\n")

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The documents of a checked key range, as the source rows they stand for, in THL
        values (consumers.check): the index's mapping says how each field decodes."""
        self._flush()
        try:
            alias = index_name(self.cfg.index, self.service, check.schema, check.table,
                               self.cfg.indices,
                               reserve=len(TOMBSTONE_SUFFIX) if self.tombstones else 0)
        except IndexNameError as exc:
            raise DataError(f"{self.target}: {exc}") from exc
        # The reader decodes with this module's constants: imported here, not at the top.
        from consumers.elasticsearch.reader import read_rows
        try:
            if not self.es.indices.exists(index=alias):
                return
            for row in read_rows(self.es, alias):
                values = [thl_value_of(spec, row.get(spec.name)) for spec in check.specs]
                if check.key:
                    names = [c.name for c in check.specs]
                    if not check.contains([values[names.index(k)] for k in check.key]):
                        continue
                yield values
        except (ApiError, TransportError) as exc:
            raise TransientError(f"{self.target}: reading {alias} for a check: {exc}") from exc

    def record_check(self, result: CheckResult) -> None:
        """A ``check`` document in the tracking index, per table and range."""
        doc = {"kind": "check", "group": self.group, "seqno": result.seqno,
               "check": result.to_json()}
        try:
            self.es.index(index=self.tracking_index, document=doc,
                          id=f"check:{self.group}:{result.schema}.{result.table}:"
                             f"{result.range}")
        except ApiError as exc:
            kind = TransientError if exc.meta.status in (429, 503) else DataError
            raise kind(f"{self.target}: recording a check: {exc}") from exc
        except TransportError as exc:
            raise TransientError(f"{self.target}: recording a check: {exc}") from exc

    def commit(self, position: Position) -> None:
        self._flush()
        crashpoints.reached("apply-before-position")
        self._write_position(position)
        self.rollback()

    def rollback(self) -> None:
        self._writes.clear()
        self._counted.clear()
        self._beats.clear()
        self._pending_bytes = 0
        self._open_seqno = -1

    # -- the position -----------------------------------------------------------------------

    def _write_position(self, position: Position) -> None:
        now = dt.datetime.now(dt.UTC)
        source_time = dt.datetime.fromtimestamp(position.tstamp / 1e6, dt.UTC)
        doc = {"kind": "trep_commit_seqno", "group": self.group, "task_id": 0,
               "seqno": position.seqno, "fragno": position.fragno,
               "last_frag": position.last_frag, "source_id": position.source_id,
               "epoch_number": position.epoch, "eventid": position.event_id,
               "applied_latency": max(0, int((now - source_time).total_seconds())),
               "update_timestamp": _iso(now), "shard_id": position.shard_id,
               "extract_timestamp": _iso(source_time)}
        guard: dict[str, Any] = ({"op_type": "create"} if self._expected is None else
                                 {"if_seq_no": self._expected[0],
                                  "if_primary_term": self._expected[1]})
        try:
            done = self.es.index(index=self.tracking_index, id=self.position_id,
                                 document=doc, **guard).body
        except ApiError as exc:
            if exc.status_code != 409:
                raise request_error(exc, self.target, f"writing the position {position.seqno}",
                                    seqno=position.seqno) from exc
            self._conflicting_position(position)
            return
        except TransportError as exc:
            raise request_error(exc, self.target, f"writing the position {position.seqno}",
                                seqno=position.seqno) from exc
        self._expected = (done["_seq_no"], done["_primary_term"])

    def _conflicting_position(self, position: Position) -> None:
        """A 409 on the position: our own write retried by the client, or another writer."""
        try:
            stored = self.position()
        except TransientError:
            stored = None
        if stored is not None and (stored.seqno, stored.epoch, stored.event_id) == (
                position.seqno, position.epoch, position.event_id):
            return  # the first attempt went through; position() recorded its _seq_no
        raise PositionConflict(
            f"{self.target}: the position document {self.tracking_index}/{self.position_id} "
            f"moved under this consumer (now at seqno "
            f"{stored.seqno if stored else 'none'}): another process applies the same "
            "consumer group to this cluster. This block's documents are seqno-guarded and "
            "change nothing a later seqno wrote; run one process per group.",
            seqno=position.seqno)

    # -- tables and mappings ----------------------------------------------------------------

    def _table(self, change: RowChange, specs: list[ColumnSpec], seqno: int) -> _Table:
        key = (change.schema, change.table)
        table = self._tables.get(key)
        if table is None:
            table = self._open_table(change.schema, change.table, specs, seqno)
            self._tables[key] = table
        return table

    def _open_table(self, schema: str, name: str, specs: list[ColumnSpec],
                    seqno: int) -> _Table:
        try:
            alias = index_name(self.cfg.index, self.service, schema, name, self.cfg.indices,
                               reserve=len(TOMBSTONE_SUFFIX) if self.tombstones else 0)
        except IndexNameError as exc:
            raise DataError(f"{self.target}: {exc} (seqno {seqno})", seqno=seqno) from exc
        index = alias + TOMBSTONE_SUFFIX if self.tombstones else alias
        if index == self.tracking_index:
            raise DataError(f"{self.target}: table {schema}.{name} would go to index {index}, "
                            "the replicator's tracking index; name another one in `indices`",
                            seqno=seqno)
        try:
            self._owners.claim(index, schema, name)
        except IndexCollision as exc:
            raise DataError(f"{self.target}: {exc} (seqno {seqno})", seqno=seqno) from exc
        table = _Table(schema, name, index, alias)
        quoted = _dumps(index)
        table.index_prefix = b'{"index":{"_index":' + quoted + b',"_id":'
        table.delete_prefix = b'{"delete":{"_index":' + quoted + b',"_id":'
        try:
            self._create_or_read(table, specs, seqno)
        except (ApiError, TransportError) as exc:
            self._owners.release(index)
            raise request_error(exc, self.target, f"creating index {index} for table "
                                f"{schema}.{name}", seqno=seqno) from exc
        except DataError:
            self._owners.release(index)
            raise
        return table

    def _meta(self, table: _Table) -> dict[str, Any]:
        return {"tungsten": {"service": self.service, "schema": table.schema,
                             "table": table.table, "deletes": self.cfg.deletes,
                             "columns": list(table.columns.values())}}

    def _create_or_read(self, table: _Table, specs: list[ColumnSpec], seqno: int) -> None:
        self._check_names(table, specs, seqno)
        properties: dict[str, dict[str, Any]] = {
            **INTERNAL_FIELDS, **{f: DOCUMENT_FIELDS[f] for f in self.cfg.document_fields},
            **{s.name: field_mapping(s, self.features) for s in specs}}
        table.columns = {s.name: s.to_avro() for s in specs}
        body: dict[str, Any] = {"dynamic": "strict", "_meta": self._meta(table),
                                "properties": properties}
        settings = self.cfg.index_settings or None
        aliases = ({table.name: {"filter": {"bool": {"must_not": {"term": {DELETED: True}}}}}}
                   if self.tombstones else None)
        try:
            self.es.indices.create(index=table.index, mappings=body, settings=settings,
                                   aliases=aliases)
            self._wait_for_primary(table.index)
            table.fields = set(properties)
            table.layouts.add(_layout(specs))
            log.info("%s: created index %s for table %s", self.target, table.index,
                     table.qualified)
            return
        except ApiError as exc:
            if exc.status_code != 400 or _error_kind(exc) != \
                    "resource_already_exists_exception":
                if exc.status_code == 400:
                    raise self._refused_mapping(table, exc, seqno) from exc
                raise
        # The index exists: it must be this table's, and it keeps the mapping it has.
        found = self.es.indices.get_mapping(index=table.index).body
        mapping = next(iter(found.values()))["mappings"]
        meta = (mapping.get("_meta") or {}).get("tungsten") or {}
        owner = (meta.get("service"), meta.get("schema"), meta.get("table"))
        if owner[0] == self.service and meta.get("table") and \
                owner[1:] != (table.schema, table.table):
            collision = IndexCollision(table.index, (str(owner[1]), str(owner[2])),
                                       (table.schema, table.table))
            raise DataError(f"{self.target}: {collision} (seqno {seqno})", seqno=seqno)
        if owner != (self.service, table.schema, table.table):
            what = (f"table {owner[1]}.{owner[2]} of service {owner[0]}" if meta.get("table")
                    else "documents the replicator did not write")
            raise DataError(
                f"{self.target}: index {table.index} already holds {what}, not table "
                f"{table.qualified} of service {self.service}; give {table.qualified} its "
                f"own name in the target's `indices` (seqno {seqno})", seqno=seqno)
        table.fields = set(mapping.get("properties", {}))
        table.columns = {c["name"]: c for c in meta.get("columns", [])}
        if self.tombstones:
            self.es.indices.put_alias(index=table.index, name=table.name, filter={
                "bool": {"must_not": {"term": {DELETED: True}}}})
        self._update_mapping(table, specs, seqno)

    def _check_names(self, table: _Table, specs: list[ColumnSpec], seqno: int) -> None:
        reserved = set(INTERNAL_FIELDS) | set(self.cfg.document_fields)
        for spec in specs:
            if spec.name in reserved:
                raise DataError(
                    f"{self.target}: column {spec.name} of table {table.qualified} has the "
                    "name of a field the replicator adds to every document (seqno "
                    f"{seqno}); drop that document field from the target's "
                    "`document_fields`, or rename the column with a filter", seqno=seqno)

    def _update_mapping(self, table: _Table, specs: list[ColumnSpec], seqno: int) -> None:
        """Add new columns to the mapping (and their types to ``_meta``) before the first
        document that has them. An existing field keeps its type: Elasticsearch cannot
        change it, and refuses documents whose values no longer fit (a data error)."""
        self._check_names(table, specs, seqno)
        new = {s.name: field_mapping(s, self.features) for s in specs
               if s.name not in table.fields}
        columns = {**table.columns, **{s.name: s.to_avro() for s in specs}}
        if new or columns != table.columns:
            table.columns = columns
            try:
                self.es.indices.put_mapping(index=table.index, properties=new or None,
                                            meta=self._meta(table))
            except ApiError as exc:
                if exc.status_code == 400:
                    raise self._refused_mapping(table, exc, seqno) from exc
                raise request_error(exc, self.target, f"updating the mapping of "
                                    f"{table.index}", seqno=seqno) from exc
            except TransportError as exc:
                raise request_error(exc, self.target, f"updating the mapping of "
                                    f"{table.index}", seqno=seqno) from exc
            if new:
                log.info("%s: index %s: new field(s) %s", self.target, table.index,
                         ", ".join(new))
            table.fields |= set(new)
        table.layouts.add(_layout(specs))

    def _refused_mapping(self, table: _Table, exc: ApiError, seqno: int) -> DataError:
        body = exc.body if isinstance(exc.body, dict) else {"error": str(exc.body)}
        column = refused_column(body)
        where = f", column {column}" if column else ""
        return DataError(
            f"{self.target}: index {table.index} (table {table.qualified}{where}) refuses "
            f"the mapping of seqno {seqno}: {reason(body)}. Rename the column with a "
            "filter or create the index yourself, or skip the seqno", seqno=seqno)

    def _encoder(self, table: _Table, specs: list[ColumnSpec], layout: tuple[Any, ...]
                 ) -> RowEncoder:
        found = table.encoders.get(layout)
        if found is None:
            found = table.encoders[layout] = RowEncoder(specs)
        return found

    # -- rows -------------------------------------------------------------------------------

    def _rows(self, change: RowChange, event: ThlEvent) -> None:
        specs = change.column_specs or change.key_specs
        table = self._table(change, specs, event.seqno)
        after_layout = _layout(change.column_specs) if change.column_specs else None
        before_layout = _layout(change.key_specs) if change.key_specs else None
        for layout, layout_specs in ((after_layout, change.column_specs),
                                     (before_layout, change.key_specs)):
            if layout is not None and layout not in table.layouts:
                self._update_mapping(table, layout_specs, event.seqno)
        extra = self._extra(change.schema, change.table, event.seqno, event.tstamp)
        chunk = chunk_of(event)
        if chunk is not None and chunk.first and event.fragno == 0 and \
                (chunk.schema, chunk.table) == (change.schema, change.table):
            self._clear(table, event, extra, keyed=any(s.primary_key for s in specs))
        after = self._encoder(table, change.column_specs, after_layout) \
            if after_layout is not None else None
        before = self._encoder(table, change.key_specs, before_layout) \
            if before_layout is not None else None
        if not any(s.primary_key for s in specs):
            self._keyless(table, change, event, after, before, extra)
            return
        after_key = [i for i, s in enumerate(change.column_specs) if s.primary_key]
        before_key = [i for i, s in enumerate(change.key_specs) if s.primary_key]
        version = (b',"version":' + str(event.seqno).encode() + b',"version_type":'
                   + self._version_type + b"}}\n")
        for r in range(change.row_count):
            old_id = new_id = None
            values: list[JsonValue] | None = None
            if after is not None and change.action is not RowAction.DELETE:
                values = after.values(change.column_values[r])
                new_id = document_id([values[i] for i in after_key])
            if before is not None and change.action is not RowAction.INSERT:
                old = before.values(change.key_values[r])
                old_id = document_id([old[i] for i in before_key])
                if old_id != new_id:
                    # A delete, or an UPDATE that changed the key: the old id goes.
                    self._delete(table, old_id, event, version,
                                 {before.names[i]: old[i] for i in before_key}, extra)
            if values is not None and new_id is not None and after is not None:
                doc = dict(zip(after.names, values, strict=True))
                if extra:
                    doc.update(extra)
                self._put(table, new_id, event.seqno, table.index_prefix, _dumps(doc),
                          version, "index")

    def _clear(self, table: _Table, event: ThlEvent, extra: dict[str, Any],
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
        version = (b',"version":' + str(event.seqno).encode() + b',"version_type":'
                   + self._version_type + b"}}\n")
        for doc_id in ids:
            self._delete(table, doc_id, event, version, {}, extra)

    def _extra(self, schema: str, table: str, seqno: int, tstamp: int) -> dict[str, Any]:
        """The optional document fields (``document_fields``) of a row of this seqno."""
        extra: dict[str, Any] = {}
        for name in self.cfg.document_fields:
            if name == "source_schema":
                extra[name] = schema
            elif name == "source_table":
                extra[name] = table
            elif name == "committime":
                extra[name] = _iso(dt.datetime.fromtimestamp(tstamp / 1e6, dt.UTC))
            else:
                extra[name] = seqno
        return extra

    def _delete(self, table: _Table, doc_id: str, event: ThlEvent, version: bytes,
                key: dict[str, JsonValue], extra: dict[str, Any]) -> None:
        if self.tombstones:
            # The version stays with a document: a replay from before the delete is refused.
            self._put(table, doc_id, event.seqno, table.index_prefix,
                      _dumps({**key, **extra, DELETED: True}), version, "index")
        else:
            self._put(table, doc_id, event.seqno, table.delete_prefix, None, version,
                      "delete")

    def _put(self, table: _Table, doc_id: str, seqno: int, prefix: bytes,
             source: bytes | None, version: bytes, action: str) -> None:
        key = (table.index, doc_id)
        lines = prefix + _dumps(doc_id) + version
        if source is not None:
            lines += source + b"\n"
        self._writes[key] = _Write(lines, seqno, table, doc_id, action)
        self._pending_bytes += len(lines)

    def _keyless(self, table: _Table, change: RowChange, event: ThlEvent,
                 after: RowEncoder | None, before: RowEncoder | None,
                 extra: dict[str, Any]) -> None:
        for r in range(change.row_count):
            if before is not None and change.action is not RowAction.INSERT:
                self._count(table, before, before.values(change.key_values[r]), -1, event)
            if after is not None and change.action is not RowAction.DELETE:
                self._count(table, after, after.values(change.column_values[r]), +1, event)

    def _count(self, table: _Table, enc: RowEncoder, values: list[JsonValue], delta: int,
               event: ThlEvent) -> None:
        doc_id = row_id(enc.names, values)
        key = (table.index, doc_id)
        found = self._counted.get(key)
        if found is None:
            found = self._counted[key] = _Counted(
                table, doc_id, dict(zip(enc.names, values, strict=True)), [], event.tstamp)
            self._pending_bytes += 200 + 32 * len(values)
        found.deltas.append((event.seqno, event.fragno, delta))
        found.tstamp = event.tstamp

    # -- sending ----------------------------------------------------------------------------

    def _flush(self) -> None:
        writes = list(self._writes.values())
        writes.extend(self._counted_writes())
        beats = self._beats
        self._writes.clear()
        self._counted.clear()
        self._beats = []
        self._pending_bytes = 0
        if writes:
            self._send(writes)
        if beats:
            self._bulk(b"".join(beats), "recording heartbeats")

    def _counted_writes(self) -> list[_Write]:
        """Writes of the keyless documents: read each, add what it has not applied yet."""
        if not self._counted:
            return []
        by_index: dict[str, list[_Counted]] = {}
        for counted in self._counted.values():
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

    def _counted_write(self, counted: _Counted, doc: dict[str, Any]) -> _Write | None:
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
            return _Write(_dumps(action) + b"\n", last[0], table, counted.doc_id, "delete",
                          versioned=False)
        body = dict(counted.values)
        body.update(self._extra(table.schema, table.table, last[0], counted.tstamp))
        body.update({ROWS: rows, APPLIED_SEQNO: last[0], APPLIED_FRAGNO: last[1]})
        if rows == 0:
            body[DELETED] = True
        kind = "create" if not found else "index"
        action = {kind: {"_index": table.index, "_id": counted.doc_id,
                         **({} if not found else guard)}}
        return _Write(_dumps(action) + b"\n" + _dumps(body) + b"\n", last[0], table,
                      counted.doc_id, kind, versioned=False)

    def _send(self, writes: list[_Write]) -> None:
        """Bulk requests of ``bulk_max_bytes`` at most, one at a time; overloaded items
        again with backoff; a refused item is a data error at its seqno."""
        chunk: list[_Write] = []
        size = 0
        for write in writes:
            if chunk and size + len(write.lines) > self.cfg.bulk_max_bytes:
                self._send_chunk(chunk)
                chunk, size = [], 0
            chunk.append(write)
            size += len(write.lines)
        if chunk:
            self._send_chunk(chunk)

    def _send_chunk(self, chunk: list[_Write]) -> None:
        attempt = 0
        while True:
            seqno = min(w.seqno for w in chunk)
            try:
                answer = self._bulk(b"".join(w.lines for w in chunk),
                                    f"writing {len(chunk)} document(s)", seqno, sized=True)
            except _TooLarge as exc:
                if len(chunk) == 1:
                    raise self._too_large(chunk[0], exc.limit, exc.setting) from exc
                # Refused for its size alone: the same documents in smaller requests.
                half = len(chunk) // 2
                self._send_chunk(chunk[:half])
                self._send_chunk(chunk[half:])
                return
            if not answer.get("errors"):
                return
            retry: list[_Write] = []
            refused: list[tuple[_Write, dict[str, Any]]] = []
            for write, item in zip(chunk, answer["items"], strict=True):
                action, result = next(iter(item.items()))
                outcome = classify_item(action, result, write.versioned)
                if outcome in (Outcome.OK, Outcome.ALREADY_APPLIED):
                    continue
                if outcome is Outcome.RETRY:
                    retry.append(write)
                elif outcome is Outcome.REFUSED:
                    refused.append((write, result))
                elif outcome is Outcome.MISSING_INDEX:
                    self._tables.pop((write.table.schema, write.table.table), None)
                    self._owners.release(write.table.index)
                    raise TransientError(
                        f"{self.target}: index {write.table.index} (table "
                        f"{write.table.qualified}) disappeared while this group applied it: "
                        f"{reason(result)}; recreating it from seqno {write.seqno}",
                        seqno=write.seqno)
                else:
                    raise TransientError(
                        f"{self.target}: document {write.doc_id} of {write.table.index} "
                        f"changed between its read and its write ({reason(result)}); "
                        "applying the block again", seqno=write.seqno)
            if refused:
                raise self._refused(min(refused, key=lambda r: r[0].seqno))
            if not retry:
                return
            attempt += 1
            if attempt > self.cfg.bulk_retries:
                raise TransientError(
                    f"{self.target}: {len(retry)} document(s) still refused as overload "
                    f"after {attempt} attempts (429/503); retrying the block from the stored "
                    "position", seqno=min(w.seqno for w in retry))
            wait = min(0.25 * 2 ** attempt, 10.0)
            log.info("%s: %d document(s) refused as overload; again in %.1f s", self.target,
                     len(retry), wait)
            time.sleep(wait)
            chunk = retry

    def _bulk(self, body: bytes, doing: str, seqno: int = -1,
              sized: bool = False) -> dict[str, Any]:
        """One bulk request (``sized``: a refusal for its size alone is ``_TooLarge``)."""
        try:
            # Serialized here (one json.dumps per document, collapsed first): the client
            # passes bytes through as NDJSON, although its signature only names mappings.
            answer: dict[str, Any] = self.es.bulk(
                operations=body,  # type: ignore[arg-type]
                filter_path=_BULK_FILTER).body
        except (ApiError, TransportError) as exc:
            limit = size_limit(exc) if sized else None
            if limit is not None:
                raise _TooLarge(*limit) from exc
            raise request_error(exc, self.target, doing, seqno=seqno) from exc
        return answer

    def _too_large(self, write: _Write, limit: int, setting: str) -> DataError:
        """A document that no request the server takes can hold."""
        try:
            body = json.loads(write.lines.split(b"\n", 1)[1])
        except (IndexError, ValueError):
            body = {}
        column = largest(body.items()) if isinstance(body, dict) else None
        why = too_large(f"document {write.doc_id} (index {write.table.index})",
                        write.table.qualified, write.seqno, len(write.lines), column,
                        f"the {mib(limit)} Elasticsearch takes in one request ({setting})",
                        "give the cluster more heap or raise that setting")
        return DataError(f"{self.target}: {why}", seqno=write.seqno)

    def _refused(self, refused: tuple[_Write, dict[str, Any]]) -> DataError:
        write, result = refused
        column = refused_column(result)
        where = f", column {column}" if column else ""
        return DataError(
            f"{self.target}: index {write.table.index} refused document {write.doc_id} of "
            f"seqno {write.seqno} (table {write.table.qualified}{where}): {reason(result)}. "
            "Fix the mapping or the data, or skip the seqno", seqno=write.seqno)


class _TooLarge(Exception):
    """A bulk request refused for its size alone (the limit in bytes, the setting)."""

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(f"refused above {limit} bytes ({setting})")
        self.limit = limit
        self.setting = setting


def _layout(specs: list[ColumnSpec]) -> tuple[Any, ...]:
    return tuple((s.name, s.type, s.length, s.scale, s.unsigned, s.primary_key, s.blob,
                  s.charset) for s in specs)


def _error_kind(exc: ApiError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("type", ""))
    return ""
