"""Reading a replicated table back from Elasticsearch as source rows (checks, tests, demo).

The index's mapping records the source column specs (``_meta.tungsten.columns``), so each
``_source`` value is turned back into the value the source column holds (``types.decode``).
A document of a table without a key stands for ``_rows`` equal rows; tombstones
(``_deleted``) are not rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from elasticsearch import Elasticsearch, helpers

from consumers.elasticsearch.applier import DELETED, ROWS
from consumers.elasticsearch.types import decode
from thl_topics.event import ColumnSpec


def column_specs(es: Elasticsearch, index: str) -> list[ColumnSpec]:
    """The source column specs recorded in the mapping of ``index`` (an index or alias)."""
    found = es.indices.get_mapping(index=index).body
    if len(found) != 1:
        raise ValueError(f"{index} names {len(found)} indices, not one")
    meta = (next(iter(found.values()))["mappings"].get("_meta") or {}).get("tungsten") or {}
    if "columns" not in meta:
        raise ValueError(f"index {index} was not written by the replicator (no "
                         "_meta.tungsten.columns in its mapping)")
    return [ColumnSpec.from_avro(c) for c in meta["columns"]]


def read_rows(es: Elasticsearch, index: str, refresh: bool = True
              ) -> Iterator[dict[str, object]]:
    """Every row of the table behind ``index``, column name -> value (None if absent).

    ``refresh`` first makes every write visible to the search (tests and checks; the
    applier never refreshes).
    """
    if refresh:
        es.indices.refresh(index=index)
    specs = column_specs(es, index)
    for hit in helpers.scan(es, index=index, query={"query": {"match_all": {}}},
                            size=1000):
        yield from rows_of(specs, hit["_source"])


def rows_of(specs: list[ColumnSpec], source: dict[str, Any]) -> Iterator[dict[str, object]]:
    """The source rows one document stands for (none for a tombstone)."""
    if source.get(DELETED):
        return
    row = {spec.name: decode(spec, source.get(spec.name)) for spec in specs}
    for _ in range(int(source.get(ROWS, 1))):
        yield dict(row)
