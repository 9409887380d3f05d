"""Parallel apply (``channels: N``) on the real MariaDB and PostgreSQL targets: four schemas,
SIGKILLs under load, critical transactions, restarts and changing the channel count."""

from __future__ import annotations

import copy
import random
import signal
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pymysql
import pytest
import sqlalchemy as sa
import yaml

from consumers.errors import PositionConflict
from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.sql.applier import SqlApplier
from consumers.sql.config import SqlTarget
from replicator.config import ServiceSettings
from replicator.tracking import CommitSeqnoTable
from thl_topics.event import RowChange, Statement
from thl_topics.reader import ThlReader
from trep.config import load_config

from ..harness.processes import kill_leftovers
from ..soak import kills
from .conftest import Replication
from .tables import ACCOUNTS_MYSQL, ACCOUNTS_NAMES, NOPK_MYSQL, NOPK_NAMES, compare
from .test_crash_points import _assert_crashed_at, _spawn
from .test_failures import _lock_holder
from .test_outages import _until
from .test_restart_points import BIG_MYSQL, GEN_NAMES, GENERATED_MYSQL, GENERATED_PG
from .workload import MixedWorkload, await_committed

GROUPS = ("mariadb", "pg")


class ShardedWorkload:
    """Source transactions over several schemas, deterministic per seed: most touch one
    schema (1-3 statements of the mixed workload), one in ten touches two (critical), and
    every ``ddl_every`` transactions a new table is created in one schema and filled."""

    def __init__(self, port: int, schemas: list[str], seed: int, ddl_every: int = 0,
                 rate: float = 0) -> None:
        """``rate``: transactions per second at most (0: as fast as the source takes them)."""
        self.schemas = schemas
        self.rate = rate
        self.parts = {s: MixedWorkload(port, s, seed=seed + i) for i, s in enumerate(schemas)}
        self.rng = random.Random(seed)
        self.ddl_every = ddl_every
        #: (schema, table) of the tables the DDL made, filled with rows.
        self.extra: list[tuple[str, str]] = []
        self.committed = 0
        self.cross = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def run(self, transactions: int, only: Sequence[str] = ()) -> None:
        """Commit ``transactions`` transactions (over the schemas ``only``, if given)."""
        conn = self.parts[self.schemas[0]]._connect()
        try:
            with conn.cursor() as cur:
                for _ in range(transactions):
                    if self._stop.is_set():
                        break
                    self._transaction(conn, cur, list(only) or self.schemas)
        finally:
            conn.close()

    def _transaction(self, conn: pymysql.connections.Connection[Any], cur: Any,
                     schemas: list[str]) -> None:
        two = self.rng.random() < 0.1
        for schema in self.rng.sample(schemas, 2) if two else [self.rng.choice(schemas)]:
            for _ in range(self.rng.randint(1, 3)):
                self.parts[schema]._statement(cur)
        conn.commit()
        self.committed += 1
        self.cross += two
        if self.rate:
            time.sleep(1 / self.rate)
        if self.ddl_every and self.committed % self.ddl_every == 0:
            schema = self.rng.choice(self.schemas)
            table = f"extra{len(self.extra)}"
            cur.execute(f"CREATE TABLE {schema}.{table} (id INT PRIMARY KEY, v VARCHAR(32))")
            cur.executemany(f"INSERT INTO {schema}.{table} VALUES (%s, %s)",
                            [(i, f"row {i} ü") for i in range(1, 6)])
            conn.commit()
            self.extra.append((schema, table))

    def start(self) -> None:
        self._stop.clear()

        def run() -> None:
            try:
                self.run(10**9)
            except BaseException as exc:
                self.error = exc
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self, at_least: int = 0) -> int:
        await_committed(self, at_least)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise self.error
        return self.committed


class Sharded:
    """A replication of four schemas (``<schema>_s0`` .. ``_s3``, plus the fixture's own)."""

    def __init__(self, rep: Replication, channels: int, **settings: Any) -> None:
        self.rep = rep
        self.schemas = [f"{rep.schema}_s{i}" for i in range(4)]
        data = yaml.safe_load(rep.config_path.read_text())
        data["extractor"]["filters"]["replicate"] = [f"{rep.schema}*.*"]
        # A killed process's group locks go with its ZooKeeper session: keep it short.
        data["zookeeper"]["timeout_s"] = 4
        for group in GROUPS:
            data["consumers"][group].update(channels=channels, **settings)
            data["consumers"][group]["target"]["audit_seqnos"] = True
        self.data = data
        self.write()

    def write(self) -> None:
        """The configuration, for processes spawned and runners started from now on."""
        self.rep.config_path.write_text(yaml.safe_dump(self.data))
        self.rep.cfg = load_config(self.rep.config_path)

    def set_channels(self, channels: int) -> None:
        for group in GROUPS:
            self.data["consumers"][group]["channels"] = channels
        self.write()

    def create(self) -> None:
        """The schemas and their tables on the source: MariaDB gets them from the THL (DDL,
        critical seqnos), PostgreSQL makes them from the row images."""
        for s in self.schemas:
            self.rep.src(f"CREATE DATABASE {s}", ACCOUNTS_MYSQL.format(s=s),
                         NOPK_MYSQL.format(s=s))

    def view(self, schema: str) -> Replication:
        """The replication seen through another schema (for ``tables.compare``)."""
        other = copy.copy(self.rep)
        other.schema = schema
        return other

    def assert_equal(self, extra: Sequence[tuple[str, str]] = ()) -> None:
        """Every schema's tables equal on the source, MariaDB and PostgreSQL, row by row."""
        for s in self.schemas:
            assert compare(self.view(s), "accounts", ACCOUNTS_NAMES, "id") > 0
            compare(self.view(s), "nopk", NOPK_NAMES, "a, b, c")
        for schema, table in extra:
            assert compare(self.view(schema), table, ["id", "v"], "id") == 5

    def positions(self) -> dict[str, list[tuple[int, int]]]:
        """(task_id, seqno) of trep_commit_seqno on each target."""
        t = self.rep.cfg.tracking_schema
        return {"mariadb": [tuple(r) for r in self.rep.tgt(
                    f"SELECT task_id, seqno FROM {t}.trep_commit_seqno ORDER BY task_id")],
                "pg": [tuple(r) for r in self.rep.pgsql(
                    f'SELECT task_id, seqno FROM "{t}".trep_commit_seqno ORDER BY task_id')]}

    def drop(self) -> None:
        kill_leftovers(self.rep.procs)
        self.rep.stop()
        for s in self.schemas:
            self.rep.src(f"DROP DATABASE IF EXISTS {s}")
            self.rep.tgt(f"DROP DATABASE IF EXISTS {s}")
            self.rep.pgsql(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')


@pytest.fixture
def sharded(make_replication: Callable[..., Replication]) -> Iterator[Callable[..., Sharded]]:
    made: list[Sharded] = []

    def make(channels: int, **settings: Any) -> Sharded:
        made.append(Sharded(make_replication(), channels, **settings))
        return made[-1]

    yield make
    for s in made:
        s.drop()


def _seqnos_with_data(rep: Replication) -> tuple[set[int], set[int]]:
    """Seqnos that carry rows of the test's schemas (PostgreSQL applies those), and those
    that carry any item (MariaDB also runs the DDL)."""
    rows, items = set(), set()
    with ThlReader(rep.cfg.kafka.client(), rep.cfg.thl_topic) as reader:
        for rec in reader.records(reader.watermarks()[0]):
            assert rec.event is not None, rec.error
            for item in rec.event.data:
                if isinstance(item, RowChange) and item.schema.startswith(rep.schema):
                    rows.add(rec.seqno)
                    items.add(rec.seqno)
                elif isinstance(item, Statement):
                    items.add(rec.seqno)
    return rows, items


def _applied_once(counts: list[tuple[int, int]], expected: set[int], where: str) -> None:
    twice = {s: n for s, n in counts if n != 1}
    assert not twice, f"{where}: seqnos applied more than once: {twice}"
    missing = expected - {s for s, _ in counts}
    assert not missing, f"{where}: seqnos never applied: {sorted(missing)[:20]}"


def _assert_each_seqno_applied_once(rep: Replication) -> None:
    """The audit tables: every seqno with data applied exactly once on each target."""
    rows, items = _seqnos_with_data(rep)
    audit = f"{rep.cfg.tracking_schema}.trep_apply_audit"
    _applied_once([tuple(r) for r in rep.tgt(f"SELECT seqno, COUNT(*) FROM {audit} "
                                             "GROUP BY seqno")], items, "mariadb")
    _applied_once([tuple(r) for r in rep.pgsql(
        'SELECT seqno, COUNT(*) FROM "{}"."{}" GROUP BY seqno'.format(*audit.split(".")))],
        rows, "postgresql")


def _assert_drained(sh: Sharded) -> None:
    """The stop was clean: one row per channel on each target, all at one seqno."""
    for target, found in sh.positions().items():
        assert [t for t, _ in found] == [0, 1, 2], (target, found)
        assert len({s for _, s in found}) == 1, (target, found)


def _spawn_online(rep: Replication, timeout: float = 60) -> subprocess.Popen[bytes]:
    """A consumer process, once both groups are ONLINE in it (after a SIGKILL the previous
    holder's group locks go with its ZooKeeper session)."""
    started = time.time()
    proc = rep.spawn("--no-extractor")
    deadline = time.monotonic() + timeout

    def online(group: str) -> bool:
        try:
            holder = _lock_holder(rep, group)
        except AssertionError:
            return False  # nobody holds it yet
        status = rep.status(group)
        # ONLINE since after this process started: its own status, not the killed one's.
        return holder == proc.pid and status.get("state") == "ONLINE" \
            and status.get("stateSince", 0) > started
    while not all(online(g) for g in GROUPS):
        assert proc.poll() is None, rep.log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "the new process never went ONLINE"
        time.sleep(0.1)
    return proc


def test_four_schemas_three_channels_killed_repeatedly_apply_everything_once(
        sharded: Callable[..., Sharded]) -> None:
    sh = sharded(3)
    rep = sh.rep
    rep.start(consumers=[])  # the extractor here, the consumers in a process we kill
    sh.create()
    work = ShardedWorkload(rep.source.port, sh.schemas, seed=71, ddl_every=150, rate=40)
    work.start()
    rng = random.Random(13)
    try:
        for _ in range(kills()):
            proc = _spawn_online(rep)
            time.sleep(rng.uniform(0.2, 1.5))
            assert proc.poll() is None, rep.log_path.read_text()[-3000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    finally:
        committed = work.stop(at_least=320)
    assert committed >= 320 and work.cross > 20 and work.extra
    proc = rep.spawn("--no-extractor")
    try:
        rep.wait_source_applied(timeout=300)
        status = rep.status("mariadb")
        # (criticalEvents counts this process's only: the killed ones may have applied
        # every critical seqno already; test_a_transaction_touching_two_schemas_... counts.)
        assert status["channels"] == 3 and len(status["channelStatus"]) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]
    sh.assert_equal(work.extra)
    _assert_each_seqno_applied_once(rep)
    _assert_drained(sh)
    # Every shard where crc32 puts it, as trep_shard_channel recorded.
    assigned = dict(rep.tgt(f"SELECT shard_id, channel FROM {rep.cfg.tracking_schema}."
                            "trep_shard_channel"))
    assert set(sh.schemas) <= set(assigned)
    assert all(assigned[s] == zlib.crc32(s.encode()) % 3 for s in assigned)


#: Crash points of the channel threads and the stream thread, each with the pass that kills.
CHANNEL_POINTS = ("apply-between-fragments:1", "apply-after-ddl:1", "apply-before-position:3",
                  "apply-committed:3", "apply-handshake:2")


def _awkward_round(sh: Sharded, n: int) -> None:
    """Round ``n`` of the awkward seqnos over the four schemas: a DDL, a transaction cut
    into fragments in one schema and another over two schemas (critical), changes of a
    table without a key and of one with generated columns, then a delete."""
    rep, (s0, s1, s2, s3) = sh.rep, sh.schemas
    base = 10_000 * (n + 1)
    rep.src(f"ALTER TABLE {s2}.big ADD COLUMN c{n} INT NULL")
    rep.src(f"INSERT INTO {s0}.big (id, pad) VALUES (%s, %s)",
            params=[(base + i, f"one {i} é") for i in range(1_500)], many=True)
    conn = pymysql.connect(host="127.0.0.1", port=rep.source.port, user="root", password="",
                           charset="utf8mb4", autocommit=False)
    try:
        with conn.cursor() as cur:
            for s in (s2, s3):
                cur.executemany(f"INSERT INTO {s}.big (id, pad) VALUES (%s, %s)",
                                [(base + i, f"two {i} ü") for i in range(600)])
        conn.commit()
    finally:
        conn.close()
    rep.src(f"INSERT INTO {s3}.nopk VALUES ({base}, 'dup', 1.5), ({base}, 'dup', 1.5)",
            f"UPDATE {s3}.nopk SET c = 9.5 WHERE a = {base} LIMIT 1")
    rep.src(f"INSERT INTO {s1}.gen (id, a, txt) VALUES ({base}, {n}, 'x'), "
            f"({base + 1}, NULL, 'y')", f"UPDATE {s1}.gen SET a = a + 10 WHERE id = {base}")
    rep.src(f"DELETE FROM {s0}.big WHERE id < {base + 20}")


def test_crashes_at_each_point_with_awkward_seqnos_on_three_channels_apply_once(
        sharded: Callable[..., Sharded]) -> None:
    """The crash-point test's lesson with three channels over four schemas: the consumers'
    process dies at each named point while a DDL, fragmented transactions (one of them over
    two schemas), keyless and generated-column changes go through; every restart goes on
    from the lowest channel, each channel skipping what it had applied. Both targets end
    equal to the source and every seqno is applied once."""
    sh = sharded(3)
    rep, (s0, s1, s2, s3) = sh.rep, sh.schemas
    sh.data["extractor"]["fragment_rows"] = 500  # 1,500 and 1,200 rows: 3 fragments each
    sh.write()
    rep.start(consumers=[])  # the extractor here, the consumers in the process that dies
    sh.create()
    for s in (s0, s2, s3):
        rep.src(BIG_MYSQL.format(s=s))  # PostgreSQL makes them from the row images
    rep.src(GENERATED_MYSQL.format(s=s1))
    rep.pgsql(f'CREATE SCHEMA IF NOT EXISTS "{s1}"', GENERATED_PG.format(s=s1))
    work = ShardedWorkload(rep.source.port, sh.schemas, seed=29)
    work.run(40)
    for n, point in enumerate(CHANNEL_POINTS):
        armed = _spawn(rep, point, "--no-extractor")
        _awkward_round(sh, n)
        work.run(30)
        _assert_crashed_at(rep, armed, point)
    proc = rep.spawn("--no-extractor")
    try:
        rep.wait_source_applied(timeout=300)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]
    sh.assert_equal()
    for s in (s0, s2, s3):
        assert compare(sh.view(s), "big", ["id", "pad"], "id") > 1_000
    assert compare(sh.view(s1), "gen", GEN_NAMES, "id") == 2 * len(CHANNEL_POINTS)
    _assert_each_seqno_applied_once(rep)
    assert rep.tgt(f"SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = "
                   f"'{s2}' AND table_name = 'big'") == [(2 + len(CHANNEL_POINTS),)]
    _assert_drained(sh)


def _pin(rep: Replication, pins: dict[str, int]) -> None:
    """Assign shards to channels on the MariaDB target before the group first starts."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{rep.target.port}/")
    tracking = CommitSeqnoTable(rep.cfg.tracking_schema)
    try:
        with engine.begin() as conn:
            tracking.create(conn)
            table = tracking.metadata.tables[f"{rep.cfg.tracking_schema}.trep_shard_channel"]
            conn.execute(sa.insert(table), [{"shard_id": s, "channel": c}
                                            for s, c in pins.items()])
    finally:
        engine.dispose()


def test_a_transaction_touching_two_schemas_waits_for_every_channel(
        sharded: Callable[..., Sharded]) -> None:
    sh = sharded(3, block_commit_ms=50)
    rep, (s0, s1, s2, s3) = sh.rep, sh.schemas
    _pin(rep, {s0: 0, s1: 1, s2: 2, s3: 0})
    rep.start(consumers=["mariadb"])
    for s in sh.schemas:
        rep.src(f"CREATE DATABASE {s}",
                f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(20))",
                f"INSERT INTO {s}.t VALUES (1, 'seed')")
    rep.wait_source_applied(groups=["mariadb"])
    blocker = pymysql.connect(host="127.0.0.1", port=rep.target.port, user="root",
                              password="", autocommit=False)
    try:
        with blocker.cursor() as cur:
            cur.execute(f"SELECT v FROM {s1}.t WHERE id = 1 FOR UPDATE")  # channel 1 waits
        rep.src(f"UPDATE {s1}.t SET v = 'blocked' WHERE id = 1")
        # Another channel goes on meanwhile ...
        rep.src(f"INSERT INTO {s2}.t VALUES (2, 'parallel')")
        _until("channel 2 applying beside the blocked channel 1",
               lambda: rep.tgt(f"SELECT COUNT(*) FROM {s2}.t WHERE id = 2") == [(1,)], 30)
        # ... but a transaction of two schemas waits for every channel, and so does what
        # follows it in the THL.
        rep.src(f"INSERT INTO {s0}.t VALUES (3, 'critical')",
                f"INSERT INTO {s3}.t VALUES (3, 'critical')")
        rep.src(f"INSERT INTO {s2}.t VALUES (4, 'after')")
        time.sleep(2)
        assert rep.tgt(f"SELECT COUNT(*) FROM {s0}.t WHERE id = 3") == [(0,)]
        assert rep.tgt(f"SELECT COUNT(*) FROM {s3}.t WHERE id = 3") == [(0,)]
        assert rep.tgt(f"SELECT COUNT(*) FROM {s2}.t WHERE id = 4") == [(0,)]
        channels = {r["channel"]: r for r in rep.status("mariadb")["channelStatus"]}
        assert channels[1]["state"] == "applying"
        assert {s0, s3} <= set(channels[0]["shards"]) and s1 in channels[1]["shards"]
        shown = rep.trepctl("status", "-group", "mariadb", "-channels")
        assert shown.returncode == 0, shown.stderr
        assert "CHANNEL  SEQNO" in shown.stdout and f"{s0}, {s3}" in shown.stdout
    finally:
        blocker.commit()  # channel 1 goes on
        blocker.close()
    rep.wait_source_applied(groups=["mariadb"])
    for s in (s0, s3):
        assert rep.tgt(f"SELECT v FROM {s}.t WHERE id = 3") == [("critical",)]
    assert rep.tgt(f"SELECT v FROM {s1}.t WHERE id = 1") == [("blocked",)]
    # Commit order on the target: the blocked update, then the critical seqno, then after.
    audit = f"{rep.cfg.tracking_schema}.trep_apply_audit"
    seqno = {v: _seqno_of(rep, s, i) for v, s, i in (("blocked", s1, 1), ("critical", s0, 3),
                                                      ("after", s2, 4))}
    at = dict(rep.tgt(f"SELECT seqno, applied_at FROM {audit} WHERE seqno IN "
                      f"({', '.join(map(str, seqno.values()))})"))
    assert at[seqno["blocked"]] <= at[seqno["critical"]] <= at[seqno["after"]]
    assert rep.status("mariadb")["criticalEvents"] >= 1


def _seqno_of(rep: Replication, schema: str, key: int) -> int:
    """The seqno of the THL event that changed row ``key`` of ``schema.t`` last."""
    found = -1
    with ThlReader(rep.cfg.kafka.client(), rep.cfg.thl_topic) as reader:
        for rec in reader.records(reader.watermarks()[0]):
            assert rec.event is not None
            for item in rec.event.data:
                if isinstance(item, RowChange) and (item.schema, item.table) == (schema, "t") \
                        and any(row[0] == key for row in item.column_values):
                    found = rec.seqno
    assert found >= 0, (schema, key)
    return found


def _blocked_crash(rep: Replication, sh: Sharded, work: ShardedWorkload,
                   proc: subprocess.Popen[bytes]) -> None:
    """Kill the consumers while one channel of each group is held back on a row lock and
    the others went on: the stored channel positions differ on both targets."""
    s = sh.schemas[0]
    (key,) = rep.src(f"SELECT MIN(id) FROM {s}.accounts")[0]
    held = pymysql.connect(host="127.0.0.1", port=rep.target.port, user="root", password="",
                           autocommit=False)
    pg_held = psycopg.connect(host="127.0.0.1", port=rep.pg.port, user="postgres",
                              dbname="postgres")
    try:
        with held.cursor() as cur:
            cur.execute(f"SELECT id FROM {s}.accounts WHERE id = %s FOR UPDATE", (key,))
        pg_held.execute(f'SELECT id FROM "{s}".accounts WHERE id = %s FOR UPDATE'.encode(),
                        (key,))
        rep.src(f"UPDATE {s}.accounts SET note = 'held' WHERE id = {key}")
        work.run(40, only=sh.schemas[1:])
        _until("channel positions that differ", lambda: all(
            len({seqno for _, seqno in found}) > 1 for found in sh.positions().values()), 60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        held.rollback()
        held.close()
        pg_held.rollback()
        pg_held.close()


def test_changing_channels_after_a_clean_offline_works_after_a_crash_is_refused(
        sharded: Callable[..., Sharded]) -> None:
    sh = sharded(3)
    rep = sh.rep
    rep.start(consumers=[])
    sh.create()
    work = ShardedWorkload(rep.source.port, sh.schemas, seed=91)
    work.run(60)
    proc = rep.spawn("--no-extractor")
    rep.wait_source_applied()
    # A clean offline: every channel drained to one seqno.
    done = rep.trepctl("offline")
    assert done.returncode == 0, done.stderr
    for g in GROUPS:
        rep.wait_state(g, "OFFLINE:NORMAL")
    for target, found in sh.positions().items():
        assert len(found) == 3 and len({s for _, s in found}) == 1, (target, found)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]

    # Three channels become two.
    sh.set_channels(2)
    work.run(60)
    assert rep.trepctl("online").returncode == 0
    proc = rep.spawn("--no-extractor")
    rep.wait_source_applied()
    for target, found in sh.positions().items():
        assert [t for t, _ in found] == [0, 1], (target, found)
    _blocked_crash(rep, sh, work, proc)

    # After that crash, a third channel is refused with the way out ...
    sh.set_channels(3)
    proc = rep.spawn("--no-extractor")
    for g in GROUPS:
        status = rep.wait_state(g, "OFFLINE:ERROR")
        assert status["pendingErrorCode"] == "CHANNELS"
        message = status["pendingExceptionMessage"]
        assert "cannot change from 2 to 3" in message
        assert "Start it again with `channels: 2`" in message
        assert f"trepctl offline -group {g}" in message
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]
    assert all(len(found) == 2 for found in sh.positions().values())

    # ... as the message says: back to two, a clean offline, then more (four here).
    sh.set_channels(2)
    proc = rep.spawn("--no-extractor")
    for g in GROUPS:
        rep.wait_state(g, "ONLINE")  # the refused process's status stays until then
    rep.wait_source_applied()
    assert rep.trepctl("offline").returncode == 0
    for g in GROUPS:
        rep.wait_state(g, "OFFLINE:NORMAL")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]
    sh.set_channels(4)
    work.run(60)
    assert rep.trepctl("online").returncode == 0
    proc = rep.spawn("--no-extractor")
    try:
        rep.wait_source_applied()
        for target, found in sh.positions().items():
            assert [t for t, _ in found] == [0, 1, 2, 3], (target, found)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]
    sh.assert_equal()
    audit = f"{rep.cfg.tracking_schema}.trep_apply_audit"
    twice = rep.tgt(f"SELECT seqno, COUNT(*) FROM {audit} GROUP BY seqno HAVING COUNT(*) > 1")
    assert twice == []


def test_the_position_guard_holds_per_channel(sharded: Callable[..., Sharded]) -> None:
    rep = sharded(2).rep
    url = f"mysql+pymysql://root@127.0.0.1:{rep.target.port}/"
    service = ServiceSettings(service=rep.name)

    def applier(channel: int) -> SqlApplier:
        a = SqlApplier(SqlTarget(url=url), ApplierContext(service, "g", channel=channel))
        a.connect()
        return a

    def pos(seqno: int) -> Position:
        return Position(seqno=seqno, epoch=0, event_id=f"f:{seqno};0", source_id="s",
                        tstamp=int(time.time() * 1e6))

    zero, one, other = applier(0), applier(1), applier(1)
    try:
        for a in (zero, one, other):
            assert a.position() is None
        one.begin()
        one.commit(pos(5))
        zero.begin()  # its own row: nobody moved it
        zero.commit(pos(3))
        # MariaDB: the lock leads the block's first round trip, so the conflict shows at
        # the latest when the block commits, and nothing of it does.
        with pytest.raises(PositionConflict, match=r"task_id 1\) moved under this consumer"):
            other.begin()
            other.commit(pos(6))
        rows = rep.tgt(f"SELECT task_id, seqno FROM {rep.cfg.tracking_schema}."
                       "trep_commit_seqno ORDER BY task_id")
        assert [tuple(r) for r in rows] == [(0, 3), (1, 5)]
    finally:
        for a in (zero, one, other):
            a.close()
