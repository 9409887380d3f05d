"""bench-compare's extraction runs: this project's extractor and Debezium's MariaDB connector
(Kafka Connect standalone), each from the workload's binlog start into Kafka.

Both are sampled every 100 ms (what they wrote so far, their CPU and peak memory) until
they wrote the whole workload; the steady rate leaves out the start-up and the tail.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compare_workload import RUN, SOURCE, Workload, query, service_config
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from processes import cpu_seconds, peak_rss_kib, spawn, stop
from service import seed_start

from stack import settings
from stack.fetch import maven_runtime_jars
from stack.settings import HOST, JAVA_HOME, cache_dir
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config

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

Samples = list[tuple[float, float]]


def steady_rate(samples: list[tuple[float, float]], total: float) -> float | None:
    """Units/s between 10% and 90% of ``total``: start-up and the tail left out."""
    lo = next((s for s in samples if s[1] >= 0.1 * total), None)
    hi = next((s for s in samples if s[1] >= 0.9 * total), None)
    if lo is None or hi is None or hi[0] <= lo[0]:
        return None
    return (hi[1] - lo[1]) / (hi[0] - lo[0])


def sample(proc: subprocess.Popen[bytes], started: float,
           progress: Callable[[], tuple[float, bool]], timeout: float, exited: str,
           late: Callable[[float], str]) -> tuple[Samples, float, float]:
    """Every 100 ms, (seconds since ``started``, ``progress()``'s count) until it says done;
    the process's CPU seconds (its reaped children too) and peak RSS MiB at the end."""
    samples: Samples = []
    cpu = peak = 0.0
    while True:
        if proc.poll() is not None:
            raise SystemExit(exited)
        count, done = progress()
        now = time.monotonic()
        samples.append((now - started, count))
        cpu = cpu_seconds(proc.pid, children=True)
        peak = round(peak_rss_kib(proc.pid) / 1024, 1)
        if done:
            return samples, cpu, peak
        if now - started > timeout:
            raise SystemExit(late(count))
        time.sleep(0.1)


def figures(work: Workload, samples: Samples, span: float, units: float, cpu: float,
            peak: float) -> dict[str, Any]:
    """A reader's rates over the workload: ``units`` written in all (rows, events or
    records), the steady rate between 10% and 90% of ``span``."""
    elapsed = samples[-1][0]
    steady = steady_rate(samples, span)
    return {"wall_seconds": round(elapsed, 2), "rows_per_second": round(work.rows / elapsed),
            "steady_rows_per_second": round(steady * work.rows / units) if steady else None,
            "cpu_seconds": round(cpu, 2),
            "cpu_seconds_per_million_rows": round(cpu / work.rows * 1e6, 1),
            "cores_used": round(cpu / elapsed, 2), "peak_rss_mib": peak}


def extracted(cfg: ServiceConfig) -> tuple[int, tuple[str, int]]:
    """(seqno, binlog position) the extractor last committed, from the source's tracking."""
    rows = query(settings.port(SOURCE),
                 f"SELECT seqno, eventid FROM {cfg.tracking_schema}.trep_commit_seqno "
                 "WHERE task_id = 0")
    if not rows:
        return -1, ("", 0)
    where = str(rows[0][1]).split(";", 1)[0]
    file, _, pos = where.rpartition(":")
    return int(rows[0][0]), (file, int(pos))


def run_ours(work: Workload, timeout: float) -> dict[str, Any]:
    """One extractor process from start to the workload's last transaction in the THL."""
    name = f"bcx{uuid.uuid4().hex[:6]}"
    path = service_config(name, work.schema)
    cfg = load_config(path)
    seed_start(settings.port(SOURCE), cfg.tracking_schema, "bench", at=work.start)
    log = RUN / f"{name}.log"
    started = time.monotonic()
    proc = spawn([sys.executable, "-m", "trep.extract", "-c", str(path)], log)

    def progress() -> tuple[float, bool]:
        seqno, pos = extracted(cfg)
        return max(seqno, 0), pos >= work.end

    try:
        samples, cpu, peak = sample(
            proc, started, progress, timeout, f"the extractor exited; see {log}",
            lambda _: f"the extractor did not finish within {timeout} s; see {log}")
    finally:
        stop(proc)
    events = samples[-1][1] + 1
    with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
        low, high = reader.watermarks()
    return {"reader": "tungsten-kafka", "service": name,
            **figures(work, samples, samples[-1][1], events, cpu, peak),
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


def delete_topics(kafka: str, prefix: str) -> None:
    """The topics a Debezium run made (``<prefix>.<schema>.<table>``, ``<prefix>``)."""
    admin = AdminClient({"bootstrap.servers": kafka})
    names = [t for t in admin.list_topics(timeout=10).topics
             if t == prefix or t.startswith(f"{prefix}.")]
    for name, future in (admin.delete_topics(names, operation_timeout=30).items()
                         if names else []):
        try:
            future.result(30)
        except Exception as exc:
            print(f"cleanup: {name}: {exc}", file=sys.stderr)


def connect_files(d: Path, prefix: str, work: Workload, kafka: str, schemas: bool) -> None:
    """Kafka Connect's worker, connector and log settings for one run, PERF.md's."""
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
        f"database.port={settings.port(SOURCE)}", "database.user=root",
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


def run_debezium(work: Workload, jars: Path, schemas: bool, timeout: float) -> dict[str, Any]:
    """Debezium's MariaDB connector in Kafka Connect standalone, PERF.md's settings."""
    prefix = f"dbz{uuid.uuid4().hex[:6]}"
    d = RUN / prefix
    d.mkdir(parents=True)
    kafka = f"{HOST}:{settings.port('kafka')}"
    connect_files(d, prefix, work, kafka, schemas)
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

    def progress() -> tuple[float, bool]:
        n = topic_records(consumer, topic)
        return n, n >= expected

    try:
        samples, cpu, peak = sample(
            proc, started, progress, timeout,
            f"Kafka Connect exited; see {log} and {d / 'connect.log'}",
            lambda n: f"Debezium wrote {n} of {expected} records in {timeout} s; "
                      f"see {d / 'connect.log'}")
    finally:
        stop(proc)
        consumer.close()
        delete_topics(kafka, prefix)
    return {"reader": f"debezium-{DEBEZIUM_VERSION}-schemas-{'on' if schemas else 'off'}",
            **figures(work, samples, expected, expected, cpu, peak),
            "kafka_records": samples[-1][1]}
