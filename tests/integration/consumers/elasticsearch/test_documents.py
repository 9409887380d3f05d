"""What the documents hold: one transaction's changes collapsed, versions = seqnos, document
fields, the position and heartbeats in the tracking index; a large transaction sent in
several bulks and killed half-way."""

from __future__ import annotations

import datetime as dt
import subprocess
from typing import Any

from replicator.crashpoints import EXIT_STATUS

from ...conformance.tables import BIG, ITEMS
from .conftest import EsService

FIELDS = ["source_schema", "source_table", "committime", "seqno"]


def test_one_transaction_changing_rows_several_times_leaves_their_last_state(
        make_service: Any) -> None:
    svc: EsService = make_service({"g": {"document_fields": FIELDS},
                                   "tomb": {"deletes": "tombstone"}})
    svc.start()
    svc.create(ITEMS)
    s = svc.schema
    first = svc.committed(f"INSERT INTO {s}.items VALUES (10, 'ten', 10, 1.5)")
    # Every change of one transaction carries one seqno: external versions cannot order
    # them, the applier collapses them so the last one wins.
    seqno = svc.committed(
        f"INSERT INTO {s}.items VALUES (1, 'a', 1, 1)",
        f"UPDATE {s}.items SET name = 'b' WHERE id = 1",
        f"UPDATE {s}.items SET id = 2 WHERE id = 1",          # a key change
        f"INSERT INTO {s}.items VALUES (1, 'c', 3, 3)",        # the old key again
        f"INSERT INTO {s}.items VALUES (3, 'gone', 3, 3)",
        f"DELETE FROM {s}.items WHERE id = 3",
        f"UPDATE {s}.items SET qty = 11 WHERE id = 10")
    applied = svc.wait_source_applied()
    assert svc.compare("g", ITEMS) == {"items": 3}
    assert svc.compare("tomb", ITEMS) == {"items": 3}
    # The row inserted and deleted in the transaction is a tombstone at that seqno.
    tombstone = svc.es.get(index=svc.physical("tomb", ITEMS), id="3")
    assert (tombstone["_version"], tombstone["_source"]) == (seqno,
                                                             {"id": 3, "_deleted": True})
    index = svc.index("g", ITEMS)
    docs = {i: svc.es.get(index=index, id=i) for i in ("1", "2", "10")}
    assert {i: d["_version"] for i, d in docs.items()} == {"1": seqno, "2": seqno,
                                                           "10": seqno}
    assert not svc.es.exists(index=index, id="3")
    assert first < seqno
    source = docs["1"]["_source"]
    assert {k: source[k] for k in ("id", "name", "qty", "price")} == {
        "id": 1, "name": "c", "qty": 3, "price": "3.00"}
    assert (source["source_schema"], source["source_table"], source["seqno"]) == (
        s, "items", seqno)
    committime = dt.datetime.fromisoformat(source["committime"])
    assert abs((dt.datetime.now(dt.UTC) - committime).total_seconds()) < 300

    # The position: a document in tungsten_<service>, as trep_commit_seqno has it.
    tracking = svc.cfg.tracking_schema.lower()
    position = svc.es.get(index=tracking, id="trep_commit_seqno:g:0")["_source"]
    status = svc.status("g")
    assert position["seqno"] == applied == status["appliedLastSeqno"]
    assert position["eventid"] == status["appliedLastEventId"]
    assert position["epoch_number"] == status["appliedLastEpoch"]

    # A heartbeat travels through the THL and lands in the tracking index with each group's
    # own arrival time and lag.
    svc.trepctl("heartbeat", "-name", "probe")
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    beats: dict[str, dict[str, Any]] = {}
    while len(beats) < 2:
        assert dt.datetime.now(dt.UTC) < deadline, f"heartbeat documents: {beats}"
        svc.es.indices.refresh(index=tracking)
        hits = svc.es.search(index=tracking, query={"term": {"kind": "heartbeat"}})
        beats = {h["_source"]["group"]: h["_source"] for h in hits["hits"]["hits"]
                 if h["_source"]["name"] == "probe"}
    assert set(beats) == {"g", "tomb"}
    for beat in beats.values():
        assert beat["seqno"] > applied and 0 <= beat["lag_millis"] < 60_000


def test_a_large_transaction_in_several_bulks_killed_half_way_converges(
        make_service: Any) -> None:
    svc: EsService = make_service({"g": {"bulk_max_bytes": 65536}})
    svc.configure(fragment_rows=500)
    svc.start(consumers=[])
    svc.create(BIG)
    proc = svc.spawn("--no-extractor")
    svc.wait_source_applied()
    proc.terminate()
    assert proc.wait(60) == 0, svc.log()[-3000:]
    s = svc.schema
    # One transaction, 12 fragments: 3000 inserts, then every row updated, some twice.
    seqno = svc.committed(
        f"INSERT INTO {s}.big SELECT seq, CONCAT('row ', seq, ' ', REPEAT('x', 20)) "
        f"FROM {s}.seq_0_to_2999",
        f"UPDATE {s}.big SET pad = CONCAT('updated ', id)",
        f"UPDATE {s}.big SET pad = 'twice' WHERE id % 7 = 0")
    # Killed after nine of its fragments: bulks of the inserts and of some updates are in.
    proc = svc.spawn("--no-extractor", crash="apply-between-fragments:9")
    try:
        assert proc.wait(120) == EXIT_STATUS, svc.log()[-3000:]
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    svc.es.indices.refresh(index=svc.index("g", BIG))
    partial = svc.es.count(index=svc.index("g", BIG))["count"]
    assert 0 < partial, "nothing was sent before the crash: the test proves nothing"
    proc = svc.spawn("--no-extractor")
    try:
        svc.wait_applied(seqno)
        assert svc.compare("g", BIG) == {"big": 3000}
        assert svc.es.get(index=svc.index("g", BIG), id="7")["_source"]["pad"] == "twice"
        assert svc.es.get(index=svc.index("g", BIG), id="8")["_version"] == seqno
    finally:
        proc.terminate()
        assert proc.wait(60) == 0, svc.log()[-3000:]
