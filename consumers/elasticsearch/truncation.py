"""A table truncated at the source: every document of its index goes at that seqno.

Each live document is deleted (``deletes: hard``) or replaced by its tombstone (``deletes:
tombstone``) with the truncating seqno as its external version, exactly as a row delete
would be: a document a replay wrote after the truncate carries a higher version and stays
(the 409 counts as applied), and a replay of a write from before the truncate meets the
newer delete (for ``index.gc_deletes``) or tombstone and is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

from elasticsearch import Elasticsearch, helpers

from consumers.elasticsearch.bulk import BulkSender, Write
from consumers.elasticsearch.indices import TableIndex
from consumers.elasticsearch.types import DELETED, dumps

#: Documents per bulk request while a truncated index is emptied.
_BATCH = 1000


def empty_index(es: Elasticsearch, bulk: BulkSender, table: TableIndex, seqno: int,
                tombstones: bool) -> int:
    """Delete (or tombstone) every live document of ``table``'s index; how many."""
    es.indices.refresh(index=table.index)  # writes of earlier blocks become visible to scan
    done = 0
    batch: list[Write] = []
    for write in _writes(es, table, seqno, tombstones):
        batch.append(write)
        if len(batch) >= _BATCH:
            bulk.send(batch)
            done, batch = done + len(batch), []
    if batch:
        bulk.send(batch)
        done += len(batch)
    es.indices.refresh(index=table.index)
    return done


def _writes(es: Elasticsearch, table: TableIndex, seqno: int, tombstones: bool
            ) -> Iterator[Write]:
    version = b',"version":' + str(seqno).encode() + b',"version_type":"external"}}\n'
    live = {"query": {"bool": {"must_not": {"term": {DELETED: True}}}}}
    for hit in helpers.scan(es, index=table.index, query=live, _source=tombstones):
        doc_id = hit["_id"]
        if tombstones:
            lines = (table.index_prefix + dumps(doc_id) + version
                     + dumps({**hit["_source"], DELETED: True}) + b"\n")
            yield Write(lines, seqno, table, doc_id, "index")
        else:
            yield Write(table.delete_prefix + dumps(doc_id) + version, seqno, table, doc_id,
                        "delete")
