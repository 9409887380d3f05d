"""The source, Kafka or the process itself away under a running service: everything waits,
retries and converges.

The source, Kafka and ZooKeeper tests stop a second server of the session (``*_scratch``)
that only they use, and restore it in ``finally``: the rest of the suite runs beside them.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from replicator.control import ComponentNodes
from stack import services
from stack.service import Service
from stack.services.mariadb import MariaDB
from thl_topics.event import RowChange
from thl_topics.reader import ThlReader

from ..soak import outage_s
from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    ACCOUNTS_PG,
    NOPK_MYSQL,
    NOPK_NAMES,
    NOPK_PG,
    compare,
    create_tables,
)
from .workload import MixedWorkload


def _extractor_status(rep: Replication) -> dict[str, Any]:
    return rep.extractor_status()


def _until(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)


def _assert_thl_exact(rep: Replication) -> int:
    """Every seqno once, in order, and no source transaction (event id) twice; the count."""
    with ThlReader(rep.cfg.kafka.client(), rep.cfg.thl_topic) as reader:
        low, _ = reader.watermarks()
        seqnos, event_ids, rows = [], [], 0
        for rec in reader.records(low):
            assert rec.event is not None, rec.error
            if rec.event.last_frag:
                seqnos.append(rec.seqno)
                event_ids.append(rec.event.event_id.split(";")[0])
            rows += sum(1 for item in rec.event.data if isinstance(item, RowChange))
    assert seqnos == list(range(seqnos[0], seqnos[0] + len(seqnos))), "gap or repeat"
    assert len(set(event_ids)) == len(event_ids), "a source transaction extracted twice"
    assert rows > 0
    return len(seqnos)


@pytest.mark.exclusive("mariadb_scratch")  # stops its source
def test_source_down_extractor_starts_again_from_the_thl_tail(
        make_replication: Callable[..., Replication], mariadb_scratch: MariaDB) -> None:
    rep = make_replication(source=mariadb_scratch)
    rep.start()
    assert rep.runner is not None and rep.runner.extractor is not None
    extractor = rep.runner.extractor
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=41)
    source = services.get("mariadb-scratch")
    work.start()
    try:
        time.sleep(3)
        work.stop()
        source.stop()
        _until("extractor retrying", lambda: extractor.retries >= 2, 60)
        status = _extractor_status(rep)
        assert status["state"] == "GOING-ONLINE:SYNCHRONIZING", status
        assert "retrying" in status["pendingExceptionMessage"], status
        # Consumer groups do not depend on the source: they stay ONLINE.
        assert rep.status("mariadb")["state"] == "ONLINE"
    finally:
        if not source.running():
            source.start()
    work.start()
    time.sleep(3)
    committed = work.stop(at_least=101)
    assert committed > 100
    rep.wait_source_applied(timeout=300)
    status = _extractor_status(rep)
    assert status["state"] == "ONLINE" and status["pendingExceptionMessage"] == "NONE", status
    assert _assert_thl_exact(rep) > 100
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10


@pytest.mark.exclusive("kafka_scratch")  # stops its broker
def test_kafka_down_under_load_everything_waits_and_converges(
        make_replication: Callable[..., Replication], kafka_scratch: Service) -> None:
    rep = make_replication(broker=kafka_scratch)
    # Shorter than the outage: the THL commit in flight times out with an unknown outcome,
    # and the extractor must start again from the THL tail with a new producer.
    rep.cfg = rep.cfg.model_copy(update={
        "kafka": rep.cfg.kafka.model_copy(update={"transaction_timeout_s": 8.0})})
    rep.start()
    assert rep.runner is not None and rep.runner.extractor is not None
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=43, rate=150)
    kafka = services.get("kafka-scratch")
    work.start()  # the source goes on committing through the outage
    try:
        time.sleep(3)
        before = rep.thl_tail()
        kafka.stop()
        time.sleep(20)
    finally:
        if not kafka.running():
            kafka.start()
    time.sleep(3)
    committed = work.stop(at_least=101)
    rep.wait_source_applied(timeout=300)
    assert rep.runner.extractor.retries >= 1
    assert rep.thl_tail() > before
    assert not rep.runner.failures, rep.runner.failures
    assert committed > 100
    assert _extractor_status(rep)["state"] == "ONLINE"
    assert _assert_thl_exact(rep) > 100
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10


def test_runner_paused_past_its_zookeeper_session_takes_everything_back(
        replication: Replication) -> None:
    """trep-run frozen (SIGSTOP) longer than its ZooKeeper session: the session, the leader
    lock and the ephemeral ``alive`` nodes are gone when it wakes. The extractor must lead
    again from the THL tail (a new epoch), every group must be seen alive by trepctl, and
    both targets must converge."""
    rep = replication
    data = yaml.safe_load(rep.config_path.read_text())
    data["zookeeper"]["timeout_s"] = 4
    rep.config_path.write_text(yaml.safe_dump(data))
    proc = rep.spawn()
    try:
        _until("extractor ONLINE", lambda: _extractor_status(rep).get("state") == "ONLINE", 90)
        epoch = _extractor_status(rep)["appliedLastEpoch"]
        create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
        work = MixedWorkload(rep.source.port, rep.schema, seed=47, rate=150)
        work.start()
        try:
            time.sleep(3)
            proc.send_signal(signal.SIGSTOP)
            time.sleep(12)
            nodes = [ComponentNodes(rep.zk, rep.cfg.zookeeper.root, rep.name, c)
                     for c in ("extractor", "consumers/mariadb", "consumers/pg")]
            assert not any(n.alive() for n in nodes), "the paused session did not expire"
            proc.send_signal(signal.SIGCONT)
            time.sleep(3)
        finally:
            committed = work.stop()
        assert committed > 100
        rep.wait_source_applied(timeout=300)
        _until("alive nodes back", lambda: all(n.alive() for n in nodes), 30)
        status = _extractor_status(rep)
        assert status["state"] == "ONLINE" and status["appliedLastEpoch"] > epoch, status
        assert _assert_thl_exact(rep) > 100
        assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
        assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
        assert "waiting to lead again" in rep.log_path.read_text()
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]


def _target_seqnos(rep: Replication) -> tuple[int, int]:
    """The seqnos stored in trep_commit_seqno on MariaDB and PostgreSQL (-1: none yet)."""
    t = rep.cfg.tracking_schema
    maria = rep.tgt(f"SELECT MAX(seqno) FROM {t}.trep_commit_seqno")[0][0]
    pg = rep.pgsql(f'SELECT MAX(seqno) FROM "{t}".trep_commit_seqno')[0][0]
    return (-1 if maria is None else maria, -1 if pg is None else pg)


@pytest.mark.exclusive("zookeeper_scratch")  # stops its ZooKeeper
def test_zookeeper_down_under_load_apply_goes_on(
        make_replication: Callable[..., Replication], zookeeper_scratch: Service,
        unused_port: int) -> None:
    """ZooKeeper is the control plane, not the position of record: while it is away the
    extractor extracts and every group applies; afterwards both report the outage in their
    status and in metrics, and nothing was lost or applied twice. Down for 10 s (30 s in
    ``make soak``)."""
    rep = make_replication(zk=zookeeper_scratch)
    data = yaml.safe_load(rep.config_path.read_text())
    data["metrics"] = {"port": unused_port}
    rep.config_path.write_text(yaml.safe_dump(data))
    proc = rep.spawn()
    zookeeper = services.get("zookeeper-scratch")
    try:
        _until("extractor ONLINE", lambda: _extractor_status(rep).get("state") == "ONLINE", 90)
        create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
        rep.wait_source_applied()
        work = MixedWorkload(rep.source.port, rep.schema, seed=53, rate=100)
        work.start()
        try:
            time.sleep(2)
            zookeeper.stop()
            during = _target_seqnos(rep)
            time.sleep(outage_s())
            after = _target_seqnos(rep)
            # Apply went on without ZooKeeper, on both targets.
            assert after[0] > during[0] + 100 and after[1] > during[1] + 100, (during, after)
            assert proc.poll() is None, rep.log_path.read_text()[-3000:]
        finally:
            if not zookeeper.running():
                zookeeper.start()
            committed = work.stop()
        if committed < 1000:  # the workload went slowly beside other tests: more after it
            work.start()
            committed = work.stop(at_least=1000)
        # This test's own ZooKeeper client reconnects with a back-off of its own; its
        # requests fail fast (ConnectionLoss) until then.
        _until("the test's ZooKeeper client reconnected", lambda: rep.zk.connected, 60)
        rep.wait_source_applied(timeout=300)
        for group in ("mariadb", "pg"):
            def reported(g: str = group) -> bool:
                return bool(rep.status(g).get("zookeeperDisconnects", 0) >= 1)
            _until(f"{group} reports the outage", reported, 60)
            assert rep.status(group)["state"] == "ONLINE"
        _until("extractor reports the outage",
               lambda: _extractor_status(rep).get("zookeeperDisconnects", 0) >= 1, 60)
        assert _extractor_status(rep)["state"] == "ONLINE"
        with urllib.request.urlopen(f"http://127.0.0.1:{unused_port}/metrics",
                                    timeout=10) as resp:
            metrics = resp.read().decode()
        for component in ("consumers", "extractor"):
            found = re.search(r'trep_zookeeper_disconnects_total\{component="' + component
                              + r'",service="[^"]+"\} (\d+)', metrics)
            assert found and int(found.group(1)) >= 1, metrics
            assert re.search(r'trep_zookeeper_connected\{component="' + component
                             + r'",service="[^"]+"\} 1\.0', metrics), metrics
        # Fewer seqnos than committed transactions: one whose statements matched no row
        # writes nothing to the binlog (983 of 1,000-odd in one run). compare() is the proof.
        assert _assert_thl_exact(rep) > 100
        assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
        assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
        assert proc.poll() is None
    finally:
        if not zookeeper.running():
            zookeeper.start()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]
