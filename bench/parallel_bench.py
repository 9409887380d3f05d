"""Parallel apply benchmark: a four-schema workload applied to MariaDB with 1, 2 and 4 channels.

``make bench`` runs it against the local stack (ports from the stack's settings, so a slot's
environment is honoured). Method, on a fresh service:

1. four schemas ``pbench_<service>_0`` .. ``_3``, each with an ``items`` table (primary key,
   int, varchar, decimal, datetime), on the source and, by hand, on the target; the source's
   ``trep_commit_seqno`` is seeded right after the DDL, so the THL holds the rows only;
2. the extractor alone (``trep-run --no-consumers``) takes ``--rows`` rows committed as
   transactions of ``--txn-rows`` rows, each transaction in one schema, round robin; it
   stops once the THL holds the last one;
3. runs alternate the channel counts (1, 2, 4, 1, 2, 4, ... ``--repeat`` times, so a noisy
   neighbour hurts every count alike): empty the tables, clear ``trep_commit_seqno`` and
   ``trep_shard_channel``, assign schema *i* to channel *i mod N* in ``trep_shard_channel``
   (``--assign pinned``, the default: balanced whatever crc32 makes of the random schema
   names; ``--assign crc32`` leaves the default hash), start that group alone
   (``trep-run --no-extractor --consumer cN``) and time it until every channel's row of
   ``trep_commit_seqno`` reaches the THL tail (polled every 50 ms; written in the same
   transaction as the rows);
4. per run: wall seconds (process start included), rows/s, the steady rate (first commit to
   the end), CPU seconds of the consumer process; per channel count: medians, and the
   speedup of the median steady rate over one channel's.

Everything the benchmark created is removed afterwards. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import pymysql
import sqlalchemy as sa
import yaml
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError

from replicator.tracking import CommitSeqno, CommitSeqnoTable
from replicator.zk import connect
from stack.settings import port
from thl_topics.errors import ThlTopicMissing
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
SCHEMAS = 4
DDL = ("CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, qty INT NOT NULL, "
       "label VARCHAR(64) NOT NULL, price DECIMAL(12,2) NOT NULL, created DATETIME NOT NULL)")
INSERT = "INSERT INTO {table} (id, qty, label, price, created) VALUES (%s, %s, %s, %s, %s)"


def _mysql(which: str) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=port(which), user="root", password="",
                           charset="utf8mb4", autocommit=False)


def write_config(service: str, schemas: list[str], counts: list[int], block: int) -> Path:
    """One consumer group per channel count, all on the MariaDB target."""
    target = f"mysql+pymysql://root@127.0.0.1:{port('mariadb-target')}/"
    path = ROOT / ".run" / f"{service}.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({
        "service": service,
        "kafka": {"bootstrap_servers": f"127.0.0.1:{port('kafka')}"},
        "zookeeper": {"hosts": f"127.0.0.1:{port('zookeeper')}"},
        "source": {"host": "127.0.0.1", "port": port("mariadb-source"), "user": "root",
                   "password": ""},
        "extractor": {"server_id": 8000 + int(service[-4:], 16) % 1000,
                      "source_id": "parallel-bench",
                      "filters": {"replicate": [f"{s}.*" for s in schemas]}},
        "consumers": {f"c{n}": {"target": {"type": "sql", "url": target}, "channels": n,
                                "block_commit_events": block} for n in counts},
    }))
    return path


def prepare(cfg: ServiceConfig, schemas: list[str]) -> None:
    """The tables on both servers, and the extractor's start right after the DDL."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port('mariadb-source')}/")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    with engine.begin() as conn:
        for s in schemas:
            conn.execute(sa.text(f"CREATE DATABASE {s}"))
            conn.execute(sa.text(DDL.format(table=f"{s}.items")))
        tracking.create(conn)
        status = conn.execute(sa.text("SHOW MASTER STATUS")).first()
        if status is None:
            raise SystemExit("the source has no binary log")
        file, pos = status[0], int(status[1])
        tracking.write(conn, CommitSeqno(seqno=-1, epoch=0, eventid=f"{file}:{pos:016d};0",
                                         source_id="parallel-bench"))
    engine.dispose()
    target = _mysql("mariadb-target")
    with target.cursor() as cur:
        for s in schemas:
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(DDL.format(table=f"{s}.items"))
    target.commit()
    target.close()


def thl_tail(cfg: ServiceConfig) -> tuple[int, str | None]:
    """Seqno (-1: none yet) and GTID of the last event in the THL."""
    try:
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            tail = reader.tail()
    except ThlTopicMissing:
        return -1, None
    if tail is None or tail.event is None:
        return -1, None
    return tail.seqno, tail.event.metadata.get("gtid")


def start_runner(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "trep.runner", "-c", str(config),
                                 *args], cwd=ROOT, stdout=out, stderr=out)


def stop_runner(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def fill_thl(cfg: ServiceConfig, config: Path, schemas: list[str], rows: int,
             txn_rows: int) -> tuple[int, float]:
    """The workload through the extractor alone; (THL tail seqno, seconds)."""
    rng = random.Random(42)
    base = dt.datetime(2024, 1, 1)  # noqa: DTZ001 - a DATETIME column is naive
    log = ROOT / ".run" / f"{cfg.service}-extractor.log"
    started = time.monotonic()
    proc = start_runner(config, log, "--no-consumers")
    try:
        conn = _mysql("mariadb-source")
        with conn.cursor() as cur:
            for n, start in enumerate(range(1, rows + 1, txn_rows)):
                schema = schemas[n % len(schemas)]
                cur.executemany(INSERT.format(table=f"{schema}.items"), [
                    (i, rng.randint(0, 10_000), f"item {i} {rng.getrandbits(64):016x}",
                     decimal.Decimal(rng.randrange(0, 10**9)).scaleb(-2),
                     base + dt.timedelta(seconds=rng.randrange(0, 365 * 86400)))
                    for i in range(start, min(start + txn_rows, rows + 1))])
                conn.commit()
            cur.execute("SELECT @@last_gtid")
            found = cur.fetchone()
        conn.close()
        if found is None or not found[0]:
            raise SystemExit("the source reports no GTID for the workload")
        want = str(found[0])
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the extractor exited; see {log}")
            last, gtid = thl_tail(cfg)
            if gtid == want:
                return last, time.monotonic() - started
            time.sleep(0.5)
    finally:
        stop_runner(proc)


def reset_target(cfg: ServiceConfig, schemas: list[str], channels: int, assign: str
                 ) -> sa.Engine:
    """Empty tables, no position, the shard assignment of this run; an engine to poll."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port('mariadb-target')}/",
                              isolation_level="AUTOCOMMIT")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    shard_channel = tracking.metadata.tables[f"{cfg.tracking_schema}.trep_shard_channel"]
    with engine.begin() as conn:
        tracking.create(conn)
        conn.execute(sa.delete(tracking.table))
        conn.execute(sa.delete(shard_channel))
        for s in schemas:
            conn.execute(sa.text(f"DELETE FROM {s}.items"))
        if assign == "pinned":
            conn.execute(sa.insert(shard_channel), [{"shard_id": s, "channel": i % channels}
                                                    for i, s in enumerate(schemas)])
    return engine


def progress(engine: sa.Engine, cfg: ServiceConfig, channels: int) -> int:
    """The group's restart point: the lowest channel's seqno (-1 until every channel has
    a row)."""
    table = CommitSeqnoTable(cfg.tracking_schema).table
    with engine.connect() as conn:
        count, low = conn.execute(sa.select(sa.func.count(), sa.func.min(table.c.seqno))).one()
    return int(low) if count == channels and low is not None else -1


def measure(cfg: ServiceConfig, config: Path, schemas: list[str], channels: int, tail: int,
            rows: int, assign: str, timeout: float) -> dict[str, Any]:
    """One group from empty tables to the THL tail, timed."""
    engine = reset_target(cfg, schemas, channels, assign)
    group = f"c{channels}"
    log = ROOT / ".run" / f"{cfg.service}-{group}.log"
    started = time.monotonic()
    proc = start_runner(config, log, "--no-extractor", "--consumer", group)
    first: tuple[float, int] | None = None
    now = started
    try:
        while True:
            seqno = progress(engine, cfg, channels)
            now = time.monotonic()
            if seqno >= 0 and first is None:
                first = (now, seqno)
            if seqno >= tail:
                break
            if proc.poll() is not None:
                raise SystemExit(f"consumer group {group} exited; see {log}")
            if now - started > timeout:
                raise SystemExit(f"{group} did not reach seqno {tail} in {timeout} s; see {log}")
            time.sleep(0.05)
        cpu = cpu_seconds(proc.pid)
    finally:
        stop_runner(proc)
    with engine.connect() as conn:
        on_target = sum(int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {s}.items")).scalar()
                            or 0) for s in schemas)
    engine.dispose()
    elapsed = now - started
    result: dict[str, Any] = {"channels": channels, "wall_seconds": round(elapsed, 2),
                              "rows_per_second": round(rows / elapsed),
                              "cpu_seconds": round(cpu, 2), "rows_on_target": on_target}
    if first is not None and now > first[0]:
        events = tail + 1
        result["steady_rows_per_second"] = round(rows * (tail - first[1]) / events
                                                 / (now - first[0]))
        result["startup_seconds"] = round(first[0] - started, 2)
    return result


def cleanup(cfg: ServiceConfig, config: Path, schemas: list[str]) -> None:
    """Remove what the benchmark created: schemas, THL topic, consumer groups, znodes."""
    for which in ("mariadb-source", "mariadb-target"):
        conn = _mysql(which)
        with conn.cursor() as cur:
            for s in [*schemas, cfg.tracking_schema]:
                cur.execute(f"DROP DATABASE IF EXISTS {s}")
        conn.close()
    admin = AdminClient(cfg.kafka.client())
    groups = [cfg.group_id(name) for name in cfg.consumers]
    futures = {**admin.delete_topics([cfg.thl_topic], operation_timeout=30),
               **admin.delete_consumer_groups(groups, request_timeout=30)}
    for name, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:  # a group that never committed does not exist: fine
            print(f"cleanup: {name}: {exc}", file=sys.stderr)
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s)
    try:
        zk.delete(f"{cfg.zookeeper.root.rstrip('/')}/{cfg.service}", recursive=True)
    except NoNodeError:
        pass
    finally:
        zk.stop()
        zk.close()
    config.unlink(missing_ok=True)


def main() -> int:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=40_000, help="rows in the THL")
    parser.add_argument("--txn-rows", type=int, default=10,
                        help="rows per source transaction (one THL event each)")
    parser.add_argument("--channels", default="1,2,4", help="channel counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per channel count")
    parser.add_argument("--block", type=int, default=10, help="block_commit_events")
    parser.add_argument("--assign", choices=("pinned", "crc32"), default="pinned",
                        help="shard assignment: schema i on channel i mod N, or the hash")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="leave everything behind")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "parallel.json")
    args = parser.parse_args()
    counts = [int(c) for c in args.channels.split(",") if c.strip()]

    service = f"par{uuid.uuid4().hex[:6]}"
    schemas = [f"pbench_{service}_{i}" for i in range(SCHEMAS)]
    config = write_config(service, schemas, counts, args.block)
    cfg = load_config(config)
    runs: list[dict[str, Any]] = []
    try:
        prepare(cfg, schemas)
        print(f"service {service}: extracting {args.rows} rows over {SCHEMAS} schemas ...",
              flush=True)
        tail, fill_seconds = fill_thl(cfg, config, schemas, args.rows, args.txn_rows)
        for round_ in range(args.repeat):
            for n in counts:
                print(f"round {round_ + 1}: {n} channel(s) ...", flush=True)
                runs.append(measure(cfg, config, schemas, n, tail, args.rows, args.assign,
                                    args.timeout))
                print(json.dumps(runs[-1]), flush=True)
    finally:
        if not args.keep:
            cleanup(cfg, config, schemas)
    summary: dict[str, Any] = {}
    for n in counts:
        mine = [r for r in runs if r["channels"] == n]
        summary[str(n)] = {
            "median_rows_per_second": round(statistics.median(
                r["rows_per_second"] for r in mine)),
            "median_steady_rows_per_second": round(statistics.median(
                r.get("steady_rows_per_second", 0) for r in mine)),
            "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in mine), 2),
        }
    base = summary[str(counts[0])]["median_steady_rows_per_second"] or 1
    for n in counts:
        summary[str(n)]["steady_speedup"] = round(
            summary[str(n)]["median_steady_rows_per_second"] / base, 2)
    result = {
        "benchmark": "parallel-apply",
        "target": "mariadb",
        "rows": args.rows, "rows_per_transaction": args.txn_rows, "schemas": SCHEMAS,
        "events": tail + 1, "block_commit_events": args.block, "assign": args.assign,
        "crc32_assignment": {str(n): [zlib.crc32(s.encode()) % n for s in schemas]
                             for n in counts},
        "cpus": os.cpu_count(), "thl_fill_seconds": round(fill_seconds, 2),
        "runs": runs, "summary": summary,
        "note": "runs alternate the channel counts; medians per count. Wall rates include "
                "process start-up and the handshake; steady rates run from the first commit "
                "(every channel has a row) to the THL tail.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
