"""trep-run killed repeatedly (3 times; 20 in make soak) under load while it applies to
Elasticsearch: the indices equal the source row by row at the end (a keyed table and a table
without a key, whose row counts would show a change applied twice), with hard deletes and
with tombstones."""

from __future__ import annotations

import random
import signal
import time
from typing import Any

from ...conformance.tables import Table
from ...harness.processes import spawn_until_logged
from ...soak import kills
from ..tables import ACCOUNTS_MYSQL, ACCOUNTS_NAMES, NOPK_MYSQL, NOPK_NAMES
from ..workload import MixedWorkload
from .conftest import EsService

ACCOUNTS = Table("accounts", ACCOUNTS_MYSQL, tuple(ACCOUNTS_NAMES), ("id",))
NOPK = Table("nopk", NOPK_MYSQL, tuple(NOPK_NAMES), ())


def test_killed_repeatedly_under_load_converges_row_by_row(make_service: Any) -> None:
    # A killed process's lock lives as long as its ZooKeeper session: keep that short, so
    # the next process takes over (and gets killed in turn) while the workload runs.
    runtime = {"runtime": {"block_commit_events": 50}}
    svc: EsService = make_service({"es": runtime, "tomb": {"deletes": "tombstone", **runtime}},
                                  zk_timeout=2)
    svc.start(consumers=[])  # the extractor here, the group in processes we kill
    svc.create(ACCOUNTS, NOPK)
    work = MixedWorkload(svc.source.port, svc.schema, seed=23, rate=60)
    work.start()
    rng = random.Random(5)
    try:
        for _ in range(kills()):
            # Every kill lands on a process that applies: both groups ONLINE in it (after
            # its import, the previous holder's lock and the connection), then a moment.
            proc = spawn_until_logged(lambda: svc.spawn("--no-extractor"), svc.log,
                                      ("es: ONLINE", "tomb: ONLINE"))
            time.sleep(rng.uniform(0.0, 1.5))
            assert proc.poll() is None, svc.log()[-3000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    finally:
        committed = work.stop(at_least=101)
    assert committed > 100
    proc = svc.spawn("--no-extractor")
    try:
        started = time.monotonic()
        svc.wait_source_applied(timeout=300)
        print(f"{committed} transactions; the last process caught up in "
              f"{time.monotonic() - started:.1f} s")
        for group in ("es", "tomb"):
            counts = svc.compare(group, NOPK, ACCOUNTS)
            assert counts["nopk"] > 5 and counts["accounts"] > 50, counts
        # Tombstones: every deleted account is a hidden _deleted document.
        deleted = svc.ids("tomb", ACCOUNTS, physical=True) - svc.ids("tomb", ACCOUNTS)
        assert deleted and not deleted & svc.ids("es", ACCOUNTS)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, svc.log()[-3000:]
