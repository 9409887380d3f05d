"""Kill -9 at random points, standby takeover: every transaction once, gapless, in order."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable

from .conftest import ServiceUnderTest
from .workload import NumberedWorkload, numbered_transactions

KILLS = 20


def _wait_streaming(svc: ServiceUnderTest, proc: subprocess.Popen[bytes], after: int,
                    timeout: float = 60) -> None:
    """Until the THL has an event of this incarnation (seqno > ``after``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"extractor exited with {proc.returncode}: " \
                                    f"{svc.log_path.read_text()[-2000:]}"
        with svc.reader() as reader:
            tail = reader.tail()
        if tail is not None and tail.seqno > after:
            return
        time.sleep(0.2)
    raise AssertionError(f"extractor produced nothing within {timeout} s")


def _check_thl(svc: ServiceUnderTest, committed: int) -> list[int]:
    events = svc.wait_for_seqno(committed, timeout=120)  # seqno 0 is the CREATE TABLE
    assert [e.seqno for e in events] == list(range(len(events))), "seqnos are not gapless"
    assert all(e.last_frag for e in events)
    ks = numbered_transactions(events)
    assert ks == list(range(1, committed + 1)), "transactions lost, repeated or reordered"
    epochs = [e.epoch for e in events]
    assert epochs == sorted(epochs)
    return epochs


def test_sigkill_at_random_points(make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service(batch_ms=20)
    _short_session(svc)
    rng = random.Random(20261122)
    workload = NumberedWorkload(svc.source.port, svc.schema)
    proc = svc.start_process()
    _wait_streaming(svc, proc, after=-1)
    workload.start()
    incarnations = 1
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.2, 2.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            with svc.reader() as reader:
                tail = reader.tail()
            last = tail.seqno if tail is not None else -1
            proc = svc.start_process()
            incarnations += 1
            _wait_streaming(svc, proc, after=last)
    finally:
        committed = workload.stop()
    try:
        epochs = _check_thl(svc, committed)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert len(set(epochs)) == incarnations, "the epoch did not change at every restart"
    assert proc.returncode == 0


def test_standby_takes_over_without_gap_or_duplicate(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service(batch_ms=20)
    _short_session(svc)
    workload = NumberedWorkload(svc.source.port, svc.schema)
    active = svc.start_process()
    _wait_streaming(svc, active, after=-1)
    standby = svc.start_process()
    workload.start()
    try:
        time.sleep(3)
        assert standby.poll() is None
        with svc.reader() as reader:
            before = reader.tail()
        assert before is not None
        active.send_signal(signal.SIGKILL)
        active.wait(10)
        _wait_streaming(svc, standby, after=before.seqno + 5, timeout=60)
    finally:
        committed = workload.stop()
    try:
        epochs = _check_thl(svc, committed)
    finally:
        standby.send_signal(signal.SIGTERM)
        standby.wait(60)
    assert len(set(epochs)) == 2
    assert "leader of service" in svc.log_path.read_text()


def _short_session(svc: ServiceUnderTest) -> None:
    """A killed leader's lock goes with its ZooKeeper session: keep the session short."""
    import yaml

    data = yaml.safe_load(svc.config_path.read_text())
    data["zookeeper"]["timeout_s"] = 4
    svc.config_path.write_text(yaml.safe_dump(data))
