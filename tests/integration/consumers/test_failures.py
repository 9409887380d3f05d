"""Crashes, a second process for the same groups and a diverged log: nothing lost, nothing
applied twice. (A target outage under load is tested on every target kind: conformance.)"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable

import yaml
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError

from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.errors import ThlError
from thl_topics.event import ThlEvent
from thl_topics.producer import ThlProducer
from thl_topics.reader import ThlReader

from ..harness.processes import spawn_until_logged
from ..soak import kills
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


def test_consumers_killed_repeatedly_under_load_apply_everything_once(
        replication: Replication) -> None:
    rep = replication
    rep.start(consumers=[])  # the extractor here, the consumers in a process we kill
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=23)
    work.start()
    rng = random.Random(5)
    try:
        for _ in range(kills()):
            # Every kill lands on a process that applies: both groups ONLINE in it, then a
            # moment of applying.
            proc = spawn_until_logged(lambda: rep.spawn("--no-extractor"), rep.log,
                                      ("mariadb: ONLINE", "pg: ONLINE"))
            time.sleep(rng.uniform(0.0, 1.5))
            assert proc.poll() is None, rep.log_path.read_text()[-3000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    finally:
        committed = work.stop(at_least=101)
    assert committed > 100
    # The kills hit applying processes, not standbys waiting out a dead predecessor's
    # ZooKeeper session: each restart ended that session (replicator.zk_session_slot).
    online = rep.log_path.read_text().count("mariadb: ONLINE")
    assert online >= kills(), f"only {online} of {kills()} killed processes applied"
    proc = rep.spawn("--no-extractor")
    try:
        rep.wait_source_applied(timeout=300)
        # The table without a key is the one a double apply would show (duplicate rows).
        assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
        assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 50
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]


def test_a_second_process_for_the_same_groups_waits_as_standby_and_takes_over(
        replication: Replication) -> None:
    """Two trep-run processes with the same consumer groups (an operator's slip, or a
    standby on purpose): one applies each group, the other waits; killing the active one
    hands over, and nothing is applied twice."""
    rep = replication
    data = yaml.safe_load(rep.config_path.read_text())
    data["zookeeper"]["timeout_s"] = 4  # a killed holder's lock goes with its session
    rep.config_path.write_text(yaml.safe_dump(data))
    rep.start(consumers=[])
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=29, rate=150)
    procs = {p.pid: p for p in (rep.spawn("--no-extractor"), rep.spawn("--no-extractor"))}
    work.start()
    try:
        rep.wait_state("mariadb", "ONLINE")
        rep.wait_state("pg", "ONLINE")
        time.sleep(3)
        holders = {g: _lock_holder(rep, g) for g in ("mariadb", "pg")}
        for group, pid in holders.items():
            assert pid in procs, (group, pid)
            # The standby waits for the lock a second at a time, and kazoo removes its
            # contender node between two waits: one look may fall in that gap.
            assert _contending(rep, group, 2), "the second process is not standby"
        active = holders["mariadb"]
        procs[active].send_signal(signal.SIGKILL)
        procs[active].wait(10)
        (survivor,) = (p for pid, p in procs.items() if pid != active)
        time.sleep(3)
        assert survivor.poll() is None, rep.log_path.read_text()[-3000:]
    finally:
        committed = work.stop(at_least=101)
    try:
        assert committed > 100
        rep.wait_source_applied(timeout=300)
        assert {_lock_holder(rep, g) for g in ("mariadb", "pg")} == {survivor.pid}
        # The table without a key is the one a double apply would show (duplicate rows).
        assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
        assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
        assert "standby: another process applies this group" in rep.log_path.read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]


def _lock_path(rep: Replication, group: str) -> str:
    return f"{rep.cfg.zookeeper.root}/{rep.name}/consumers/{group}/lock"


def _lock_contenders(rep: Replication, group: str) -> int:
    return len(rep.zk.Lock(_lock_path(rep, group)).contenders())


def _contending(rep: Replication, group: str, count: int, within_s: float = 10.0) -> bool:
    """True once ``count`` processes contend for the group's lock (within ``within_s``)."""
    deadline = time.monotonic() + within_s
    while _lock_contenders(rep, group) != count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _lock_holder(rep: Replication, group: str) -> int:
    """The pid of the process holding the group's lock (identities are host:pid)."""
    contenders = rep.zk.Lock(_lock_path(rep, group)).contenders()
    assert contenders, f"nobody holds the lock of {group}"
    return int(contenders[0].rsplit(":", 1)[1])


def _stop_extractor(rep: Replication) -> None:
    """Stop the running extractor, until ZooKeeper no longer shows it alive."""
    assert rep.runner is not None and rep.runner.extractor is not None
    rep.runner.extractor.stop()
    for _ in range(100):
        if rep.zk.exists(f"/tungsten/{rep.name}/extractor/alive") is None:
            break
        time.sleep(0.1)


def test_recreated_thl_topic_is_refused_with_the_epoch_message(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    for i in range(1, 21):
        rep.src(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES ({i}, 'old log')")
    applied = rep.wait_source_applied()
    # The old log disappears under the running consumers; a fresh extractor (no position
    # anywhere) writes a new log whose seqnos reuse the old numbers.
    _stop_extractor(rep)
    admin = rep.admin()
    admin.delete_topics([rep.cfg.thl_topic])[rep.cfg.thl_topic].result(30)
    rep.src(f"DROP DATABASE {rep.cfg.tracking_schema}")
    try:
        rep.zk.delete(f"/tungsten/{rep.name}/extractor/position")
    except NoNodeError:
        pass
    time.sleep(2)
    rep.start_extractor()
    for i in range(100, 100 + applied + 10):
        rep.src(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES ({i}, 'new log')")

    for group in ("mariadb", "pg"):
        status = rep.wait_state(group, "OFFLINE:ERROR", timeout=120)
        assert "Log epoch numbers do not match" in status["pendingExceptionMessage"]
        assert f"seqno={applied}" in status["pendingExceptionMessage"]
        assert status["pendingErrorCode"] == "EPOCH"
    assert rep.tgt(f"SELECT COUNT(*) FROM {rep.schema}.accounts WHERE name = 'new log'") \
        == [(0,)]
    assert rep.pgsql(f"SELECT COUNT(*) FROM \"{rep.schema}\".accounts WHERE name = 'new log'"
                     ) == [(0,)]
    assert rep.tgt(f"SELECT seqno FROM {rep.cfg.tracking_schema}.trep_commit_seqno") \
        == [(applied,)]


def test_a_recreated_topic_whose_seqnos_follow_on_is_refused(replication: Replication) -> None:
    """The race the test above leaves to chance, forced: the groups keep fetching at their
    offset while the topic is deleted and made again, and the new log holds exactly the
    seqno each group expects next at that offset, in the old epoch's numbering."""
    rep = replication
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    rep.src(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES (1, 'old log')")
    applied = rep.wait_source_applied()
    _stop_extractor(rep)
    topic, kafka = rep.cfg.thl_topic, rep.cfg.kafka.client()
    with ThlReader(kafka, topic) as reader:
        _, fetching = reader.watermarks()  # the offset both groups fetch next
    admin = rep.admin()
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while not _created(admin, topic):
        assert time.monotonic() < deadline, "the THL topic could not be made again"
        time.sleep(0.2)
    # One event per Kafka transaction (a record and its marker), the first transaction two
    # events if needed, so that offset `fetching` holds seqno `applied + 1`; the new log's
    # extractor started at its first seqno, the epoch all its events carry.
    first = applied + 1 - (fetching + 1) // 2
    assert first >= 0, (fetching, applied)
    producer = ThlProducer(kafka, topic, f"t-{rep.name}-another", run_id="another-log")
    seqno = first
    while seqno <= applied + 5:
        for _ in range(2 if seqno == first and fetching % 2 else 1):
            producer.publish(ThlEvent(seqno=seqno, epoch=first, source_id="elsewhere",
                                      event_id=f"mariadb-bin.000999:{seqno:016d};0",
                                      shard_id=rep.schema, tstamp=time.time_ns() // 1000))
            seqno += 1
        producer.commit()
    producer.close()
    with ThlReader(kafka, topic) as reader:
        assert [r.seqno for r in reader.records(fetching, fetching + 1)] == [applied + 1]

    for group in ("mariadb", "pg"):
        status = rep.wait_state(group, "OFFLINE:ERROR", timeout=120)
        assert "Log epoch numbers do not match" in status["pendingExceptionMessage"]
        assert status["pendingErrorCode"] == "EPOCH"
    assert rep.tgt(f"SELECT seqno FROM {rep.cfg.tracking_schema}.trep_commit_seqno") \
        == [(applied,)]
    assert rep.pgsql(f'SELECT seqno FROM "{rep.cfg.tracking_schema}".trep_commit_seqno') \
        == [(applied,)]


def _created(admin: AdminClient, topic: str) -> bool:
    try:
        ensure_thl_topic(admin, ThlTopicSpec(topic), timeout=5)
        return True
    except ThlError:
        return False  # still being deleted


HOSTILE_MYSQL = """CREATE TABLE {s}.`sel``ect "tbl" ü` (
  `from` INT PRIMARY KEY, `we"ird` VARCHAR(20), `back``tick` INT, `ünï é` TEXT,
  `order` INT, `50% off` INT) DEFAULT CHARSET=utf8mb4"""
HOSTILE_NOKEY_MYSQL = """CREATE TABLE {s}.`where` (`select` INT, `group` VARCHAR(5))"""


def test_hostile_identifiers_replicate(make_replication: Callable[..., Replication]) -> None:
    """PostgreSQL makes the schema and both tables from the THL, hostile names and all."""
    rep = make_replication(pg_by_hand=False)
    rep.start()
    create_tables(rep, (HOSTILE_MYSQL, None), (HOSTILE_NOKEY_MYSQL, None))
    s = rep.schema
    table = f"{s}.`sel``ect \"tbl\" ü`"
    rep.src(f"INSERT INTO {table} VALUES (1, 'a\"b', 1, '😀', 1, 5), (2, NULL, 2, 'x', 2, 6), "
            f"(3, '%s', 3, '%(x)s', 3, 7)")
    rep.src(f"UPDATE {table} SET `we\"ird` = 'q''uote', `order` = 10 WHERE `from` = 1")
    rep.src(f"DELETE FROM {table} WHERE `from` = 2")
    rep.src(f"INSERT INTO {s}.`where` VALUES (1, 'a'), (1, 'a'), (NULL, NULL)")
    rep.src(f"UPDATE {s}.`where` SET `group` = 'b' WHERE `select` = 1 LIMIT 1")
    rep.src(f"DELETE FROM {s}.`where` WHERE `select` IS NULL")
    rep.wait_source_applied()
    cols = "`from`, `we\"ird`, `back``tick`, `ünï é`, `order`, `50% off`"
    src = rep.src(f"SELECT {cols} FROM {table} ORDER BY `from`")
    assert src == [(1, "q'uote", 1, "😀", 10, 5), (3, "%s", 3, "%(x)s", 3, 7)]
    assert rep.tgt(f"SELECT {cols} FROM {table} ORDER BY `from`") == src
    pg_cols = '"from", "we""ird", "back`tick", "ünï é", "order", "50% off"'
    assert rep.pgsql(f'SELECT {pg_cols} FROM "{s}"."sel`ect ""tbl"" ü" ORDER BY "from"') \
        == src
    nokey = rep.src(f"SELECT `select`, `group` FROM {s}.`where` ORDER BY `group`")
    assert nokey == [(1, "a"), (1, "b")]
    assert rep.tgt(f"SELECT `select`, `group` FROM {s}.`where` ORDER BY `group`") == nokey
    assert rep.pgsql(f'SELECT "select", "group" FROM "{s}"."where" ORDER BY "group"') == nokey
