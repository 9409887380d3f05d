"""Kill -9 at random points, standby takeover: every transaction once, gapless, in order."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable

from replicator.control import ComponentNodes
from replicator.zk import connect
from thl_topics.event import RowChange
from thl_topics.producer import ProducerFenced, ThlProducer

from ..soak import kills
from .conftest import ServiceUnderTest
from .workload import NumberedWorkload, numbered_transactions, referred_transactions

KILLS = kills()


def _check_thl(svc: ServiceUnderTest, committed: int) -> list[int]:
    """The THL holds workload transactions 1..committed once each, in order; the epochs."""
    deadline = time.monotonic() + 120
    while True:
        events = svc.events()
        ks = numbered_transactions(events)
        if (ks and ks[-1] >= committed) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [e.seqno for e in events] == list(range(len(events))), "seqnos are not gapless"
    assert all(e.last_frag for e in events)
    assert ks == list(range(1, committed + 1)), "transactions lost, repeated or reordered"
    epochs = [e.epoch for e in events]
    assert epochs == sorted(epochs)
    return epochs


def _check_thl_and_stop(svc: ServiceUnderTest, committed: int,
                        proc: subprocess.Popen[bytes]) -> list[int]:
    """``_check_thl``, then SIGTERM: the extractor must stop cleanly."""
    try:
        epochs = _check_thl(svc, committed)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, svc.log_path.read_text()[-3000:]
    return epochs


def test_sigkill_at_random_points(make_service: Callable[..., ServiceUnderTest]) -> None:
    """Half of the transactions mix a decoded table and a referred (GEOMETRY) one, so kills
    land between events read by the rows decoder and by pymysqlreplication."""
    svc = make_service(batch_ms=20)
    _short_session(svc)
    rng = random.Random(20261122)
    workload = NumberedWorkload(svc.source.port, svc.schema, referred=True)
    proc = svc.start_process()
    svc.wait_streaming(proc=proc)
    workload.start()
    incarnations = 1
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.2, 2.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            last = svc.tail_seqno()
            proc = svc.start_process()
            incarnations += 1
            svc.wait_streaming(after=last, proc=proc)
    finally:
        committed = workload.stop()
    epochs = _check_thl_and_stop(svc, committed, proc)
    assert len(set(epochs)) == incarnations, "the epoch did not change at every restart"
    assert referred_transactions(svc.events()) == list(range(2, committed + 1, 2))


def test_standby_takes_over_without_gap_or_duplicate(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service(batch_ms=20)
    _short_session(svc)
    workload = NumberedWorkload(svc.source.port, svc.schema)
    active = svc.start_process()
    svc.wait_streaming(proc=active)
    standby = svc.start_process()
    workload.start()
    try:
        time.sleep(3)
        assert standby.poll() is None
        before = svc.tail_seqno()
        active.send_signal(signal.SIGKILL)
        active.wait(10)
        svc.wait_streaming(after=before + 5, proc=standby)
    finally:
        committed = workload.stop()
    epochs = _check_thl_and_stop(svc, committed, standby)
    assert len(set(epochs)) == 2
    assert "leader of service" in svc.log_path.read_text()


#: Longer than the 4 s ZooKeeper session of _short_session, with room for the expiry tick.
PAUSE_S = 12


def test_paused_leader_loses_its_session_and_leads_again(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    """A process frozen past its ZooKeeper session (GC pause, VM stall) lost its lock:
    it must notice, take the lock again and restart from the THL tail, not go on as if
    it still led."""
    svc = make_service(batch_ms=20)
    _short_session(svc)
    workload = NumberedWorkload(svc.source.port, svc.schema)
    proc = svc.start_process()
    svc.wait_streaming(proc=proc)
    workload.start()
    try:
        time.sleep(2)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(PAUSE_S)
        before = svc.tail_seqno()
        proc.send_signal(signal.SIGCONT)
        svc.wait_streaming(after=before + 5, proc=proc)
    finally:
        committed = workload.stop()
    epochs = _check_thl_and_stop(svc, committed, proc)
    assert len(set(epochs)) == 2, "the extractor went on without its lock"
    assert "waiting to lead again" in svc.log_path.read_text()


def test_paused_leader_replaced_by_standby_becomes_standby(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    """The standby takes over from a frozen leader; the old leader, thawed, is fenced by
    Kafka and waits as standby instead of dying, then takes over again in its turn."""
    svc = make_service(batch_ms=20)
    _short_session(svc)
    workload = NumberedWorkload(svc.source.port, svc.schema)
    first = svc.start_process()
    svc.wait_streaming(proc=first)
    second = svc.start_process()
    workload.start()
    try:
        time.sleep(3)
        first.send_signal(signal.SIGSTOP)
        time.sleep(PAUSE_S)
        first.send_signal(signal.SIGCONT)
        svc.wait_streaming(after=svc.tail_seqno() + 5, proc=second)
        time.sleep(3)
        assert first.poll() is None, "the thawed leader died instead of becoming standby"
        second.send_signal(signal.SIGKILL)
        second.wait(10)
        svc.wait_streaming(after=svc.tail_seqno() + 5, proc=first)
    finally:
        committed = workload.stop()
    epochs = _check_thl_and_stop(svc, committed, first)
    assert len(set(epochs)) == 3, "each leadership must start a new epoch"
    assert "waiting to lead again" in svc.log_path.read_text()


def _short_session(svc: ServiceUnderTest) -> None:
    """A killed leader's lock goes with its ZooKeeper session: keep the session short."""
    import yaml

    data = yaml.safe_load(svc.config_path.read_text())
    data["zookeeper"]["timeout_s"] = 4
    svc.config_path.write_text(yaml.safe_dump(data))


def test_stale_extractor_is_fenced_by_kafka(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service()
    stale, thread = svc.start_thread()
    svc.wait_streaming()
    # wait_streaming may have committed more marker rows than the THL showed then: take
    # the reference tail once it has stopped moving.
    before = svc.tail_seqno()
    while True:
        time.sleep(1.0)
        now = svc.tail_seqno()
        if now == before:
            break
        before = now
    # A newer extractor of the same service initialises its transactional producer...
    newer = ThlProducer(svc.cfg.kafka.client(), svc.cfg.thl_topic,
                        transactional_id=f"tungsten-extractor-{svc.name}")
    try:
        # ... so the stale one can no longer commit what it extracts.
        svc.sql(f"INSERT INTO {svc.schema}.ready VALUES ()")
        thread.join(60)
        assert not thread.is_alive(), "the fenced extractor kept running"
        (error,) = thread.errors  # type: ignore[attr-defined]
        assert isinstance(error, ProducerFenced), error
        assert "fenced" in str(error)
        assert svc.tail_seqno() == before
    finally:
        newer.close()
        stale.stop()


def test_a_new_service_killed_before_its_first_event_loses_nothing(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    """The first position is durable once the extractor is ONLINE: killed before it has
    published anything, it resumes there, not at the binlog's end of its second start."""
    svc = make_service(batch_ms=20)
    s = svc.schema
    svc.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
    proc = svc.start_process()
    deadline = time.monotonic() + 60
    while _extractor_state(svc) != "ONLINE":
        assert proc.poll() is None, svc.log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, svc.log_path.read_text()[-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert svc.tail_seqno() == -1, "the test must kill it before its first event"
    svc.sql(f"INSERT INTO {s}.t VALUES (1), (2)")
    svc.sql(f"INSERT INTO {s}.t VALUES (3)")
    proc = svc.start_process()
    try:
        deadline = time.monotonic() + 60
        while True:
            ids = [row[0] for e in svc.events() for item in e.data
                   if isinstance(item, RowChange) and item.table == "t"
                   for row in item.column_values]
            if ids == [1, 2, 3]:
                break
            assert time.monotonic() < deadline, (ids, svc.log_path.read_text()[-3000:])
            time.sleep(0.3)
        assert "resuming at" in svc.log_path.read_text()
        assert "(from first position)" in svc.log_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0


def _extractor_state(svc: ServiceUnderTest) -> str | None:
    zk = connect(svc.cfg.zookeeper.hosts, 10)
    try:
        status = ComponentNodes(zk, svc.cfg.zookeeper.root, svc.name, "extractor").status()
        return None if status is None else str(status.get("state"))
    finally:
        zk.stop()
        zk.close()
