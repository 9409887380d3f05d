"""The index of each source table: created from the row changes' column specs, its mapping
kept in line with them.

A table's index has ``dynamic: strict`` and a field per column (``types.field_mapping``),
plus the fields the applier adds (``types.INTERNAL_FIELDS``, the chosen ``document_fields``);
a new column is added to the mapping before the first document that has it, and the source
table and column types are recorded in the mapping's ``_meta.tungsten``, which also names
the table that owns the index. An existing field keeps its type.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from consumers.elasticsearch.context import TargetContext
from consumers.elasticsearch.errors import error_kind, reason, refused_column, request_error
from consumers.elasticsearch.types import (
    DELETED,
    DOCUMENT_FIELDS,
    INTERNAL_FIELDS,
    Features,
    RowEncoder,
    field_mapping,
)
from consumers.errors import DataError, TransientError, key_changed
from consumers.naming import NameCollision
from consumers.zero_dates import ZeroDates
from thl_topics.event import ColumnSpec

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.elasticsearch.applier")


@dataclass
class TableIndex:
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

    def encoder(self, specs: list[ColumnSpec], layout: tuple[Any, ...],
                zero_dates: ZeroDates = "null") -> RowEncoder:
        """The row encoder of one column layout (made once per layout)."""
        found = self.encoders.get(layout)
        if found is None:
            found = self.encoders[layout] = RowEncoder(specs, zero_dates)
        return found


def column_layout(specs: list[ColumnSpec]) -> tuple[Any, ...]:
    """What a mapping and an encoder depend on in a column layout."""
    return tuple((s.name, s.type, s.length, s.scale, s.unsigned, s.primary_key, s.blob,
                  s.charset) for s in specs)


def wait_for_primary(es: Elasticsearch, index: str, target: str) -> None:
    """Until the index's primary shard serves requests (a freshly created index, or one
    recovering after a restart, answers 503 no_shard_available until then)."""
    health = es.cluster.health(index=index, wait_for_status="yellow", timeout="30s").body
    if health.get("timed_out"):
        raise TransientError(f"{target}: index {index} is {health.get('status')}: "
                             "its primary shard is not active yet")


class IndexMappings:
    """Creates the indices of source tables and keeps their mappings in line."""

    def __init__(self, ctx: TargetContext, service: str) -> None:
        self.ctx = ctx
        self.service = service
        self.tombstones = ctx.cfg.deletes == "tombstone"
        #: What the cluster maps (``detect_features`` once connected).
        self.features = Features()

    def detect_features(self) -> Features:
        """The mapping types the cluster offers, unless the target's settings say."""
        wanted = {"yes": True, "no": False}
        unsigned = wanted.get(self.ctx.cfg.unsigned_long)
        scaled = wanted.get(self.ctx.cfg.scaled_float)
        if unsigned is None or scaled is None:
            try:
                nodes = self.ctx.es.nodes.info(metric="plugins",
                                               filter_path="nodes.*.modules.name").body
            except ApiError as exc:
                if exc.status_code not in (401, 403):
                    raise
                log.warning("%s: cannot list the nodes' modules (%s): mapping BIGINT "
                            "UNSIGNED and DECIMAL to double", self.ctx.target, exc.status_code)
                nodes = {}
            sets = [{m["name"] for m in node.get("modules", [])}
                    for node in nodes.get("nodes", {}).values()]
            common = set.intersection(*sets) if sets else set()
            if unsigned is None:
                unsigned = "x-pack-unsigned-long" in common
            if scaled is None:
                scaled = "mapper-extras" in common
        return Features(unsigned_long=unsigned, scaled_float=scaled)

    def _meta(self, table: TableIndex) -> dict[str, Any]:
        return {"tungsten": {"service": self.service, "schema": table.schema,
                             "table": table.table, "deletes": self.ctx.cfg.deletes,
                             "columns": list(table.columns.values())}}

    def create_or_read(self, table: TableIndex, specs: list[ColumnSpec], seqno: int,
                       check_key: bool = True) -> None:
        """Create the table's index with the mapping of ``specs``, or read the mapping of
        the index that is there (it must be this table's) and add what it lacks
        (``check_key``: as ``update``)."""
        self._check_names(table, specs, seqno)
        properties: dict[str, dict[str, Any]] = {
            **INTERNAL_FIELDS, **{f: DOCUMENT_FIELDS[f] for f in self.ctx.cfg.document_fields},
            **{s.name: field_mapping(s, self.features) for s in specs}}
        table.columns = {s.name: s.to_avro() for s in specs}
        body: dict[str, Any] = {"dynamic": "strict", "_meta": self._meta(table),
                                "properties": properties}
        settings = self.ctx.cfg.index_settings or None
        aliases = ({table.name: {"filter": {"bool": {"must_not": {"term": {DELETED: True}}}}}}
                   if self.tombstones else None)
        try:
            self.ctx.es.indices.create(index=table.index, mappings=body, settings=settings,
                                       aliases=aliases)
            wait_for_primary(self.ctx.es, table.index, self.ctx.target)
            table.fields = set(properties)
            table.layouts.add(column_layout(specs))
            log.info("%s: created index %s for table %s", self.ctx.target, table.index,
                     table.qualified)
            return
        except ApiError as exc:
            if exc.status_code != 400 or error_kind(exc) != \
                    "resource_already_exists_exception":
                if exc.status_code == 400:
                    raise self.refused(table, exc, seqno) from exc
                raise
        # The index exists: it must be this table's, and it keeps the mapping it has.
        found = self.ctx.es.indices.get_mapping(index=table.index).body
        mapping = next(iter(found.values()))["mappings"]
        meta = (mapping.get("_meta") or {}).get("tungsten") or {}
        owner = (meta.get("service"), meta.get("schema"), meta.get("table"))
        if owner[0] == self.service and meta.get("table") and \
                owner[1:] != (table.schema, table.table):
            collision = NameCollision("index", table.index, f"{owner[1]}.{owner[2]}",
                                      table.qualified, "indices")
            raise DataError(f"{self.ctx.target}: {collision} (seqno {seqno})", seqno=seqno)
        if owner != (self.service, table.schema, table.table):
            what = (f"table {owner[1]}.{owner[2]} of service {owner[0]}" if meta.get("table")
                    else "documents the replicator did not write")
            raise DataError(
                f"{self.ctx.target}: index {table.index} already holds {what}, not table "
                f"{table.qualified} of service {self.service}; give {table.qualified} its "
                f"own name in the target's `indices` (seqno {seqno})", seqno=seqno)
        table.fields = set(mapping.get("properties", {}))
        table.columns = {c["name"]: c for c in meta.get("columns", [])}
        if self.tombstones:
            self.ctx.es.indices.put_alias(index=table.index, name=table.name, filter={
                "bool": {"must_not": {"term": {DELETED: True}}}})
        self.update(table, specs, seqno, check_key)

    def _check_names(self, table: TableIndex, specs: list[ColumnSpec], seqno: int) -> None:
        reserved = set(INTERNAL_FIELDS) | set(self.ctx.cfg.document_fields)
        for spec in specs:
            if spec.name in reserved:
                raise DataError(
                    f"{self.ctx.target}: column {spec.name} of table {table.qualified} has the "
                    "name of a field the replicator adds to every document (seqno "
                    f"{seqno}); drop that document field from the target's "
                    "`document_fields`, or rename the column with a filter", seqno=seqno)

    def update(self, table: TableIndex, specs: list[ColumnSpec], seqno: int,
               check_key: bool = True) -> None:
        """Add new columns to the mapping (and their types to ``_meta``) before the first
        document that has them. An existing field keeps its type: Elasticsearch cannot
        change it, and refuses documents whose values no longer fit (a data error).
        ``check_key``: a primary key other than the one ``_meta`` records is a data error
        while the index holds documents (not while a provisioning chunk empties it)."""
        self._check_names(table, specs, seqno)
        if check_key:
            self._check_key(table, specs, seqno)
        new = {s.name: field_mapping(s, self.features) for s in specs
               if s.name not in table.fields}
        columns = {**table.columns, **{s.name: s.to_avro() for s in specs}}
        if new or columns != table.columns:
            table.columns = columns
            try:
                self.ctx.es.indices.put_mapping(index=table.index, properties=new or None,
                                                meta=self._meta(table))
            except ApiError as exc:
                if exc.status_code == 400:
                    raise self.refused(table, exc, seqno) from exc
                raise request_error(exc, self.ctx.target, f"updating the mapping of "
                                    f"{table.index}", seqno=seqno) from exc
            except TransportError as exc:
                raise request_error(exc, self.ctx.target, f"updating the mapping of "
                                    f"{table.index}", seqno=seqno) from exc
            if new:
                log.info("%s: index %s: new field(s) %s", self.ctx.target, table.index,
                         ", ".join(new))
            table.fields |= set(new)
        table.layouts.add(column_layout(specs))

    def _check_key(self, table: TableIndex, specs: list[ColumnSpec], seqno: int) -> None:
        """Documents are found by ``_id``, made of the primary key's values: after the
        source's key changed (``ALTER TABLE ... DROP PRIMARY KEY, ADD PRIMARY KEY``), changes
        by the new key would miss the documents written by the old one and leave them
        behind, a silent divergence. Stop instead, saying how to repair."""
        if not specs or not table.columns:
            return  # an index opened for a rename or a drop: no row to judge by
        new = [s.name for s in specs if s.primary_key]
        old = [name for name, c in table.columns.items() if c.get("primary_key")]
        if set(new) == set(old):
            return  # a keyless table gaining a key, or a keyed one losing it, counts too
        try:
            # Documents written since the last refresh count too.
            self.ctx.es.indices.refresh(index=table.index)
            held = self.ctx.es.count(index=table.index).body.get("count", 0)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.ctx.target, f"counting the documents of "
                                f"{table.index}", seqno=seqno) from exc
        if held:
            raise key_changed(self.ctx.target, table.qualified, f"({', '.join(old)})", new,
                              seqno, f"index {table.index}", "delete the index")

    def refused(self, table: TableIndex, exc: ApiError, seqno: int) -> DataError:
        body = exc.body if isinstance(exc.body, dict) else {"error": str(exc.body)}
        column = refused_column(body)
        where = f", column {column}" if column else ""
        return DataError(
            f"{self.ctx.target}: index {table.index} (table {table.qualified}{where}) refuses "
            f"the mapping of seqno {seqno}: {reason(body)}. Rename the column with a "
            "filter or create the index yourself, or skip the seqno", seqno=seqno)
