"""Deletes and replays: hard deletes after ``index.gc_deletes`` and across a restart, and
tombstones, which stay replay-safe in both cases.

Each scenario replays the group from the seqno that inserted the rows with the crash point
``apply-committed`` armed and one seqno per block, so the process dies right after applying
that seqno alone: the index shows what a replay that has not reached the delete yet leaves
behind. Then a normal process finishes the replay.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from replicator.crashpoints import EXIT_STATUS
from stack import services

from ...conformance.tables import ITEMS
from .conftest import EsService

#: One seqno per block: the crash after the first commit stops right after the insert.
RUNTIME: dict[str, Any] = {"runtime": {"block_commit_events": 1}}


def _prepare(svc: EsService) -> tuple[int, int]:
    """Rows 1..10 inserted, 1..5 deleted, both groups applied; (insert seqno, delete)."""
    svc.start()
    svc.create(ITEMS)
    s = svc.schema
    inserted = svc.committed(f"INSERT INTO {s}.items VALUES (%s, %s, %s, %s)",
                             params=[(i, f"row {i}", i, i) for i in range(1, 11)], many=True)
    deleted = svc.committed(f"DELETE FROM {s}.items WHERE id <= 5")
    svc.wait_source_applied()
    for group in svc.groups:
        assert svc.compare(group, ITEMS) == {"items": 5}
    # Tombstone mode: the deleted rows are documents with the delete's version, hidden by
    # the alias; hard mode: they are gone.
    assert svc.ids("tomb", ITEMS, physical=True) == {str(i) for i in range(1, 11)}
    for i in range(1, 6):
        doc = svc.es.get(index=svc.physical("tomb", ITEMS), id=str(i))
        assert doc["_version"] == deleted and doc["_source"] == {"id": i, "_deleted": True}
    assert svc.ids("hard", ITEMS, physical=True) == {str(i) for i in range(6, 11)}
    svc.stop()
    svc.trepctl("offline")
    return inserted, deleted


def _replay_first_seqno(svc: EsService, group: str, seqno: int) -> set[str]:
    """Replay ``group`` from ``seqno``, killed right after it: the ids its index shows."""
    proc = svc.spawn("--no-extractor", "--consumer", group, crash="apply-committed:1")
    svc.wait_alive(group)
    svc.trepctl("reset", "-group", group, "-y")
    svc.trepctl("online", "-group", group, "--from-seqno", str(seqno))
    try:
        code = proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"crash point never reached:\n{svc.log()[-3000:]}") from None
    assert code == EXIT_STATUS, svc.log()[-3000:]
    return svc.ids(group, ITEMS)


def _finish(svc: EsService, deleted: int) -> None:
    proc = svc.spawn("--no-extractor")
    try:
        svc.wait_applied(deleted)
        for group in svc.groups:
            assert svc.compare(group, ITEMS) == {"items": 5}
            assert svc.ids(group, ITEMS) == {str(i) for i in range(6, 11)}
    finally:
        proc.terminate()
        assert proc.wait(60) == 0, svc.log()[-3000:]


def test_replay_after_the_gc_deletes_window(make_service: Any) -> None:
    settings = {"index_settings": {"index.gc_deletes": "1s"}, **RUNTIME}
    svc = make_service({"hard": {"deletes": "hard", **settings},
                        "tomb": {"deletes": "tombstone", **settings}})
    inserted, deleted = _prepare(svc)
    # Past the window (time itself is the condition here); a refresh is when Elasticsearch
    # prunes the deletes it remembers.
    time.sleep(1.5)
    svc.es.indices.refresh(index=f"{svc.schema}.*", expand_wildcards="all")
    # Hard deletes: the replay of the insert writes the deleted rows again (the window's
    # caveat) ...
    assert _replay_first_seqno(svc, "hard", inserted) == {str(i) for i in range(1, 11)}
    # ... tombstones keep their version: the same replay changes nothing.
    assert _replay_first_seqno(svc, "tomb", inserted) == {str(i) for i in range(6, 11)}
    # Once the replay reaches the delete, both indices equal the source.
    _finish(svc, deleted)


@pytest.mark.exclusive("elasticsearch")  # restarts it
def test_tombstones_stay_replay_safe_across_an_elasticsearch_restart(
        make_service: Any) -> None:
    svc = make_service({"hard": {"deletes": "hard", **RUNTIME},
                        "tomb": {"deletes": "tombstone", **RUNTIME}})
    inserted, deleted = _prepare(svc)
    es = services.get("elasticsearch")
    es.stop()
    es.start()  # returns once the node answers and the cluster is at least yellow
    # Well inside the 60 s gc_deletes window, the restart alone made Elasticsearch forget
    # the hard deletes' versions (elastic/elasticsearch#101178) ...
    assert _replay_first_seqno(svc, "hard", inserted) == {str(i) for i in range(1, 11)}
    # ... not the tombstones'.
    assert _replay_first_seqno(svc, "tomb", inserted) == {str(i) for i in range(6, 11)}
    for i in range(1, 6):
        assert svc.es.get(index=svc.physical("tomb", ITEMS), id=str(i))["_version"] == deleted
    _finish(svc, deleted)
