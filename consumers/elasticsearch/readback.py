"""Reading a replicated table back from Elasticsearch as source rows (checks, tests, demo).

The index's mapping records the source column specs (``_meta.tungsten.columns``), so each
``_source`` value is turned back into the value the source column holds (``types.decode``).
A document of a table without a key stands for ``_rows`` equal rows; tombstones
(``_deleted``) are not rows. A consistency check reads its key range so (``read_range``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError, helpers

from consumers.cascades import chunks, integer_lookup
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


def rows_matching(es: Elasticsearch, alias: str, specs: list[ColumnSpec],
                  columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]], target: str
                  ) -> Iterator[list[ThlValue]]:
    """The rows whose ``columns`` hold one of ``values`` (a cascade's child rows), as THL
    values in ``specs`` order: matched by a query on integer columns, else every row (the
    caller keeps exact matches)."""
    try:
        if not es.indices.exists(index=alias):
            return
        es.indices.refresh(index=alias)
        stored = column_specs(es, alias)
        queries: Iterable[dict[str, Any]] = (
            _matching(columns, chunk) for chunk in chunks(values)) \
            if integer_lookup(specs, columns, values) else [{"match_all": {}}]
        for query in queries:
            for hit in helpers.scan(es, index=alias, query={"query": query}, size=1000):
                for row in rows_of(stored, hit["_source"]):
                    yield [thl_value_of(spec, row.get(spec.name)) for spec in specs]
    except (ApiError, TransportError) as exc:
        raise TransientError(f"{target}: reading {alias} for a cascade: {exc}") from exc


def _matching(columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
              ) -> dict[str, Any]:
    if len(columns) == 1:
        return {"terms": {columns[0]: [v[0] for v in values]}}
    return {"bool": {"minimum_should_match": 1, "should": [
        {"bool": {"filter": [{"term": {c: v}} for c, v in zip(columns, row, strict=True)]}}
        for row in values]}}


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
