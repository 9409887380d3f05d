"""Elasticsearch bulk index with external versions, refresh, search, stale-version refusal."""

from __future__ import annotations

import uuid

import pytest
from elasticsearch import ConflictError, Elasticsearch, helpers

from stack.services.elasticsearch import Elasticsearch as EsService


def test_bulk_index_search_and_external_versions(elasticsearch: EsService) -> None:
    es = Elasticsearch(elasticsearch.url)
    index = f"smoke-{uuid.uuid4().hex[:8]}"
    try:
        es.indices.create(index=index, settings={"number_of_shards": 1,
                                                 "number_of_replicas": 0})
        actions = [
            {"_op_type": "index", "_index": index, "_id": str(i), "version": 10 + i,
             "version_type": "external", "_source": {"id": i, "name": f"row {i} é😀",
                                                     "seqno": 10 + i}}
            for i in range(5)
        ]
        ok, errors = helpers.bulk(es, actions, refresh="wait_for")
        assert (ok, errors) == (5, [])
        hits = es.search(index=index, query={"range": {"id": {"gte": 3}}},
                         sort=[{"id": "asc"}])["hits"]["hits"]
        assert [(h["_id"], h["_source"]) for h in hits] == [
            ("3", {"id": 3, "name": "row 3 é😀", "seqno": 13}),
            ("4", {"id": 4, "name": "row 4 é😀", "seqno": 14}),
        ]
        # A replay of an older seqno must not overwrite a newer document.
        with pytest.raises(ConflictError):
            es.index(index=index, id="4", document={"id": 4, "name": "stale"}, version=12,
                     version_type="external")
        assert es.get(index=index, id="4")["_source"]["name"] == "row 4 é😀"
        assert es.get(index=index, id="4")["_version"] == 14
        # A delete leaves a versioned tombstone (for index.gc_deletes, 60 s by default): a
        # stale replay of the row must not bring the deleted document back.
        es.delete(index=index, id="0", version=20, version_type="external", refresh=True)
        with pytest.raises(ConflictError):
            es.index(index=index, id="0", document={"id": 0, "name": "stale"}, version=15,
                     version_type="external")
        assert not es.exists(index=index, id="0")
        assert es.count(index=index)["count"] == 4
    finally:
        es.indices.delete(index=index, ignore_unavailable=True)
        es.close()
