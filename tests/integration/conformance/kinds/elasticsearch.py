"""The Elasticsearch kind: one index per table, documents read back through their mapping.

Rows are compared exactly: every value is turned back into the source column's value from
``_source`` (``consumers.elasticsearch.readback``), and both sides then take one form for
what the two drivers give differently (BIT as bytes or an int, TIMESTAMP naive or in UTC,
FLOAT as the float32 it is); DECIMAL and floats are compared by their exact text.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from elasticsearch import Elasticsearch

from consumers.elasticsearch.naming import index_name
from consumers.elasticsearch.readback import read_rows
from consumers.elasticsearch.types import DOCUMENT_FIELDS, INTERNAL_FIELDS
from stack.service import Service

from ..tables import Table
from .base import Kind, Row

TEMPLATE = "{schema}.{table}"


def exact(column: str, value: Any) -> Any:
    """One exact, comparable form of a value from the source driver or from the index."""
    if value is None:
        return None
    if column in ("b64", "b1", "b9") and isinstance(value, bytes):
        return int.from_bytes(value, "big")
    if column == "f" and isinstance(value, float):
        # A FLOAT column holds a float32; the source prints it rounded, the THL has it exact.
        return ("float32", struct.pack("<f", value).hex())
    if isinstance(value, float):
        return ("double", value.hex())
    if isinstance(value, Decimal):
        return ("decimal", format(value, "f"))
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


class ElasticsearchKind(Kind):
    name = "elasticsearch"
    #: The stack's 512 MiB heap: indexing pressure refuses requests above 51 MiB.
    max_row_bytes = 51 * 1024 * 1024
    key_change_stop = "the primary key of"
    key_gained_stop = key_lost_stop = "the primary key of"
    servers = ("elasticsearch",)
    down = "elasticsearch"
    keyless = True
    #: Every write carries the seqno as its external version. (Hard deletes: a replay past
    #: index.gc_deletes or a restart shows deleted rows until it reaches their delete, and
    #: ends equal: tests/integration/consumers/elasticsearch/test_deletes.py.)
    replay_safe = True
    #: Delete mode of the target (the tombstone kind overrides it).
    deletes = "hard"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.servers_up['elasticsearch'].port}"

    def client(self) -> Elasticsearch:
        return Elasticsearch(self.url, request_timeout=60)

    def target(self, service: str) -> dict[str, Any]:
        return {"type": "elasticsearch", "hosts": [self.url], "index": TEMPLATE,
                "deletes": self.deletes}

    def index(self, schema: str, table: Table) -> str:
        """The name applications read (the filtered alias in tombstone mode)."""
        return index_name(TEMPLATE, "", schema, table.name)

    def rows(self, schema: str, table: Table) -> list[Row]:
        es = self.client()
        try:
            if not es.indices.exists(index=self.index(schema, table)):
                return []
            return [tuple(exact(c, row[c]) for c in table.columns)
                    for row in read_rows(es, self.index(schema, table))]
        finally:
            es.close()

    def columns(self, schema: str, name: str) -> set[str] | None:
        """The mapping's fields that ``_meta`` lists as the table's columns: a mapped field
        cannot be removed, so a column renamed in ``evolve`` mode stays mapped, without
        values, and only ``_meta`` stops listing it; the applier's own fields are left
        out."""
        es = self.client()
        try:
            index = index_name(TEMPLATE, "", schema, name)
            if not es.indices.exists(index=index):
                return None
            found = es.indices.get_mapping(index=index).body
        finally:
            es.close()
        mapping = next(iter(found.values()))["mappings"]
        fields = set(mapping.get("properties") or {}) - set(INTERNAL_FIELDS) \
            - set(DOCUMENT_FIELDS)
        listed = {c["name"] for c in
                  ((mapping.get("_meta") or {}).get("tungsten") or {}).get("columns", [])}
        return fields & listed

    def normalize(self, table: Table, row: Row) -> Row:
        return tuple(exact(c, v) for c, v in zip(table.columns, row, strict=True))

    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        self._delete(f"{schema.lower()}.*")

    def drop(self, schema: str, service: str) -> None:
        self._delete(f"{schema.lower()}.*", f"tungsten_{service}".lower())

    def _delete(self, *patterns: str) -> None:
        es = self.client()
        try:
            for pattern in patterns:
                es.indices.delete(index=pattern, ignore_unavailable=True,
                                  allow_no_indices=True, expand_wildcards="all")
        finally:
            es.close()

    def server(self) -> Service:
        return self.servers_up["elasticsearch"]

    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        es = self.client()
        try:
            index = self.index(schema, table)
            es.indices.refresh(index=index)
            hits = es.search(index=index, query={"term": {table.key[0]: key}})["hits"]["hits"]
            assert len(hits) == 1, hits
            es.update(index=hits[0]["_index"], id=hits[0]["_id"], doc={column: value},
                      refresh=True)
        finally:
            es.close()
