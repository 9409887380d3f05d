"""A warehouse group on a Spark Connect server (``spark.remote``): the same exact tables, and
a killed group process costs no JVM. The server is the stack's ``spark-connect``, shared by
every group of the run; each group process is a thin client of it.

A killed process may leave its MERGE running on the server. The next process takes over the
group's Connect session (its id is derived from the group) and interrupts what is left, and
a conflict with one that still committed is applied again, not taken for a second writer.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from ..harness.processes import kill_leftovers
from ..soak import kills
from .conftest import CraftedThl
from .test_exactly_once import (
    _PROCS,
    Model,
    _compare,
    _log,
    _spawn,
    _until_applying,
    crash_at_named_points,
)

#: A kill of a Connect client costs no JVM: a few in make test, more in soak.
KILLS = kills(quick=2, soak=10)


@pytest.fixture
def remote(crafted: CraftedThl) -> Iterator[CraftedThl]:
    data: dict[str, Any] = yaml.safe_load(crafted.config_path.read_text())
    data["zookeeper"]["timeout_s"] = 4
    data["consumers"]["w"]["block_commit_ms"] = 200
    data["consumers"]["w"]["block_commit_rows"] = 40
    crafted.config_path.write_text(yaml.safe_dump(data))
    yield crafted
    kill_leftovers(_PROCS)
    _PROCS.clear()


@pytest.mark.slow
def test_a_group_on_spark_connect_is_exact_through_crashes_and_kills(
        remote: CraftedThl) -> None:
    svc = remote
    model = Model(svc, seed=23)
    for _ in range(30):
        model.transaction()
    crash_at_named_points(svc, model)

    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set() and svc.next_seqno < 30 + 30 + 40 * KILLS:
            model.transaction()
            stop.wait(0.3)

    load = threading.Thread(target=writer)
    load.start()
    rng = random.Random(3)
    try:
        for _ in range(KILLS):
            since = time.time()
            proc = _spawn(svc)
            _until_applying(svc, proc, since)
            time.sleep(rng.uniform(0.5, 3.0))
            proc.kill()
            proc.wait(60)
    finally:
        stop.set()
        load.join()
    last = svc.next_seqno - 1
    proc = _spawn(svc)
    try:
        svc.wait_applied(last, timeout=300)
    finally:
        proc.terminate()
        assert proc.wait(120) == 0, _log(svc)
    assert len(model.rows["a"]) > 20 and len(model.rows["b"]) > 20
    _compare(svc, model)
    assert svc.status()["appliedLastSeqno"] == last
    # No JVM in any group process: none started a Spark of its own.
    assert "starting Spark" not in (svc.config_path.parent / f"{svc.name}.log").read_text()
