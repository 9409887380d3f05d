"""Renamed tables and columns, dropped tables (issue 28), on the cluster.

An index cannot be renamed, so a renamed table's index is *cloned* under the new name (the
clone API hard-links the segments: documents keep their ``_id`` and their external version,
the seqno guard, and nothing is re-indexed), then the old index goes. Cloning needs the old
index write-blocked; the block doubles as the mark of a rename under way, so a replay knows
where it stopped (``follow_rename``).

A renamed column is a rewrite of every document that has the old field, done by the
applier (scan and bulk): ``update_by_query`` needs the ``reindex`` and ``lang-painless``
modules, which the minimal distribution leaves out. A keyed document is written back at its
own version (``external_gte``), so the seqno guard is exactly as before: later seqnos win,
older ones stay refused. A document of a table without a key is keyed by the hash of its
row, column names included: it moves to the hash of the renamed row (``create`` there, then
the old one is deleted), so later changes of those rows find it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from elasticsearch import Elasticsearch, NotFoundError, helpers

from consumers.elasticsearch.bulk import Write
from consumers.elasticsearch.indices import TableIndex, wait_for_primary
from consumers.elasticsearch.naming import row_id
from consumers.elasticsearch.types import INTERNAL_FIELDS, ROWS, dumps

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.elasticsearch.applier")

#: A document's new ``_source`` for a column change (None: the document stays as it is).
Reshape = Callable[[dict[str, Any]], dict[str, Any] | None]

#: The setting that makes an index read-only for writes (and may be cloned).
WRITE_BLOCK = "index.blocks.write"


# -- tables ---------------------------------------------------------------------------------

def tungsten_meta(es: Elasticsearch, index: str) -> dict[str, Any] | None:
    """The mapping's ``_meta`` of an index (None: no such index)."""
    try:
        found = es.indices.get_mapping(index=index).body
    except NotFoundError:
        return None
    mapping = next(iter(found.values()))["mappings"]
    return dict(mapping.get("_meta") or {})


def owner_of(meta: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(service, schema, table) the replicator recorded as the index's owner."""
    found = meta.get("tungsten") or {}
    return found.get("service"), found.get("schema"), found.get("table")


def write_blocked(es: Elasticsearch, index: str) -> bool:
    """Whether the index carries the write block (set by a rename under way)."""
    found: dict[str, Any] = es.indices.get_settings(index=index, name=WRITE_BLOCK,
                                                    flat_settings=True).body
    first: dict[str, Any] = next(iter(found.values()), {})
    settings: dict[str, Any] = first.get("settings") or {}
    value = settings.get(WRITE_BLOCK)
    return str(value).lower() == "true"


def follow_rename(es: Elasticsearch, old: str, new: str, meta: dict[str, Any],
                  alias: tuple[str, dict[str, Any]] | None, target: str) -> str:
    """Move index ``old`` to ``new`` (clone, then delete the old), replay-safe; what was
    done, for the log.

    - ``old`` missing: renamed already (or never made): nothing;
    - ``old`` present, ``new`` missing: every step;
    - ``old`` write-blocked and ``new`` present: the clone was made, the rename finishes;
    - ``old`` not blocked and ``new`` present: both are someone's (a table made again under
      the old name after the rename): both are left alone.

    ``meta`` is the new index's ``_meta`` (its new owner); ``alias`` the filtered alias
    (name, filter) that reads it in tombstone mode (a clone does not copy aliases).
    """
    if not es.indices.exists(index=old):
        return "absent"
    blocked = write_blocked(es, old)
    if es.indices.exists(index=new):
        if not blocked:
            return "both"
    else:
        es.indices.put_settings(index=old, settings={WRITE_BLOCK: True})
        es.indices.clone(index=old, target=new, wait_for_active_shards="1")
    wait_for_primary(es, new, target)
    # The clone copies the settings, the block included, and the old owner in ``_meta``.
    es.indices.put_settings(index=new, settings={WRITE_BLOCK: None})
    es.indices.put_mapping(index=new, meta=meta)
    if alias is not None:
        es.indices.put_alias(index=new, name=alias[0], filter=alias[1])
    es.indices.delete(index=old)
    return "renamed"


def renamed_meta(meta: dict[str, Any], schema: str, table: str) -> dict[str, Any]:
    """``_meta`` with the new owner table."""
    found = dict(meta.get("tungsten") or {})
    found.update(schema=schema, table=table)
    return {**meta, "tungsten": found}


# -- columns --------------------------------------------------------------------------------

def renamed_columns(columns: list[dict[str, Any]], old: str, new: str,
                    keep_old: bool) -> list[dict[str, Any]]:
    """The column specs of ``_meta`` after the rename: ``new`` in ``old``'s place, ``old``
    kept after it when ``keep_old``. Already done: unchanged."""
    names = [c["name"] for c in columns]
    result: list[dict[str, Any]] = []
    for column in columns:
        name = column["name"]
        if name == old:
            if new not in names:
                result.append({**column, "name": new})
            if keep_old:
                result.append(column)
        else:
            result.append(column)
    return result


def moved_source(source: dict[str, Any], old: str, new: str,
                 keep_old: bool) -> dict[str, Any] | None:
    """A document's ``_source`` with field ``old`` renamed to ``new`` in its place (copied
    when ``keep_old``: the old one then goes last, after the bookkeeping fields, so it is
    not taken for a live column of a keyless row); None when there is nothing to do (no
    ``old``, or ``new`` already there: done before)."""
    if old not in source or new in source:
        return None
    moved: dict[str, Any] = {}
    for name, value in source.items():
        if name == old:
            moved[new] = value
        else:
            moved[name] = value
    if keep_old:
        moved[old] = source[old]
    return moved


def dropped_source(source: dict[str, Any], name: str) -> dict[str, Any] | None:
    """A document's ``_source`` without field ``name`` (None: it has none, done before)."""
    if name not in source:
        return None
    return {k: v for k, v in source.items() if k != name}


def row_columns(source: dict[str, Any], bookkeeping: frozenset[str]) -> list[str]:
    """The columns of a keyless document's row, in the order its hash took them: every
    field before the first bookkeeping one (what ``Counted`` writes first)."""
    names = []
    for name in source:
        if name in bookkeeping:
            break
        names.append(name)
    return names


def keyless_id(source: dict[str, Any], bookkeeping: frozenset[str]) -> str:
    """The ``_id`` of a keyless document from its row (``naming.row_id``)."""
    names = row_columns(source, bookkeeping)
    return row_id(names, [source[n] for n in names])


def column_writes(es: Elasticsearch, table: TableIndex, reshape: Reshape, what: str,
                  seqno: int, document_fields: frozenset[str]) -> Iterator[Write]:
    """The writes that ``reshape`` every document of the table's index it changes (the
    index refreshed first, so the scan sees every write): a renamed, copied or dropped
    field."""
    bookkeeping = frozenset(INTERNAL_FIELDS) | document_fields
    for hit in helpers.scan(es, index=table.index, query={"query": {"match_all": {}}},
                            size=1000, version=True, seq_no_primary_term=True):
        source = reshape(hit["_source"])
        if source is None:
            continue
        doc_id = hit["_id"]
        if ROWS in source:
            yield from _keyless_moves(table, hit, source, what, seqno, bookkeeping)
            continue
        # Written back at its own version: the seqno guard does not move.
        version = (b',"version":' + str(hit["_version"]).encode()
                   + b',"version_type":"external_gte"}}\n')
        yield Write(table.index_prefix + dumps(doc_id) + version + dumps(source) + b"\n",
                    seqno, table, doc_id, "index")


def _keyless_moves(table: TableIndex, hit: dict[str, Any], source: dict[str, Any],
                   what: str, seqno: int, bookkeeping: frozenset[str]) -> Iterator[Write]:
    """A keyless document to the hash of its reshaped row: created there (409: a replay
    already did), then deleted where it was (compare-and-set on what was read). A document
    whose id is not the hash of its row (written before an earlier column change) keeps its
    id: later changes do not find it either way."""
    doc_id = hit["_id"]
    guard = {"if_seq_no": hit["_seq_no"], "if_primary_term": hit["_primary_term"]}
    if keyless_id(hit["_source"], bookkeeping) != doc_id:
        log.warning("document %s of index %s (table %s, no key) is not at the hash of its "
                    "row (a column change before): %s in place; rebuild the index", doc_id,
                    table.index, table.qualified, what)
        action = {"index": {"_index": table.index, "_id": doc_id, **guard}}
        yield Write(dumps(action) + b"\n" + dumps(source) + b"\n", seqno, table, doc_id,
                    "index", versioned=False)
        return
    new_id = keyless_id(source, bookkeeping)
    create = {"create": {"_index": table.index, "_id": new_id}}
    yield Write(dumps(create) + b"\n" + dumps(source) + b"\n", seqno, table, new_id,
                "create")
    delete = {"delete": {"_index": table.index, "_id": doc_id, **guard}}
    yield Write(dumps(delete) + b"\n", seqno, table, doc_id, "delete", versioned=False)

