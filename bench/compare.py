"""``make bench-compare``: this replicator beside Debezium and MariaDB's own replication.

One run, on the local stack, on one finished binlog (PERF.md's workload: ``--txns``
transactions of 10 single-row statements on a sysbench-like ``sbtest1``, 80% INSERT, 15%
UPDATE, 5% DELETE):

1. **Extraction**, alternating runs (``--runs``): this project's extractor
   (``trep-extractor``) and Debezium's MariaDB connector (Kafka Connect standalone, jars from
   Maven Central, with JsonConverter schemas on and off), each from the same binlog start
   into Kafka. Before the workload the source's binlog is reset (``RESET MASTER``: this
   invalidates the positions of any other service on the local stack, such as the demo's):
   Debezium with ``snapshot.mode=never`` streams from the first binlog file, so both read
   exactly the workload's binlog.
2. **Apply**, alternating runs: this project's SQL applier into the MariaDB target and into
   PostgreSQL, each from an empty target and an already filled THL, beside native MariaDB
   replication: a bench-only MariaDB replica (``mariadb-replica``) of the source that first
   fetches the relay log, then only its SQL thread is timed (the like-for-like comparison
   with a consumer group reading a filled THL). Every run ends with the target equal to the
   source (a digest of all rows), or the benchmark stops.
3. **Latency**: the extractor and the MariaDB consumer group run live while the workload is
   written at half of the measured maximum throughput, with a heartbeat row every
   ``--heartbeat-ms``; the target records each heartbeat's lag; p50/p99 are reported.
   Two maxima are used: the slower of extraction and apply, each measured alone (steps 1
   and 2), and the live pipeline's own (``--pipeline-txns`` transactions written unpaced
   while everything runs at once on the same cores, timed until a heartbeat written after
   them is applied).

Printed and written to ``bench/results/compare-<time>.json``: the machine's description
(CPU, memory, load before and after), every run, medians and the ratios. CPU on this shared
2-core machine is noisy: runs alternate and medians are reported. Not a test: nothing is
asserted beyond the targets' equality with the source.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import sqlalchemy as sa
import yaml
from confluent_kafka import Consumer, TopicPartition
from pymysql.constants import CLIENT

from replicator.tracking import CommitSeqno, CommitSeqnoTable
from stack import settings
from stack.fetch import maven_runtime_jars
from stack.services.mariadb import MariaDB
from stack.settings import HOST, JAVA_HOME, cache_dir
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
RUN = settings.RUN_DIR / "bench-compare"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DEBEZIUM_VERSION = "3.4.0.Final"
CONNECT_VERSION = "4.1.1"
DEBEZIUM_COORDS = [
    f"org.apache.kafka:connect-runtime:{CONNECT_VERSION}",
    f"org.apache.kafka:connect-json:{CONNECT_VERSION}",
    # SLF4J 2 explicitly: the resolved tree otherwise brings 1.7, which finds no binding.
    "org.slf4j:slf4j-api:2.0.17",
    "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
    "org.apache.logging.log4j:log4j-core:2.24.3",
    f"io.debezium:debezium-connector-mariadb:{DEBEZIUM_VERSION}",
]
TABLE_DDL = ("CREATE TABLE {schema}.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, "
             "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)")


# ----------------------------------------------------------------------------- helpers

def mysql(port: int, **kw: Any) -> pymysql.connections.Connection[Any]:
    """A root connection to one of the stack's MariaDB servers."""
    return pymysql.connect(host=HOST, port=port, user="root", password="", charset="utf8mb4",
                           autocommit=True, **kw)


def query(port: int, sql: str) -> list[tuple[Any, ...]]:
    """Rows of one statement (autocommit)."""
    with mysql(port) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (children included once they were reaped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / CLK_TCK


def proc_peak_rss_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def server_pid(server: MariaDB) -> int:
    """The mariadbd process id of a stack server."""
    return int(server.pid_file.read_text().split()[0])


def steady_rate(samples: list[tuple[float, float]], total: float) -> float | None:
    """Units/s between 10% and 90% of ``total``: start-up and the tail left out."""
    lo = next((s for s in samples if s[1] >= 0.1 * total), None)
    hi = next((s for s in samples if s[1] >= 0.9 * total), None)
    if lo is None or hi is None or hi[0] <= lo[0]:
        return None
    return (hi[1] - lo[1]) / (hi[0] - lo[0])


def median(values: list[float]) -> float | None:
    """Median of the values present (None if there are none)."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, rounded; None when either is missing."""
    return round(a / b, 3) if a and b else None


def machine() -> dict[str, Any]:
    """What this ran on, and how busy the machine was."""
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal"))
    java = subprocess.run([str(JAVA_HOME / "bin" / "java"), "-version"], capture_output=True,
                          text=True, check=False).stderr.splitlines()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "java": java[0] if java else "?", "load_average": os.getloadavg()}


# ----------------------------------------------------------------------------- workload

@dataclass
class Workload:
    """What was written into the binlog, and where."""

    schema: str
    start: tuple[str, int] = ("", 0)
    end: tuple[str, int] = ("", 0)
    txns: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    last_gtid: str = ""
    write_seconds: float = 0.0

    @property
    def rows(self) -> int:
        return self.inserts + self.updates + self.deletes


@dataclass
class Writer:
    """The workload's transactions, 10 single-row statements each, one round trip each."""

    schema: str
    rng: random.Random = field(default_factory=lambda: random.Random(42))
    ids: list[int] = field(default_factory=list)
    next_id: int = 1
    counts: dict[str, int] = field(default_factory=lambda: {"I": 0, "U": 0, "D": 0})

    def _text(self, n: int) -> str:
        return f"{self.rng.getrandbits(4 * n):0{n}x}"[:n]

    def transaction(self) -> str:
        t = f"{self.schema}.sbtest1"
        stmts = ["BEGIN"]
        for _ in range(10):
            r = self.rng.random()
            if r < 0.8 or len(self.ids) < 10:
                i, self.next_id = self.next_id, self.next_id + 1
                self.ids.append(i)
                stmts.append(f"INSERT INTO {t} VALUES ({i}, {self.rng.randint(1, 10**6)}, "
                             f"'{self._text(120)}', '{self._text(60)}')")
                self.counts["I"] += 1
            elif r < 0.95:
                stmts.append(f"UPDATE {t} SET k = k + 1, c = '{self._text(120)}' "
                             f"WHERE id = {self.rng.choice(self.ids)}")
                self.counts["U"] += 1
            else:
                i = self.ids.pop(self.rng.randrange(len(self.ids)))
                stmts.append(f"DELETE FROM {t} WHERE id = {i}")
                self.counts["D"] += 1
        stmts.append("COMMIT")
        return ";".join(stmts)


def run_writer(port: int, writer: Writer, txns: int, rate_tps: float | None = None,
               between: Callable[[pymysql.cursors.Cursor], None] | None = None,
               every_s: float = 0.0) -> float:
    """Write ``txns`` transactions (paced to ``rate_tps`` if given); seconds taken.

    ``between`` runs on the same connection every ``every_s`` seconds (heartbeats).
    """
    conn = mysql(port, client_flag=CLIENT.MULTI_STATEMENTS)
    started = last = time.monotonic()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for n in range(txns):
            if rate_tps:
                wait = started + n / rate_tps - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            cur.execute(writer.transaction())
            while cur.nextset():
                pass
            if between is not None and time.monotonic() - last >= every_s:
                last = time.monotonic()
                between(cur)
    conn.close()
    return time.monotonic() - started


def master_status(port: int) -> tuple[str, int]:
    (row,) = query(port, "SHOW MASTER STATUS")
    return str(row[0]), int(row[1])


def write_workload(port: int, schema: str, txns: int) -> Workload:
    """Reset the binlog, then write the schema and the transactions into it."""
    # Debezium (snapshot.mode=never, no offsets) asks for an empty GTID state, which MariaDB
    # serves from its first binlog file only while no GTID history was purged: RESET MASTER
    # makes the workload the whole binlog, so both readers read exactly the same events.
    query(port, "RESET MASTER")
    work = Workload(schema, start=master_status(port))
    query(port, f"CREATE DATABASE {schema}")
    query(port, TABLE_DDL.format(schema=schema))
    writer = Writer(schema)
    work.write_seconds = round(run_writer(port, writer, txns), 1)
    work.txns = txns
    work.inserts, work.updates, work.deletes = (writer.counts[k] for k in "IUD")
    work.end = master_status(port)
    work.last_gtid = str(query(port, "SELECT @@gtid_binlog_pos")[0][0])
    return work


def rows_digest(rows: Iterator[tuple[Any, ...]]) -> tuple[int, str]:
    """(count, sha256) of rows in id order, each as its text."""
    h = hashlib.sha256()
    n = 0
    for row in rows:
        h.update(repr(tuple(str(v) for v in row)).encode())
        n += 1
    return n, h.hexdigest()


def mariadb_digest(port: int, schema: str) -> tuple[int, str]:
    with mysql(port) as conn, conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT id, k, c, pad FROM {schema}.sbtest1 ORDER BY id")
        return rows_digest(iter(cur.fetchone, None))


def pg_digest(port: int, schema: str) -> tuple[int, str]:
    with psycopg.connect(host=HOST, port=port, user="postgres", dbname="postgres") as conn:
        rows = conn.execute(f'SELECT id, k, c, pad FROM "{schema}".sbtest1 ORDER BY id')
        return rows_digest(iter(rows))


# ----------------------------------------------------------------------------- extraction

def service_config(name: str, schema: str, extra: dict[str, Any] | None = None) -> Path:
    """A service of this benchmark (its own THL topic, tracking schema, consumer groups)."""
    RUN.mkdir(parents=True, exist_ok=True)
    path = RUN / f"{name}.yml"
    path.write_text(yaml.safe_dump({
        "service": name,
        "kafka": {"bootstrap_servers": f"{HOST}:{settings.port('kafka')}"},
        "zookeeper": {"hosts": f"{HOST}:{settings.port('zookeeper')}"},
        "source": {"host": HOST, "port": settings.port("mariadb-source"), "user": "root",
                   "password": ""},
        "extractor": {"server_id": 7000 + int(name[-4:], 16) % 1000, "source_id": "bench",
                      "filters": {"replicate": [f"{schema}.*"]}},
        **(extra or {}),
    }))
    return path


def seed_start(cfg: ServiceConfig, at: tuple[str, int]) -> None:
    """Make the extractor start at ``at`` (the tracking schema is created first)."""
    engine = sa.create_engine(f"mysql+pymysql://root@{HOST}:{settings.port('mariadb-source')}/")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    with engine.begin() as conn:
        tracking.create(conn)
        tracking.write(conn, CommitSeqno(seqno=-1, epoch=0, eventid=f"{at[0]}:{at[1]:016d};0",
                                         source_id="bench"))
    engine.dispose()


def extracted(cfg: ServiceConfig) -> tuple[int, tuple[str, int]]:
    """(seqno, binlog position) the extractor last committed, from the source's tracking."""
    rows = query(settings.port("mariadb-source"),
                 f"SELECT seqno, eventid FROM {cfg.tracking_schema}.trep_commit_seqno "
                 "WHERE task_id = 0")
    if not rows:
        return -1, ("", 0)
    where = str(rows[0][1]).split(";", 1)[0]
    file, _, pos = where.rpartition(":")
    return int(rows[0][0]), (file, int(pos))


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=out,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_ours(work: Workload, timeout: float) -> dict[str, Any]:
    """One extractor process from start to the workload's last transaction in the THL."""
    name = f"bcx{uuid.uuid4().hex[:6]}"
    path = service_config(name, work.schema)
    cfg = load_config(path)
    seed_start(cfg, work.start)
    log = RUN / f"{name}.log"
    started = time.monotonic()
    proc = spawn([sys.executable, "-m", "trep.extract", "-c", str(path)], log)
    samples: list[tuple[float, float]] = []
    cpu = peak = 0.0
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the extractor exited; see {log}")
            seqno, pos = extracted(cfg)
            now = time.monotonic()
            samples.append((now - started, max(seqno, 0)))
            cpu, peak = proc_cpu(proc.pid), proc_peak_rss_mib(proc.pid)
            if pos >= work.end:
                break
            if now - started > timeout:
                raise SystemExit(f"the extractor did not finish within {timeout} s; see {log}")
            time.sleep(0.1)
    finally:
        stop(proc)
    elapsed = samples[-1][0]
    events = samples[-1][1] + 1
    steady = steady_rate(samples, samples[-1][1])
    with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
        low, high = reader.watermarks()
    return {"reader": "tungsten-kafka", "service": name, "wall_seconds": round(elapsed, 2),
            "rows_per_second": round(work.rows / elapsed),
            "steady_rows_per_second": round(steady * work.rows / events) if steady else None,
            "cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_million_rows": round(cpu / work.rows * 1e6, 1),
            "cores_used": round(cpu / elapsed, 2), "peak_rss_mib": peak,
            "thl_events": events, "kafka_records": high - low}


def debezium_jars() -> Path:
    dest = cache_dir(f"debezium-mariadb-{DEBEZIUM_VERSION}-connect-{CONNECT_VERSION}-slf4j2")
    maven_runtime_jars("debezium", DEBEZIUM_COORDS, dest, log=RUN / "maven.log")
    return dest


def topic_records(consumer: Consumer, topic: str) -> int:
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
    except Exception:  # the topic does not exist yet
        return 0
    return int(high - low) if high >= 0 else 0


def run_debezium(work: Workload, jars: Path, schemas: bool, timeout: float) -> dict[str, Any]:
    """Debezium's MariaDB connector in Kafka Connect standalone, PERF.md's settings."""
    prefix = f"dbz{uuid.uuid4().hex[:6]}"
    d = RUN / prefix
    d.mkdir(parents=True)
    kafka = f"{HOST}:{settings.port('kafka')}"
    flag = "true" if schemas else "false"
    (d / "worker.properties").write_text("\n".join([
        f"bootstrap.servers={kafka}",
        "key.converter=org.apache.kafka.connect.json.JsonConverter",
        "value.converter=org.apache.kafka.connect.json.JsonConverter",
        f"key.converter.schemas.enable={flag}", f"value.converter.schemas.enable={flag}",
        f"offset.storage.file.filename={d / 'offsets.dat'}", "offset.flush.interval.ms=10000",
        # Its REST listener on a free port of this slot, never the default 8083.
        f"listeners=http://{HOST}:{settings.port('debezium-rest')}", ""]))
    (d / "connector.properties").write_text("\n".join([
        f"name={prefix}", "connector.class=io.debezium.connector.mariadb.MariaDbConnector",
        "tasks.max=1", f"database.hostname={HOST}",
        f"database.port={settings.port('mariadb-source')}", "database.user=root",
        "database.password=", f"database.server.id={8000 + random.randint(0, 999)}",
        f"topic.prefix={prefix}", f"database.include.list={work.schema}",
        "snapshot.mode=never",
        "schema.history.internal=io.debezium.storage.file.history.FileSchemaHistory",
        f"schema.history.internal.file.filename={d / 'history.dat'}",
        "topic.creation.default.replication.factor=1", "topic.creation.default.partitions=1",
        ""]))
    (d / "log4j2.properties").write_text(
        "rootLogger.level=INFO\nrootLogger.appenderRef.f.ref=F\nappender.f.type=File\n"
        f"appender.f.name=F\nappender.f.fileName={d / 'connect.log'}\n"
        "appender.f.layout.type=PatternLayout\nappender.f.layout.pattern=%d %p %c: %m%n\n")
    expected = work.rows + work.deletes  # a tombstone follows every delete
    topic = f"{prefix}.{work.schema}.sbtest1"
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"{prefix}-watch",
                         "enable.auto.commit": False})
    log = d / "stdout.log"
    started = time.monotonic()
    proc = spawn([str(JAVA_HOME / "bin" / "java"), "-Xms256M", "-Xmx2G", "-XX:+UseG1GC",
                  f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
                  "-cp", f"{jars}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
                  str(d / "worker.properties"), str(d / "connector.properties")], log)
    samples: list[tuple[float, float]] = []
    cpu = peak = 0.0
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"Kafka Connect exited; see {log} and {d / 'connect.log'}")
            n = topic_records(consumer, topic)
            now = time.monotonic()
            samples.append((now - started, n))
            cpu, peak = proc_cpu(proc.pid), proc_peak_rss_mib(proc.pid)
            if n >= expected:
                break
            if now - started > timeout:
                raise SystemExit(f"Debezium wrote {n} of {expected} records in {timeout} s; "
                                 f"see {d / 'connect.log'}")
            time.sleep(0.1)
    finally:
        stop(proc)
        consumer.close()
    elapsed = samples[-1][0]
    steady = steady_rate(samples, expected)
    return {"reader": f"debezium-{DEBEZIUM_VERSION}-schemas-{'on' if schemas else 'off'}",
            "wall_seconds": round(elapsed, 2), "rows_per_second": round(work.rows / elapsed),
            "steady_rows_per_second": round(steady * work.rows / expected) if steady else None,
            "cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_million_rows": round(cpu / work.rows * 1e6, 1),
            "cores_used": round(cpu / elapsed, 2), "peak_rss_mib": peak,
            "kafka_records": samples[-1][1]}


# ----------------------------------------------------------------------------- apply

class Replica(MariaDB):
    """A bench-only MariaDB that replicates the source natively (never used by tests)."""

    def __init__(self) -> None:
        super().__init__("mariadb-replica", server_id=3, binlog=False)


def slave_status(port: int) -> dict[str, Any]:
    with mysql(port) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW SLAVE STATUS")
        return cur.fetchone() or {}


def run_native(replica: Replica, work: Workload, timeout: float) -> dict[str, Any]:
    """The replica fetches the workload's relay log, then its SQL thread alone is timed."""
    port = replica.port
    src = settings.port("mariadb-source")
    for stmt in ("STOP SLAVE", "RESET SLAVE ALL", f"DROP DATABASE IF EXISTS {work.schema}",
                 f"CHANGE MASTER TO MASTER_HOST='{HOST}', MASTER_PORT={src}, "
                 f"MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=no, "
                 f"MASTER_LOG_FILE='{work.start[0]}', MASTER_LOG_POS={work.start[1]}",
                 "START SLAVE IO_THREAD"):
        query(port, stmt)
    deadline = time.monotonic() + timeout
    while True:
        st = slave_status(port)
        if st.get("Last_IO_Errno"):
            raise SystemExit(f"replica IO thread: {st.get('Last_IO_Error')}")
        if (st.get("Master_Log_File"), int(st.get("Read_Master_Log_Pos") or 0)) >= work.end:
            break
        if time.monotonic() > deadline:
            raise SystemExit("the replica did not fetch the relay log in time")
        time.sleep(0.1)
    pid = server_pid(replica)
    cpu0 = proc_cpu(pid)
    started = time.monotonic()
    query(port, f"START SLAVE SQL_THREAD UNTIL MASTER_LOG_FILE='{work.end[0]}', "
                f"MASTER_LOG_POS={work.end[1]}")
    while True:
        st = slave_status(port)
        if st.get("Last_SQL_Errno"):
            raise SystemExit(f"replica SQL thread: {st.get('Last_SQL_Error')}")
        done = (st.get("Relay_Master_Log_File"), int(st.get("Exec_Master_Log_Pos") or 0))
        if done >= work.end:
            break
        if time.monotonic() > deadline:
            raise SystemExit("the replica's SQL thread did not finish in time")
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    cpu = proc_cpu(pid) - cpu0
    query(port, "STOP SLAVE")
    if mariadb_digest(port, work.schema) != mariadb_digest(src, work.schema):
        raise SystemExit("the native replica differs from the source")
    return {"applier": "mariadb-native-sql-thread", "wall_seconds": round(elapsed, 3),
            "rows_per_second": round(work.rows / elapsed),
            "cpu_seconds_per_million_rows": round(cpu / work.rows * 1e6, 1)}


def applied(engine: sa.Engine, cfg: ServiceConfig) -> int:
    table = CommitSeqnoTable(cfg.tracking_schema).table
    try:
        with engine.connect() as conn:
            value = conn.execute(sa.select(table.c.seqno).where(table.c.task_id == 0)).scalar()
    except sa.exc.DBAPIError:
        return -1
    return -1 if value is None else int(value)


def apply_groups(schema: str) -> dict[str, Any]:
    """The consumer groups measured: MariaDB with the default block and with 100 events."""
    mariadb = {"type": "sql", "url": f"mysql+pymysql://root@{HOST}:"
                                     f"{settings.port('mariadb-target')}/"}
    return {"consumers": {
        "mariadb": {"target": mariadb},
        "mariadb_b100": {"target": mariadb, "block_commit_events": 100},
        "postgresql": {"target": {"type": "sql", "url": f"postgresql+psycopg://postgres@{HOST}:"
                                                        f"{settings.port('postgresql')}/postgres"}},
    }}


def reset_target(cfg: ServiceConfig, group: str, schema: str) -> sa.Engine:
    target = cfg.consumers[group].target
    url = target.engine_url()  # type: ignore[union-attr]
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    with engine.begin() as conn:
        tracking.create(conn)
        conn.execute(sa.delete(tracking.table))
        if group == "postgresql":
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        else:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {schema}"))
    return engine


def target_pid(group: str) -> int | None:
    if group.startswith("mariadb"):
        return server_pid(MariaDB("mariadb-target", 2, False))
    with contextlib.suppress(OSError, ValueError):
        pidfile = settings.RUN_DIR / "postgresql" / "data" / "postmaster.pid"
        return int(pidfile.read_text().split()[0])
    return None


def tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process and its live children (PostgreSQL's backends)."""
    if pid is None:
        return 0.0
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError):
            total += proc_cpu(p)
    return total


def run_apply(cfg: ServiceConfig, path: Path, group: str, work: Workload, tail: int,
              timeout: float) -> dict[str, Any]:
    """One consumer group alone, from an empty target to the THL tail, timed."""
    engine = reset_target(cfg, group, work.schema)
    log = RUN / f"{cfg.service}-{group}.log"
    server = target_pid(group)
    server_cpu0 = tree_cpu(server)
    started = time.monotonic()
    proc = spawn([sys.executable, "-m", "trep.runner", "-c", str(path), "--no-extractor",
                  "--consumer", group], log)
    first: tuple[float, int] | None = None
    cpu = 0.0
    try:
        while True:
            seqno = applied(engine, cfg)
            now = time.monotonic()
            if seqno >= 0 and first is None:
                first = (now, seqno)
            if seqno >= tail:
                break
            if proc.poll() is not None:
                raise SystemExit(f"consumer group {group} exited; see {log}")
            if now - started > timeout:
                raise SystemExit(f"{group} did not reach seqno {tail} in {timeout} s; see {log}")
            cpu = proc_cpu(proc.pid)
            time.sleep(0.05)
        cpu = proc_cpu(proc.pid)
    finally:
        stop(proc)
    server_cpu = tree_cpu(server) - server_cpu0
    engine.dispose()
    elapsed = now - started
    src = mariadb_digest(settings.port("mariadb-source"), work.schema)
    got = (mariadb_digest(settings.port("mariadb-target"), work.schema)
           if group.startswith("mariadb") else pg_digest(settings.port("postgresql"), work.schema))
    if got != src:
        raise SystemExit(f"{group}: the target differs from the source ({got[0]} rows vs "
                         f"{src[0]})")
    result: dict[str, Any] = {
        "applier": f"tungsten-kafka-{group}", "wall_seconds": round(elapsed, 2),
        "rows_per_second": round(work.rows / elapsed), "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_million_rows": round((cpu + server_cpu) / work.rows * 1e6, 1),
        "applier_cpu_share": round(cpu / (cpu + server_cpu), 2) if cpu + server_cpu else None}
    if first is not None and now > first[0] and tail > first[1]:
        result["steady_rows_per_second"] = round(
            work.rows * (tail - first[1]) / (tail + 1) / (now - first[0]))
    return result


# ----------------------------------------------------------------------------- latency

class Live:
    """The extractor and the MariaDB consumer group running live on a fresh schema."""

    def __init__(self, prefix: str, timeout: float) -> None:
        self.name = f"{prefix}{uuid.uuid4().hex[:6]}"
        self.schema = f"lat_{self.name}"
        path = service_config(self.name, self.schema, {"consumers": {
            "mariadb": apply_groups(self.schema)["consumers"]["mariadb"]}})
        self.cfg = load_config(path)
        self.src = settings.port("mariadb-source")
        seed_start(self.cfg, master_status(self.src))
        query(self.src, f"CREATE DATABASE {self.schema}")
        query(self.src, TABLE_DDL.format(schema=self.schema))
        self.target = sa.create_engine(
            f"mysql+pymysql://root@{HOST}:{settings.port('mariadb-target')}/",
            isolation_level="AUTOCOMMIT")
        self.deadline = time.monotonic() + timeout
        self.proc = spawn([sys.executable, "-m", "trep.runner", "-c", str(path)],
                          RUN / f"{self.name}.log")
        self.writer = Writer(self.schema, rng=random.Random(9))
        self.beats = 0

    def wait_up(self) -> None:
        """Until the DDL is through: the pipeline is up."""
        while applied(self.target, self.cfg) < 1:
            if self.proc.poll() is not None or time.monotonic() > self.deadline:
                raise SystemExit(f"the live pipeline did not start; see {RUN / self.name}.log")
            time.sleep(0.1)

    def heartbeat(self, cur: pymysql.cursors.Cursor) -> None:
        """A heartbeat row on the source: the target records its lag when it applies it."""
        self.beats += 1
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        cur.execute(f"INSERT INTO {self.cfg.tracking_schema}.heartbeat (id, seqno, "
                    f"source_tstamp, salt, name) VALUES ({self.beats}, 0, '{now}', "
                    f"{self.beats}, 'bench')")

    def lags(self) -> list[int]:
        """Every heartbeat's lag on the target (ms), once all of them arrived, sorted."""
        lags: list[int] = []
        while time.monotonic() < self.deadline:
            with self.target.connect() as conn:
                lags = [int(r[0]) for r in conn.execute(sa.text(
                    f"SELECT lag_millis FROM {self.cfg.tracking_schema}.heartbeat "
                    "WHERE lag_millis IS NOT NULL"))]
            if len(lags) >= self.beats:
                break
            time.sleep(0.05)
        if not lags:
            raise SystemExit("no heartbeat reached the target")
        return sorted(lags)

    def close(self) -> None:
        stop(self.proc)
        self.target.dispose()


def run_latency(rate_rows: float, seconds: float, heartbeat_ms: int,
                timeout: float) -> dict[str, Any]:
    """Live extractor + MariaDB group under a paced workload; heartbeat lags on the target."""
    live = Live("bcl", timeout)
    try:
        live.wait_up()
        tps = rate_rows / 10
        txns = int(tps * seconds)
        took = run_writer(live.src, live.writer, txns, rate_tps=tps, between=live.heartbeat,
                          every_s=heartbeat_ms / 1000)
        lags = live.lags()
    finally:
        live.close()
    return {"target_rows_per_second": round(rate_rows),
            "written_rows_per_second": round(txns * 10 / took),
            "seconds": round(took, 1), "heartbeats": len(lags),
            "lag_ms_p50": lags[len(lags) // 2],
            "lag_ms_p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            "lag_ms_max": lags[-1]}


def run_pipeline_max(txns: int, timeout: float) -> dict[str, Any]:
    """The live pipeline's own maximum: extractor and MariaDB group running together (with
    the source and target servers, Kafka and ZooKeeper on the same cores) while ``txns``
    transactions are written unpaced; rows/s from the first write until a heartbeat written
    after the last transaction is applied."""
    live = Live("bcm", timeout)
    try:
        live.wait_up()
        started = time.monotonic()
        wrote = run_writer(live.src, live.writer, txns)
        with mysql(live.src) as conn, conn.cursor() as cur:
            live.heartbeat(cur)
        live.lags()
        took = time.monotonic() - started
    finally:
        live.close()
    return {"transactions": txns, "row_changes": txns * 10,
            "written_seconds": round(wrote, 1), "applied_seconds": round(took, 1),
            "rows_per_second": round(txns * 10 / took)}


def latency_sweep(ceiling: float, fractions: list[float], args: argparse.Namespace
                  ) -> list[dict[str, Any]]:
    """Heartbeat latency at each fraction of the pipeline's maximum rows/s: where p99 stays
    under the goal, and where queueing starts."""
    sweep = []
    for fraction in fractions:
        res = run_latency(ceiling * fraction, args.latency_seconds, args.heartbeat_ms,
                          args.timeout)
        res["fraction_of_max"] = fraction
        sweep.append(res)
        print(f"  latency at {fraction:.0%} of {round(ceiling)} rows/s: p50 "
              f"{res['lag_ms_p50']} ms, p99 {res['lag_ms_p99']} ms", flush=True)
    return sweep


def pipeline_latency(fractions: list[float], args: argparse.Namespace
                     ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The live pipeline's own maximum, and the latency sweep at fractions of it.

    The main sweep's ceiling is the slower of extraction and apply, each measured alone on
    the machine; live, both run at once on the same 2 cores beside the servers, so the
    pipeline's own maximum is lower and "half of the maximum" means something else."""
    if args.pipeline_txns <= 0:
        return None, []
    pipeline = run_pipeline_max(args.pipeline_txns, args.timeout)
    print(f"  live pipeline maximum: {pipeline['rows_per_second']} rows/s", flush=True)
    return pipeline, latency_sweep(pipeline["rows_per_second"], fractions, args)


# ----------------------------------------------------------------------------- main

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--txns", type=int, default=20_000,
                        help="transactions of 10 single-row statements")
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of each reader")
    parser.add_argument("--skip-debezium", action="store_true")
    parser.add_argument("--skip-native", action="store_true")
    parser.add_argument("--latency-seconds", type=float, default=30.0)
    parser.add_argument("--latency-fractions", default="0.5,0.25,0.1",
                        help="latency runs at these fractions of the measured maximum "
                             "(the first is the goal's: half of the maximum)")
    parser.add_argument("--latency-only", type=float, default=None, metavar="ROWS_PER_S",
                        help="skip extraction and apply: only the latency sweeps, with this "
                             "maximum (rows/s) from an earlier run and the live pipeline's "
                             "own, measured again")
    parser.add_argument("--pipeline-txns", type=int, default=6_000,
                        help="transactions written unpaced to measure the live pipeline's "
                             "own maximum (0: skip it)")
    parser.add_argument("--heartbeat-ms", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    fractions = [float(f) for f in args.latency_fractions.split(",") if f.strip()]

    RUN.mkdir(parents=True, exist_ok=True)
    before = machine()
    if args.latency_only is not None:
        sweep = latency_sweep(args.latency_only, fractions, args)
        pipeline, pipeline_sweep = pipeline_latency(fractions, args)
        print(json.dumps({"latency_sweep": sweep, "pipeline_max": pipeline,
                          "pipeline_latency_sweep": pipeline_sweep, "machine": before},
                         indent=2))
        return 0
    jars = None if args.skip_debezium else debezium_jars()
    replica = None
    if not args.skip_native:
        replica = Replica()
        replica.start()
    src = settings.port("mariadb-source")
    schema = f"bc_{uuid.uuid4().hex[:6]}"
    print(f"writing {args.txns} transactions x 10 statements into a fresh binlog ...",
          flush=True)
    work = write_workload(src, schema, args.txns)
    print(f"  {work.rows} row changes in {work.write_seconds} s, binlog {work.start} .. "
          f"{work.end}", flush=True)

    extraction: list[dict[str, Any]] = []
    readers: list[Callable[[], dict[str, Any]]] = [lambda: run_ours(work, args.timeout)]
    if jars is not None:
        readers += [lambda: run_debezium(work, jars, True, args.timeout),
                    lambda: run_debezium(work, jars, False, args.timeout)]
    for run in range(args.runs):
        for i in range(len(readers)):
            reader = readers[(i + run) % len(readers)]  # rotate the order every run
            res = reader()
            res["run"] = run
            extraction.append(res)
            print(f"  extract run {run}: {res['reader']}: {res['rows_per_second']} rows/s "
                  f"(steady {res['steady_rows_per_second']}), "
                  f"{res['cpu_seconds_per_million_rows']} CPU s/M rows", flush=True)

    ours = [r for r in extraction if r["reader"] == "tungsten-kafka"]
    service = ours[-1]["service"]
    path = RUN / f"{service}.yml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()),
                                    **apply_groups(schema)}))
    cfg = load_config(path)
    with ThlReader(cfg.kafka.client(), cfg.thl_topic) as thl:
        tail_rec = thl.tail()
    tail = tail_rec.seqno if tail_rec else -1
    apply: list[dict[str, Any]] = []
    appliers: list[Callable[[], dict[str, Any]]] = [
        lambda: run_apply(cfg, path, "mariadb", work, tail, args.timeout),
        lambda: run_apply(cfg, path, "mariadb_b100", work, tail, args.timeout),
        lambda: run_apply(cfg, path, "postgresql", work, tail, args.timeout)]
    if replica is not None:
        appliers.append(lambda: run_native(replica, work, args.timeout))
    for run in range(args.runs):
        for i in range(len(appliers)):
            res = appliers[(i + run) % len(appliers)]()
            res["run"] = run
            apply.append(res)
            print(f"  apply run {run}: {res['applier']}: {res['rows_per_second']} rows/s, "
                  f"{res['cpu_seconds_per_million_rows']} CPU s/M rows", flush=True)

    def med(rows: list[dict[str, Any]], key: str, **match: str) -> float | None:
        return median([r.get(key) for r in rows  # type: ignore[misc]
                       if all(r.get(k) == v for k, v in match.items())])

    summary: dict[str, Any] = {}
    for name in sorted({r["reader"] for r in extraction}):
        summary[name] = {k: med(extraction, k, reader=name) for k in (
            "rows_per_second", "steady_rows_per_second", "cpu_seconds_per_million_rows",
            "cores_used", "peak_rss_mib")}
    for name in sorted({r["applier"] for r in apply}):
        summary[name] = {k: med(apply, k, applier=name) for k in (
            "rows_per_second", "steady_rows_per_second", "cpu_seconds_per_million_rows")}
    ratios: dict[str, Any] = {}
    us = summary["tungsten-kafka"]
    for flag in ("on", "off"):
        dbz = summary.get(f"debezium-{DEBEZIUM_VERSION}-schemas-{flag}")
        if dbz:
            ratios[f"extract_vs_debezium_schemas_{flag}"] = {
                "rows_per_second": ratio(us["rows_per_second"], dbz["rows_per_second"]),
                "steady_rows_per_second": ratio(us["steady_rows_per_second"],
                                                dbz["steady_rows_per_second"]),
                "cpu_per_row": ratio(us["cpu_seconds_per_million_rows"],
                                     dbz["cpu_seconds_per_million_rows"])}
    native = summary.get("mariadb-native-sql-thread")
    my, pg = summary["tungsten-kafka-mariadb"], summary["tungsten-kafka-postgresql"]
    my100 = summary["tungsten-kafka-mariadb_b100"]
    if native:
        ratios["apply_mariadb_vs_native_sql_thread"] = ratio(my["rows_per_second"],
                                                             native["rows_per_second"])
        ratios["apply_mariadb_block100_vs_native_sql_thread"] = ratio(
            my100["rows_per_second"], native["rows_per_second"])
        ratios["apply_mariadb_cpu_per_row_vs_native"] = ratio(
            my["cpu_seconds_per_million_rows"], native["cpu_seconds_per_million_rows"])
    ratios["apply_postgresql_vs_mariadb"] = ratio(pg["rows_per_second"], my["rows_per_second"])

    # Latency at half of the pipeline's maximum: the slower of extraction and MariaDB apply.
    ceiling = min(us["steady_rows_per_second"] or us["rows_per_second"],
                  my.get("steady_rows_per_second") or my["rows_per_second"])
    sweep = latency_sweep(ceiling, fractions, args)
    latency = sweep[0] if sweep else None
    pipeline, pipeline_sweep = pipeline_latency(fractions[:1], args)
    if replica is not None:
        replica.stop()
    result = {
        "benchmark": "bench-compare", "when": dt.datetime.now(dt.UTC).isoformat(),
        "machine": before, "load_average_after": os.getloadavg(),
        "workload": {"transactions": work.txns, "row_changes": work.rows,
                     "inserts": work.inserts, "updates": work.updates,
                     "deletes": work.deletes, "binlog_bytes": work.end[1] - work.start[1]
                     if work.end[0] == work.start[0] else None,
                     "statements_per_transaction": 10},
        "runs": args.runs, "extraction": extraction, "apply": apply, "medians": summary,
        "ratios": ratios, "latency": latency, "latency_sweep": sweep,
        "pipeline_max": pipeline, "pipeline_latency_sweep": pipeline_sweep,
    }
    out = args.out or ROOT / "bench" / "results" / \
        f"compare-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"medians": summary, "ratios": ratios, "latency_sweep": sweep,
                      "pipeline_max": pipeline, "pipeline_latency_sweep": pipeline_sweep,
                      "machine": before}, indent=2))
    print(f"written to {out}")
    shutil.rmtree(RUN / "tmp", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
