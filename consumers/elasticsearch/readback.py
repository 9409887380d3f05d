"""Reading a replicated table back from Elasticsearch as source rows (checks, tests, demo).

The index's mapping records the source column specs (``_meta.tungsten.columns``), so each
``_source`` value is turned back into the value the source column holds (``types.decode``).
A document of a table without a key stands for ``_rows`` equal rows; tombstones
(``_deleted``) are not rows. A consistency check reads its key range so (``read_range``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError, helpers

from consumers.check import CheckRange
from consumers.elasticsearch.types import DELETED, ROWS, decode
from consumers.errors import TransientError
from thl_topics.checksum import thl_value_of
from thl_topics.event import ColumnSpec, ThlValue


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


def read_range(es: Elasticsearch, alias: str, check: CheckRange, target: str
               ) -> Iterator[list[ThlValue]]:
    """The documents of a checked key range, as the source rows they stand for, in THL
    values (consumers.check): the index's mapping says how each field decodes."""
    try:
        if not es.indices.exists(index=alias):
            return
        for row in read_rows(es, alias):
            values = [thl_value_of(spec, row.get(spec.name)) for spec in check.specs]
            if check.key:
                names = [c.name for c in check.specs]
                if not check.contains([values[names.index(k)] for k in check.key]):
                    continue
            yield values
    except (ApiError, TransportError) as exc:
        raise TransientError(f"{target}: reading {alias} for a check: {exc}") from exc
