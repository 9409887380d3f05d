"""Renamed tables and columns, dropped tables (issue 28), in hard and tombstone mode, lenient
and evolve: the index is cloned under the new name with its documents' versions, a renamed
column's documents are rewritten at their own versions, keyless documents move to the hash
of the renamed row; each step is harmless to replay."""

from __future__ import annotations

from typing import Any

import pytest
from elasticsearch import ConflictError, Elasticsearch

from consumers.elasticsearch.restructure import WRITE_BLOCK, follow_rename, write_blocked

from ...conformance.tables import ITEMS, NOPK, Table
from .conftest import EsService

GOODS = Table("goods", "", ("id", "label", "qty", "price"), ("id",))
NOPK_RENAMED = Table("nopk", "", ("a", "c"), ())
GROUPS: dict[str, dict[str, Any]] = {
    "g": {"document_fields": ["source_table", "seqno"]},
    "tomb": {"deletes": "tombstone"},
    "ev": {"runtime": {"schema_changes": "evolve"}},
}


def _fields(svc: EsService, group: str, table: str) -> set[str]:
    index = svc.index(group, table)
    found = svc.es.indices.get_mapping(index=index).body
    meta = next(iter(found.values()))["mappings"]["_meta"]["tungsten"]
    assert (meta["schema"], meta["table"]) == (svc.schema, table)
    return {c["name"] for c in meta["columns"]}


def test_renames_follow_with_rows_versions_and_keyless_hashes(make_service: Any) -> None:
    svc: EsService = make_service(GROUPS)
    svc.start()
    svc.create(ITEMS, NOPK)
    s = svc.schema
    svc.src(*(f"INSERT INTO {s}.items VALUES ({i}, 'n{i}', {i}, {i}.5)" for i in range(4)),
            f"INSERT INTO {s}.nopk VALUES (1, 'x'), (1, 'x'), (2, NULL)")
    written = svc.committed(f"UPDATE {s}.items SET qty = 30 WHERE id = 3")
    svc.wait_source_applied()
    svc.src(f"RENAME TABLE {s}.items TO {s}.goods")
    svc.src(f"ALTER TABLE {s}.goods RENAME COLUMN name TO label",
            f"ALTER TABLE {s}.nopk RENAME COLUMN b TO c")
    svc.wait_source_applied()
    for group in GROUPS:
        assert not svc.es.indices.exists(index=svc.physical(group, "items"))
        # The versions (seqnos) came along with the clone and the field rewrite.
        doc = svc.es.get(index=svc.physical(group, "goods"), id="3")
        assert doc["_version"] == written, (group, doc)
        assert doc["_source"]["label"] == "n3"
        assert ("name" in doc["_source"]) == (group != "ev"), (group, doc)
        with pytest.raises(ConflictError):  # an older seqno stays refused
            svc.es.index(index=svc.physical(group, "goods"), id="3", version=written - 1,
                         version_type="external", document={"id": 3})
    assert {"label", "name"} <= _fields(svc, "g", "goods")
    assert "name" not in _fields(svc, "ev", "goods")
    # Later changes of the rows written before the renames land on them.
    svc.src(f"UPDATE {s}.goods SET label = 'relabelled' WHERE id = 1",
            f"DELETE FROM {s}.goods WHERE id = 2",
            f"UPDATE {s}.nopk SET c = 'y' WHERE a = 1 LIMIT 1",
            f"DELETE FROM {s}.nopk WHERE a = 2")
    svc.wait_source_applied()
    for group in GROUPS:
        assert svc.compare(group, GOODS) == {"goods": 3}
        assert svc.compare(group, NOPK_RENAMED) == {"nopk": 2}
    # A restart re-reads everything from the cluster.
    svc.stop()
    svc.start()
    svc.src(f"INSERT INTO {s}.goods VALUES (9, 'nine', 9, 9)", f"DROP TABLE {s}.nopk")
    svc.wait_source_applied()
    for group in GROUPS:
        assert svc.compare(group, GOODS) == {"goods": 4}
        assert svc.es.indices.exists(index=svc.index(group, "nopk")) == (group != "ev")


def test_a_rename_replayed_from_any_step_finishes_or_leaves_alone(
        elasticsearch: Any) -> None:
    es = Elasticsearch(f"http://127.0.0.1:{elasticsearch.port}", request_timeout=60)
    old, new = "restructure_probe.old", "restructure_probe.new"
    meta = {"tungsten": {"service": "s", "schema": "x", "table": "new"}}
    try:
        es.indices.create(index=old, mappings={"properties": {"id": {"type": "long"}}})
        es.index(index=old, id="1", document={"id": 1}, version=7, version_type="external",
                 refresh=True)
        # A crash right after the clone: the old index blocked, the new one made.
        es.indices.put_settings(index=old, settings={WRITE_BLOCK: True})
        es.indices.clone(index=old, target=new, wait_for_active_shards="1")
        assert follow_rename(es, old, new, meta, None, "t") == "renamed"
        assert not es.indices.exists(index=old) and not write_blocked(es, new)
        assert es.get(index=new, id="1")["_version"] == 7
        assert follow_rename(es, old, new, meta, None, "t") == "absent"
        # The old name made again (not being renamed): both are left alone.
        es.indices.create(index=old)
        assert follow_rename(es, old, new, meta, None, "t") == "both"
        assert es.indices.exists(index=old) and es.indices.exists(index=new)
    finally:
        es.indices.delete(index="restructure_probe.*", ignore_unavailable=True,
                          allow_no_indices=True)
        es.close()
