"""A MongoDB consumer group end to end (source MariaDB -> THL -> FerretDB): refused data
and SIGKILLs under load."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from replicator.crashpoints import EXIT_STATUS
from stack.service import Service
from stack.services.mariadb import MariaDB
from trep.runner import Runner

from ..conformance.conftest import Conformance
from ..conformance.kinds.mongodb import MongoDBKind
from ..conformance.tables import Table
from ..harness.cleanup import cleaned
from ..harness.processes import kill_leftovers, spawn_trep
from ..soak import kills
from .tables import ACCOUNTS_MYSQL, ACCOUNTS_NAMES, NOPK_MYSQL, NOPK_NAMES
from .workload import MixedWorkload

DOCS = Table("docs", "CREATE TABLE {s}.docs (id INT PRIMARY KEY, j JSON, t TEXT) "
             "DEFAULT CHARSET=utf8mb4", ("id", "j", "t"), ("id",))
ACCOUNTS = Table("accounts", ACCOUNTS_MYSQL, tuple(ACCOUNTS_NAMES), ("id",))
NOPK = Table("nopk", NOPK_MYSQL, tuple(NOPK_NAMES), ())


class _Kind(MongoDBKind):
    def target(self, service: str) -> dict[str, Any]:
        # Small write-ahead batches: kills land while a block is half written ahead too.
        return {**super().target(service), "json_columns": ["*.docs.j"], "batch_ops": 25}


class _TransactionsOn(MongoDBKind):
    def target(self, service: str) -> dict[str, Any]:
        return {**super().target(service), "transactions": "on"}


@pytest.fixture
def mongo(request: pytest.FixtureRequest, tmp_path: Path, ferretdb: Service,
          mariadb_source: MariaDB, kafka: Service, zookeeper: Service) -> Iterator[Conformance]:
    kind = getattr(request, "param", _Kind)
    yield from cleaned(Conformance(tmp_path, kind({"ferretdb": ferretdb}), mariadb_source,
                                   kafka, zookeeper))


@pytest.mark.parametrize("mongo", [_TransactionsOn], indirect=True)
def test_transactions_on_against_ferretdb_stops_the_group_at_once(
        mongo: Conformance) -> None:
    svc = mongo
    started = time.monotonic()
    svc.start()
    status = svc.wait_state("OFFLINE:ERROR", timeout=60)
    assert time.monotonic() - started < 30
    assert status["pendingErrorCode"] == "TERMINAL"
    assert "transactions: on, but FerretDB v1.24.0 has no multi-document transactions" \
        in status["pendingExceptionMessage"]


def _ids(svc: Conformance) -> list[int]:
    return sorted(d["id"] for d in svc.kind.documents(svc.schema, "docs"))  # type: ignore[attr-defined]


def test_a_document_the_server_refuses_stops_at_its_seqno_and_skip_goes_past(
        mongo: Conformance) -> None:
    svc = mongo
    svc.start()
    svc.create(DOCS)
    table = f"{svc.schema}.docs"
    svc.src(f"INSERT INTO {table} VALUES (1, '{{\"ok\": [1]}}', 'a\\0b')")
    last = svc.wait_source_applied()
    assert svc.trepctl("offline").returncode == 0
    svc.wait_state("OFFLINE:NORMAL")
    # One block: a good seqno, a bad one (the good row beside the bad one must not land
    # either: a transaction is applied whole or not at all), then good ones again.
    svc.src(f"INSERT INTO {table} VALUES (2, '{{\"fine\": 2}}', 'x')")
    svc.src(f"INSERT INTO {table} VALUES (3, '{{\"fine\": 3}}', 'x')",
            f"INSERT INTO {table} VALUES (4, '{{\"a\": {{\"$bad\": 1}}}}', 'x')")
    svc.src(f"INSERT INTO {table} VALUES (5, '{{\"x.y\": 5}}', 'x')")
    svc.src(f"INSERT INTO {table} VALUES (6, '[6]', 'x')")
    assert svc.trepctl("online").returncode == 0
    status = svc.wait_state("OFFLINE:ERROR")
    bad = last + 2
    assert status["pendingErrorSeqno"] == bad and status["appliedLastSeqno"] == bad - 1
    message = status["pendingExceptionMessage"]
    assert f"seqno {bad} (event {status['pendingErrorEventId']}), table {table}, column j" \
        in message and "JSON key '$bad' at 'a.$bad'" in message, message
    assert _ids(svc) == [1, 2]
    assert svc.trepctl("online", "--skip-seqno", str(bad)).returncode == 0
    status = svc.wait_state("OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == bad + 1
    assert "JSON key 'x.y'" in status["pendingExceptionMessage"]
    assert svc.trepctl("online", "--skip-seqno", str(bad + 1)).returncode == 0
    svc.wait_source_applied()
    status = svc.status()
    assert {bad, bad + 1} <= set(status["skippedSeqnos"])
    assert _ids(svc) == [1, 2, 6]
    docs = {d["id"]: d for d in svc.kind.documents(svc.schema, "docs")}  # type: ignore[attr-defined]
    assert docs[1]["j"] == {"ok": [1]} and docs[1]["t"] == "a\x00b" and docs[6]["j"] == [6]


def _spawn_consumer(svc: Conformance, crash: str | None = None) -> subprocess.Popen[bytes]:
    proc = spawn_trep("trep.runner", svc.config_path, svc.log_path, "--no-extractor",
                      crash=crash or None)
    svc.procs.append(proc)
    return proc


def _expire_dead_holder(svc: Conformance) -> None:
    """Drop the group lock's znodes of a killed process, as its session's expiry would.

    Without this the next process waits as standby for the dead one's ZooKeeper session to
    time out (10 s), behind every other killed contender, and the kills would hit standbys.
    """
    path = f"{svc.cfg.zookeeper.root}/{svc.name}/consumers/g/lock"
    for child in svc.zk.get_children(path) if svc.zk.exists(path) else []:
        try:
            svc.zk.delete(f"{path}/{child}")
        except NoNodeError:
            pass


def test_mongodb_group_killed_repeatedly_under_load_converges_row_by_row(
        mongo: Conformance) -> None:
    svc = mongo
    # The extractor in this process; the consumer group in processes killed with SIGKILL.
    svc.runner = Runner(svc.cfg, extractor=True, consumers=[])
    svc.runner.start()
    svc.wait_extractor_online()
    svc.create(ACCOUNTS, NOPK)
    # FerretDB scans a collection for every lookup of a keyless row: a steady load, not a
    # flood, keeps the catch-up short.
    work = MixedWorkload(svc.source.port, svc.schema, seed=31, rate=40)
    work.start()
    rng = random.Random(11)
    died_before_position = 0
    try:
        for n in range(kills()):
            # Most of the time a consumer waits for events, and a kill rarely lands between
            # a block's data and its position: every other process is armed to die right
            # there (as a SIGKILL would) at a random one of its first blocks.
            crash = f"apply-before-position:{rng.randint(1, 3)}" if n % 2 else None
            proc = _spawn_consumer(svc, crash)
            if crash:
                # Under load it reaches that block within seconds: wait for it.
                assert proc.wait(120) == EXIT_STATUS, svc.log_path.read_text()[-3000:]
                died_before_position += 1
            else:
                time.sleep(rng.uniform(1.5, 3.0))
                assert proc.poll() is None, svc.log_path.read_text()[-3000:]
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            _expire_dead_holder(svc)
    finally:
        committed = work.stop(at_least=101)
    assert committed > 100
    proc = _spawn_consumer(svc)
    try:
        svc.wait_source_applied(timeout=300)
        counts = svc.compare(ACCOUNTS, NOPK)
        # The table without a key is the one a double apply would show (duplicate rows).
        assert counts["accounts"] > 50 and counts["nopk"] > 5, counts
        # Blocks were applied again after dying between their data and their position.
        assert died_before_position == kills() // 2, died_before_position
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, svc.log_path.read_text()[-3000:]
        kill_leftovers(svc.procs)
