"""``trepctl provision`` into MongoDB (FerretDB): a drifted collection, with and without a
key, re-provisioned while the source keeps writing and the process is killed in the middle,
ends equal to the source row by row."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replicator.requests import read_request
from stack.service import Service
from stack.services.mariadb import MariaDB

from ..conformance.conftest import Conformance
from ..conformance.kinds.mongodb import MongoDBKind
from ..conformance.tables import Table
from ..harness.cleanup import cleaned
from .tables import ACCOUNTS_MYSQL, ACCOUNTS_NAMES, NOPK_MYSQL, NOPK_NAMES
from .test_outages import _until
from .workload import MixedWorkload

ACCOUNTS = Table("accounts", ACCOUNTS_MYSQL, tuple(ACCOUNTS_NAMES), ("id",))
NOPK = Table("nopk", NOPK_MYSQL, tuple(NOPK_NAMES), ())
SEEDED = 4000


@pytest.fixture
def svc(tmp_path: Path, ferretdb: Service, mariadb_source: MariaDB, kafka: Service,
        zookeeper: Service) -> Iterator[Conformance]:
    yield from cleaned(Conformance(tmp_path, MongoDBKind({"ferretdb": ferretdb}),
                                   mariadb_source, kafka, zookeeper))


def _request(svc: Conformance) -> Any:
    return read_request(svc.zk, svc.cfg)


def test_reprovision_repairs_drifted_collections_across_a_kill_while_writing(
        svc: Conformance) -> None:
    s = svc.schema
    # Small throttled chunks: provisioning lasts a few seconds, long enough to be killed.
    svc.configure(provision_chunk_rows=200, provision_rows_per_s=1500)
    proc = svc.spawn()
    svc.wait_extractor_online()
    svc.create(ACCOUNTS, NOPK)
    svc.src(f"INSERT INTO {s}.accounts VALUES (%s, %s, %s, %s, %s, %s)",
            params=[(i, f"name {i} ü😀", f"{i}.{i % 10000:04d}", None if i % 7 else "note",
                     f"2024-01-01 00:00:{i % 60:02d}.{i % 999999:06d}", i % 3)
                    for i in range(1, SEEDED + 1)], many=True)
    svc.src(f"INSERT INTO {s}.nopk VALUES (%s, %s, %s)",
            params=[(i % 20, None if i % 5 else "x", 0.5) for i in range(300)], many=True)
    svc.wait_source_applied()
    assert svc.compare(ACCOUNTS, NOPK) == {"accounts": SEEDED, "nopk": 300}

    # The target drifts behind the replicator's back: documents lost, one it never wrote
    # (no _seqno), a changed value; in the keyless collection too.
    with svc.kind.client() as client:  # type: ignore[attr-defined]
        accounts, nopk = client[s]["accounts"], client[s]["nopk"]
        accounts.delete_many({"_id": {"$lt": 50}})
        accounts.insert_one({"_id": 99999, "id": 99999, "name": "ghost"})
        accounts.update_one({"_id": 500}, {"$set": {"name": "wrong"}})
        nopk.delete_many({"a": 3})
        nopk.insert_one({"_id": "foreign", "a": 1, "b": "ghost", "c": 0.5})
    with pytest.raises(AssertionError):
        svc.compare(ACCOUNTS)
    with pytest.raises(AssertionError):
        svc.compare(NOPK)

    asked = svc.trepctl("provision", "-table", f"{s}.accounts", "-table", f"{s}.nopk",
                        "--no-wait")
    assert asked.returncode == 0, asked.stderr
    # Writes start once the extractor has opened the request: a change committed before it
    # that meets a drifted row is a divergence, and the group rightly stops on it.
    _until("provisioning running",
           lambda: getattr(_request(svc), "state", None) in ("running", "done"), 60)
    work = MixedWorkload(svc.source.port, s, seed=13, rate=40)
    work._next_id = SEEDED + 1  # new rows above the seeded ones; updates hit them all
    work.start()
    try:
        _until("provisioning half way",
               lambda: (getattr(_request(svc), "rows_done", 0) or 0) >= SEEDED // 3, 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert _request(svc).state == "running"  # killed in the middle, not after
        proc = svc.spawn()
        _until("provisioning done", lambda: getattr(_request(svc), "state", None) == "done",
               180)
    finally:
        committed = work.stop()
    assert committed > 20
    svc.wait_source_applied()
    counts = svc.compare(ACCOUNTS, NOPK)
    assert counts["accounts"] > SEEDED - 200 and counts["nopk"] > 250
    with svc.kind.client() as client:  # type: ignore[attr-defined]
        markers = {d["_id"]: d["_seqno"] for d in
                   client[svc.cfg.tracking_schema]["provisioned"].find()}
        assert set(markers) == {f"{s}.accounts", f"{s}.nopk"}
        assert client[s]["accounts"].count_documents({"_seqno": {"$exists": False}}) == 0
    proc.terminate()
    assert proc.wait(60) == 0, svc.log_path.read_text()[-3000:]
    assert "(a provisioning chunk or a TRUNCATE)" in svc.log_path.read_text()
