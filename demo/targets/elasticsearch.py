"""The demo on Elasticsearch: an index per demo table, rebuilt by deleting them (statements
do not flow there), read back through the mapping's column specs for the digests."""

from __future__ import annotations

from collections.abc import Sequence

from elasticsearch import Elasticsearch

from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.elasticsearch.naming import TOMBSTONE_SUFFIX, index_name
from consumers.elasticsearch.readback import read_rows
from demo.compare import Digest, digest
from demo.tables import SCHEMA, DemoTable
from trep.config import ServiceConfig


class ElasticsearchDemoTarget:
    """An Elasticsearch consumer group's target."""

    def __init__(self, cfg: ServiceConfig, group: str, tables: Sequence[DemoTable]) -> None:
        target = cfg.consumers[group].target
        if not isinstance(target, ElasticsearchTarget):
            raise TypeError(f"{group} is not an Elasticsearch group")
        self.target = target
        self.service = cfg.service
        self.tables = tables

    def _client(self) -> Elasticsearch:
        return Elasticsearch(**self.target.client_options())

    def name(self, table: DemoTable) -> str:
        """The index (or, with tombstones, the filtered alias) applications read."""
        reserve = len(TOMBSTONE_SUFFIX) if self.target.deletes == "tombstone" else 0
        return index_name(self.target.index, self.service, SCHEMA, table.name,
                          self.target.indices, reserve=reserve)

    def rebuild(self) -> None:
        """Delete the demo tables' indices: the group recreates them from the row changes."""
        es = self._client()
        try:
            for table in self.tables:
                name = self.name(table)
                es.indices.delete(index=f"{name},{name}{TOMBSTONE_SUFFIX}",
                                  ignore_unavailable=True)
        finally:
            es.close()

    def digests(self) -> dict[str, Digest]:
        es = self._client()
        try:
            found = {}
            for table in self.tables:
                name = self.name(table)
                rows = [] if not es.indices.exists(index=name) else [
                    tuple(row[c] for c in table.columns) for row in read_rows(es, name)]
                found[table.name] = digest(rows)
            return found
        finally:
            es.close()
