"""Exactly once under crashes: ``trep-run`` applying a warehouse group in process (its own
driver JVM) is SIGKILLed at random moments while a writer keeps publishing (2 kills in
``make test``, 20 in ``make soak``, which first crashes it at the named crash points between
two tables' MERGEs and between the MERGEs and the position too: ``make test`` runs those on
a Connect client, ``test_connect.py``); after a clean restart every Delta table equals the
model of the source row by row, ``_seqno`` included.

Every kill lands while blocks are being applied (``_until_applying``). Before each of the
first ``WARM_KILLS`` kills a second ``trep-run`` waits as standby, as an operator's spare
process would: it starts its Spark while the first applies (``warm_up``), and takes the
group over once the killed process's ZooKeeper session expires. After those, each kill is
followed by a new process, as a supervisor restarts one, so both ways of taking over are
covered. Every driver JVM maps the class-data archive
(``stack/class_archive.py``), which the test makes sure of.
``TREP_WAREHOUSE_KILLS`` changes the count."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consumers.warehouse.session import DEFAULTS
from replicator.crashpoints import EXIT_STATUS
from stack import class_archive
from stack.services.spark import warehouse_spark
from stack.settings import REPO_ROOT
from thl_topics.event import RowChange

from ..harness.processes import kill_leftovers, spawn_trep
from ..soak import SOAK, kills
from .conftest import GROUP, CraftedThl, delete, insert, spec, update

TABLES = {"a": [spec(1, "id", "INT", key=True), spec(2, "v", "VARCHAR", length=40)],
          "b": [spec(1, "k", "VARCHAR", length=20, key=True), spec(2, "n", "BIGINT")]}
# Two in make test: test_connect.py kills Connect clients as well, where a kill costs no JVM.
KILLS = int(os.environ.get("TREP_WAREHOUSE_KILLS", str(kills(quick=2))))
#: Kills handed over to a spare that warmed up while the leader applied.
WARM_KILLS = min(4, KILLS // 2)
#: The writer stops at this seqno, however long the kills take.
WRITER_CAP = 30 + 30 + 40 * KILLS


class Model:
    """The source as the THL describes it: what every Delta table must end up holding."""

    def __init__(self, svc: CraftedThl, seed: int) -> None:
        self.svc = svc
        self.rng = random.Random(seed)
        self.rows: dict[str, dict[Any, tuple[Any, ...]]] = {"a": {}, "b": {}}
        self.last_seqno: dict[tuple[str, Any], int] = {}
        self.next_key = 0
        self.lock = threading.Lock()

    def transaction(self) -> int:
        """One THL event touching both tables (so every block has two MERGEs)."""
        with self.lock:
            seqno = self.svc.next_seqno
            items: list[RowChange] = []
            for table in ("a", "b"):
                for _ in range(self.rng.randint(1, 4)):
                    items.append(self._change(table, seqno))
            return self.svc.publish(*items)

    def _change(self, table: str, seqno: int) -> RowChange:
        rows, specs = self.rows[table], TABLES[table]
        roll = self.rng.random()
        if not rows or roll < 0.45:
            self.next_key += 1
            key: Any = self.next_key if table == "a" else f"k{self.next_key}"
            row = (key, f"v{seqno}") if table == "a" else (key, seqno * 7)
            rows[key] = row
            self.last_seqno[(table, key)] = seqno
            return insert("s", table, specs, list(row))
        key = self.rng.choice(sorted(rows, key=repr))
        old = rows[key]
        if roll < 0.8:
            new_key = key
            if roll > 0.75 and table == "a":  # a key change
                self.next_key += 1
                new_key = self.next_key
            new = (new_key, f"u{seqno}") if table == "a" else (new_key, seqno)
            del rows[key]
            rows[new_key] = new
            self.last_seqno[(table, new_key)] = seqno
            return update("s", table, specs, list(old), list(new))
        del rows[key]
        return delete("s", table, specs, list(old))

    def expected(self, table: str) -> list[tuple[Any, ...]]:
        return sorted(((*r, self.last_seqno[(table, r[0])]) for r in self.rows[table].values()),
                      key=repr)


_PROCS: list[subprocess.Popen[bytes]] = []


def _spawn(svc: CraftedThl, crash: str | None = None) -> subprocess.Popen[bytes]:
    proc = spawn_trep("trep.runner", svc.config_path, svc.config_path.parent / f"{svc.name}.log",
                      "--no-extractor", crash=crash or None)
    _PROCS.append(proc)
    return proc


def _log(svc: CraftedThl) -> str:
    return (svc.config_path.parent / f"{svc.name}.log").read_text()[-4000:]


def _standby_lines(svc: CraftedThl) -> int:
    return (svc.config_path.parent / f"{svc.name}.log").read_text().count(
        "standby: another process applies this group")


def _until_standing_by(svc: CraftedThl, proc: subprocess.Popen[bytes], before: int) -> None:
    """Until a spare process waits as standby (the log has more than ``before`` such lines)."""
    deadline = time.monotonic() + 120
    while _standby_lines(svc) <= before:
        assert proc.poll() is None, _log(svc)
        assert time.monotonic() < deadline, f"no standby in 120 s: {_log(svc)}"
        time.sleep(0.2)


def _until_applying(svc: CraftedThl, proc: subprocess.Popen[bytes], since: float) -> None:
    """Until the group is ONLINE since ``since`` (its Spark started, its handshake done)."""
    deadline = time.monotonic() + 300
    while True:
        status = svc.status()
        if status.get("state") == "ONLINE" and float(status.get("stateSince", 0)) >= since:
            return
        assert proc.poll() is None, _log(svc)
        assert time.monotonic() < deadline, f"not ONLINE: {status}\n{_log(svc)}"
        time.sleep(0.2)


def _leader(svc: CraftedThl) -> int:
    """The pid of the process holding the group's lock (lock identities are host:pid)."""
    lock = f"{svc.cfg.zookeeper.root}/{svc.name}/consumers/{GROUP}/lock"
    contenders = svc.zk.Lock(lock).contenders()
    assert contenders, "nobody holds the group's lock"
    return int(contenders[0].rsplit(":", 1)[1])


def _ensure_class_archive(svc: CraftedThl, spark_conf: dict[str, str]) -> str:
    """The archive every driver of this group maps: built now unless it is there (or
    waited for, when a background build is under way). Its path."""
    conf = {**DEFAULTS, **spark_conf}
    path = class_archive.archive_path(conf)
    assert path is not None, "no java for Spark"
    spec = svc.config_path.parent / "archive-conf.json"
    spec.write_text(json.dumps(conf))
    built = subprocess.run([sys.executable, "-m", class_archive.BUILDER, str(path),
                            str(spec)], capture_output=True, text=True, timeout=900,
                           env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), cwd=REPO_ROOT)
    assert built.returncode == 0 and path.exists(), built.stderr[-3000:]
    return str(path)


def _jvm_maps(proc: subprocess.Popen[bytes], archive: str) -> bool:
    """True when a JVM child of ``proc`` has ``archive`` mapped."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid == proc.pid and archive in (stat.parent / "maps").read_text():
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def crash_at_named_points(svc: CraftedThl, model: Model) -> None:
    """A process crashes between two tables' MERGEs, the next between the MERGEs and the
    position, the next while the position is written beside the next block's staging, as
    the model keeps publishing."""
    for point in ("apply-between-tables", "apply-before-position", "apply-commit-sent"):
        proc = _spawn(svc, f"{point}:2")
        for _ in range(10):
            model.transaction()
        assert proc.wait(400) == EXIT_STATUS, _log(svc)
        assert f"crash point {point} reached" in _log(svc)


def _compare(svc: CraftedThl, model: Model) -> None:
    assert svc.rows("s", "a", ["id", "v", "_seqno"]) == model.expected("a")
    assert svc.rows("s", "b", ["k", "n", "_seqno"]) == model.expected("b")


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    kill_leftovers(_PROCS)
    _PROCS.clear()


@pytest.mark.timeout(3600)
@pytest.mark.slow
def test_crashes_and_kills_under_load_leave_tables_equal_to_the_source(
        crafted: CraftedThl) -> None:
    svc = crafted
    # Spawned groups in local mode: each process its own Spark JVM (test_connect.py kills
    # Connect clients).
    svc.configure(spark=warehouse_spark("local[2]"))
    data = yaml.safe_load(svc.config_path.read_text())
    # A killed process holds the group's lock until its ZooKeeper session expires: keep
    # that short so each restart does not wait 10 s for it.
    data["zookeeper"]["timeout_s"] = 4
    data["consumers"]["w"]["block_commit_ms"] = 200
    data["consumers"]["w"]["block_commit_rows"] = 40
    svc.config_path.write_text(yaml.safe_dump(data))
    archive = _ensure_class_archive(svc, data["consumers"]["w"]["target"]["spark"]["conf"])
    model = Model(svc, seed=11)
    for _ in range(30):
        model.transaction()

    if SOAK:
        # In make test the crash points run once, on a Connect client (test_connect.py:
        # the same applier and commit path); here each would cost two driver JVM starts.
        crash_at_named_points(svc, model)

    # Random SIGKILLs while a writer keeps the THL growing.
    stop = threading.Event()

    def writer() -> None:
        # Steady load, bounded: the final catch-up must stay a few hundred seqnos.
        while not stop.is_set() and svc.next_seqno < WRITER_CAP:
            model.transaction()
            stop.wait(0.5)

    load = threading.Thread(target=writer)
    load.start()
    rng = random.Random(5)
    try:
        since = time.time()
        proc = _spawn(svc)
        _until_applying(svc, proc, since)
        assert _jvm_maps(proc, archive), "the driver JVM did not map the archive"
        for kill in range(KILLS):
            warm = kill < WARM_KILLS
            standing_by = _standby_lines(svc)
            standby = _spawn(svc) if warm else None  # starts its Spark while proc applies
            if standby is not None:
                # Killed only once the spare stands by: under load its start alone can take
                # longer than the pause below, and it would then take over cold.
                _until_standing_by(svc, standby, standing_by)
            time.sleep(rng.uniform(0.0, 4.0))
            proc.kill()
            proc.wait(60)
            since = time.time()
            if standby is None:
                standby = _spawn(svc)
            _until_applying(svc, standby, since)
            assert _leader(svc) == standby.pid
            proc = standby
        proc.kill()  # the clean run below starts with other settings
        proc.wait(60)
    finally:
        stop.set()
        load.join()
    last = svc.next_seqno - 1
    # The spares started their Spark before taking over (one that found the lock free at
    # its first try, the killed process's session already gone, took over cold).
    warmed = (svc.config_path.parent / f"{svc.name}.log").read_text().count(
        "standby warmed up")
    # A process started after a kill may warm up too, while the killed one's session ends.
    assert (min(KILLS, WARM_KILLS) + 1) // 2 <= warmed <= KILLS, (warmed, _log(svc))

    # The clean run catches up in the applier's default blocks.
    data["consumers"]["w"].pop("block_commit_rows")
    svc.config_path.write_text(yaml.safe_dump(data))
    proc = _spawn(svc)
    try:
        svc.wait_applied(last, timeout=600)
    finally:
        proc.terminate()
        assert proc.wait(120) == 0, _log(svc)
    assert len(model.rows["a"]) > 20 and len(model.rows["b"]) > 20
    _compare(svc, model)
    assert svc.status()["appliedLastSeqno"] == last
