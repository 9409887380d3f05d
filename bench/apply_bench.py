"""Apply benchmark: THL events into the MariaDB target and PostgreSQL, next to a bulk insert.

``make bench`` runs it against the local stack. Method, on a fresh service:

1. create ``abench_<service>.items`` (primary key, int, varchar, decimal, datetime) on the
   source and, by hand, on both targets; seed the source's ``trep_commit_seqno`` right after
   the DDL, so the THL holds the rows only;
2. start the extractor alone (``trep-run --no-consumers``), commit ``--rows`` rows as
   transactions of ``--txn-rows`` rows, wait until the THL holds them all, stop it;
3. for each target and each ``--blocks`` value (``block_commit_events``): empty the target
   table, clear the stored position, start that consumer group alone
   (``trep-run --no-extractor --consumer NAME``) and time it from process start until
   ``trep_commit_seqno`` on the target reaches the THL tail (polled every 50 ms; it is
   written in the same transaction as the rows, so it is exact to the poll);
4. as the reference, insert the same rows into a fresh table on each target with the
   driver's ``executemany`` in one transaction.

Reported per run: wall seconds (including process start-up, ZooKeeper, Kafka and the epoch
handshake), rows/s and events/s on that wall time, the steady rate (first to last block
commit), CPU seconds of the consumer process, and the ratio to the bulk insert's rows/s.
Everything the benchmark created (schemas, THL topic, consumer groups, znodes) is removed
afterwards. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import sqlalchemy as sa
import yaml
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError

from consumers.sql.config import SqlTarget
from replicator.tracking import CommitSeqno, CommitSeqnoTable
from replicator.zk import connect
from thl_topics.errors import ThlTopicMissing
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
BOOTSTRAP = "127.0.0.1:19092"
ZOOKEEPER = "127.0.0.1:12181"
COLUMNS = ("id", "qty", "label", "price", "created")
MARIADB_DDL = ("CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, qty INT NOT NULL, "
               "label VARCHAR(64) NOT NULL, price DECIMAL(12,2) NOT NULL, "
               "created DATETIME NOT NULL)")
PG_DDL = ("CREATE TABLE {table} (id integer NOT NULL PRIMARY KEY, qty integer NOT NULL, "
          "label varchar(64) NOT NULL, price numeric(12,2) NOT NULL, created timestamp NOT NULL)")

Row = tuple[int, int, str, decimal.Decimal, dt.datetime]


@dataclass(frozen=True)
class Ports:
    """Where the servers of the local stack listen."""

    source: int
    target: int
    pg: int


def make_rows(count: int) -> list[Row]:
    """``count`` seeded rows: the source workload and the bulk-insert reference alike."""
    rng = random.Random(42)
    base = dt.datetime(2024, 1, 1)  # noqa: DTZ001 - a DATETIME column is naive
    return [(i, rng.randint(0, 10_000), f"item {i} {rng.getrandbits(64):016x}",
             decimal.Decimal(rng.randrange(0, 10**9)).scaleb(-2),
             base + dt.timedelta(seconds=rng.randrange(0, 365 * 86400)))
            for i in range(1, count + 1)]


def _mysql(port: int, autocommit: bool = False) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="",
                           charset="utf8mb4", autocommit=autocommit)


def _pg(port: int) -> psycopg.Connection[Any]:
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                           options="-c timezone=UTC", autocommit=True)


def write_config(service: str, schema: str, ports: Ports, blocks: Sequence[int]) -> Path:
    """The benchmark service: one consumer group per target and block size."""
    consumers: dict[str, Any] = {}
    for block in blocks:
        consumers[f"mariadb_b{block}"] = {
            "target": {"type": "sql", "url": f"mysql+pymysql://root@127.0.0.1:{ports.target}/"},
            "block_commit_events": block}
        consumers[f"postgresql_b{block}"] = {
            "target": {"type": "sql", "statements": "skip",
                       "url": f"postgresql+psycopg://postgres@127.0.0.1:{ports.pg}/postgres"},
            "block_commit_events": block}
    path = ROOT / ".run" / f"{service}.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({
        "service": service,
        "kafka": {"bootstrap_servers": BOOTSTRAP},
        "zookeeper": {"hosts": ZOOKEEPER},
        "source": {"host": "127.0.0.1", "port": ports.source, "user": "root",
                   "password": ""},
        "extractor": {
            # Its own replication client id: the source drops the older of two clients that
            # announce the same one (the demo and the extraction benchmark use theirs).
            "server_id": 9000 + int(service[-4:], 16) % 1000,
            "source_id": "apply-bench",
            "filters": {"replicate": [f"{schema}.*"]}},
        "consumers": consumers,
    }))
    return path


def prepare(cfg: ServiceConfig, schema: str, ports: Ports) -> None:
    """The table on the three servers, and the extractor's start right after the DDL."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{ports.source}/")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    with engine.begin() as sa_conn:
        sa_conn.execute(sa.text(f"CREATE DATABASE {schema}"))
        sa_conn.execute(sa.text(MARIADB_DDL.format(table=f"{schema}.items")))
        # The tracking schema too, before the position is taken: the extractor keeps
        # statements on its own tracking schema (its filter lets tungsten_<service>.heartbeat
        # through), and a replayed CREATE TABLE of it fails on targets that already have it.
        tracking.create(sa_conn)
        status = sa_conn.execute(sa.text("SHOW MASTER STATUS")).first()
        if status is None:
            raise SystemExit("the source has no binary log")
        file, pos = status[0], int(status[1])
        # Seed the tracking table so the extractor starts where the rows start: the DDL stays
        # out of the THL and both targets get the same hand-made table.
        tracking.write(sa_conn, CommitSeqno(seqno=-1, epoch=0, eventid=f"{file}:{pos:016d};0",
                                            source_id="apply-bench"))
    engine.dispose()
    conn = _mysql(ports.target)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(MARIADB_DDL.format(table=f"{schema}.items"))
    conn.commit()
    conn.close()
    with _pg(ports.pg) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"'.encode())
        pg.execute(PG_DDL.format(table=f'"{schema}".items').encode())


def thl_tail(cfg: ServiceConfig) -> tuple[int, str | None]:
    """Seqno (-1: none yet) and source GTID of the last event in the THL."""
    try:
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            tail = reader.tail()
    except ThlTopicMissing:
        return -1, None
    if tail is None or tail.event is None:
        return -1, None
    return tail.seqno, tail.event.metadata.get("gtid")


def _gtid_seq(gtid: str) -> tuple[int, int]:
    """(domain, sequence) of a MariaDB GTID ``domain-server-sequence``."""
    domain, _, seq = gtid.split("-")
    return int(domain), int(seq)


def start_runner(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A ``trep-run`` process for this service, its output in ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "trep.runner", "-c", str(config),
                                 *args], cwd=ROOT, stdout=out, stderr=out)


def stop_runner(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as an operator would; SIGKILL only if it does not stop within a minute."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def fill_thl(cfg: ServiceConfig, config: Path, schema: str, rows: list[Row], txn_rows: int,
             port: int) -> tuple[int, float]:
    """Extract the workload into the THL with the extractor alone; (tail seqno, seconds)."""
    log = ROOT / ".run" / f"{cfg.service}-extractor.log"
    started = time.monotonic()
    proc = start_runner(config, log, "--no-consumers")
    try:
        conn = _mysql(port)
        insert = (f"INSERT INTO {schema}.items ({', '.join(COLUMNS)}) "
                  "VALUES (%s, %s, %s, %s, %s)")
        with conn.cursor() as cur:
            for start in range(0, len(rows), txn_rows):
                cur.executemany(insert, rows[start:start + txn_rows])
                conn.commit()
            cur.execute("SELECT @@last_gtid")
            found = cur.fetchone()
        conn.close()
        if found is None or not found[0]:
            raise SystemExit("the source reports no GTID for the workload")
        # Wait for the last transaction's GTID, not a seqno: the THL also holds statements
        # the extractor itself caused (CREATE SCHEMA IF NOT EXISTS of its tracking schema).
        want = _gtid_seq(str(found[0]))
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the extractor exited; see {log}")
            last, gtid = thl_tail(cfg)
            if gtid is not None and _gtid_seq(gtid)[0] == want[0] and \
                    _gtid_seq(gtid)[1] >= want[1]:
                break
            time.sleep(0.5)
        return last, time.monotonic() - started
    finally:
        stop_runner(proc)


def _sql(cfg: ServiceConfig, group: str) -> SqlTarget:
    target = cfg.consumers[group].target
    if not isinstance(target, SqlTarget):
        raise TypeError(f"{group} is not a SQL group")
    return target


def reset_target(cfg: ServiceConfig, group: str, schema: str) -> sa.Engine:
    """Empty the target table and clear the stored position; an autocommit engine to poll."""
    engine = sa.create_engine(_sql(cfg, group).engine_url(), isolation_level="AUTOCOMMIT")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    q = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        tracking.create(conn)
        conn.execute(sa.delete(tracking.table))
        conn.execute(sa.text(f"DELETE FROM {q(schema)}.items"))
    return engine


def applied_seqno(engine: sa.Engine, cfg: ServiceConfig) -> int:
    """``trep_commit_seqno.seqno`` on the target (-1: nothing committed yet)."""
    table = CommitSeqnoTable(cfg.tracking_schema).table
    with engine.connect() as conn:
        value = conn.execute(sa.select(table.c.seqno).where(table.c.task_id == 0)).scalar()
    return -1 if value is None else int(value)


def measure_apply(cfg: ServiceConfig, config: Path, group: str, schema: str, tail: int,
                  rows: int, timeout: float) -> dict[str, Any]:
    """Run one consumer group alone from an empty target to the THL tail, timed."""
    engine = reset_target(cfg, group, schema)
    log = ROOT / ".run" / f"{cfg.service}-{group}.log"
    started = time.monotonic()
    proc = start_runner(config, log, "--no-extractor", "--consumer", group)
    first_commit: tuple[float, int] | None = None
    cpu = 0.0
    now = started
    try:
        while True:
            seqno = applied_seqno(engine, cfg)
            now = time.monotonic()
            if seqno >= 0 and first_commit is None:
                first_commit = (now, seqno)
            if seqno >= tail:
                break
            if proc.poll() is not None:
                raise SystemExit(f"consumer group {group} exited; see {log}")
            if now - started > timeout:
                raise SystemExit(f"consumer group {group} did not reach seqno {tail} within "
                                 f"{timeout} s; see {log}")
            cpu = cpu_seconds(proc.pid)
            time.sleep(0.05)
        elapsed = now - started
        cpu = cpu_seconds(proc.pid)
    finally:
        stop_runner(proc)
    q = engine.dialect.identifier_preparer.quote
    with engine.connect() as conn:
        on_target = conn.execute(sa.text(f"SELECT COUNT(*) FROM {q(schema)}.items")).scalar()
    engine.dispose()
    events = tail + 1
    result: dict[str, Any] = {
        "target": group.rsplit("_b", 1)[0],
        "block_commit_events": cfg.consumers[group].block_commit_events,
        "wall_seconds": round(elapsed, 2),
        "rows_per_second": round(rows / elapsed),
        "events_per_second": round(events / elapsed),
        "cpu_seconds": round(cpu, 2),
        "rows_on_target": on_target,
    }
    if first_commit is not None and now > first_commit[0]:
        # From the first block seen committed to the last: start-up and handshake left out.
        steady_events = tail - first_commit[1]
        result["steady_rows_per_second"] = round(
            rows * steady_events / events / (now - first_commit[0]))
        result["startup_seconds"] = round(first_commit[0] - started, 2)
    return result


def bulk_insert_mariadb(port: int, schema: str, rows: list[Row]) -> float:
    """Seconds for one executemany of every row into a fresh table, one transaction."""
    conn = _mysql(port)
    try:
        with conn.cursor() as cur:
            cur.execute(MARIADB_DDL.format(table=f"{schema}.items_ref"))
            started = time.monotonic()
            cur.executemany(f"INSERT INTO {schema}.items_ref ({', '.join(COLUMNS)}) "
                            "VALUES (%s, %s, %s, %s, %s)", rows)
            conn.commit()
            return time.monotonic() - started
    finally:
        conn.close()


def bulk_insert_postgresql(port: int, schema: str, rows: list[Row]) -> float:
    """Seconds for one executemany of every row into a fresh table, one transaction."""
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                         options="-c timezone=UTC") as conn:
        conn.execute(PG_DDL.format(table=f'"{schema}".items_ref').encode())
        conn.commit()
        started = time.monotonic()
        with conn.cursor() as cur:
            cur.executemany(f'INSERT INTO "{schema}".items_ref ({", ".join(COLUMNS)}) '
                            "VALUES (%s, %s, %s, %s, %s)", rows)
        conn.commit()
        return time.monotonic() - started


def cleanup(cfg: ServiceConfig, config: Path, schema: str, ports: Ports) -> None:
    """Remove what the benchmark created: schemas, THL topic, consumer groups, znodes."""
    for port in (ports.source, ports.target):
        conn = _mysql(port, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"DROP DATABASE IF EXISTS {cfg.tracking_schema}")
        conn.close()
    with _pg(ports.pg) as pg:
        pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
        pg.execute(f'DROP SCHEMA IF EXISTS "{cfg.tracking_schema}" CASCADE'.encode())
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
    parser.add_argument("--rows", type=int, default=20_000, help="rows in the THL")
    parser.add_argument("--txn-rows", type=int, default=10,
                        help="rows per source transaction (one THL event each)")
    parser.add_argument("--blocks", default="10,100",
                        help="block_commit_events values to measure, comma-separated")
    parser.add_argument("--targets", default="mariadb,postgresql",
                        help="targets to measure, comma-separated")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one apply run may take at most")
    parser.add_argument("--source-port", type=int, default=13306)
    parser.add_argument("--target-port", type=int, default=13307)
    parser.add_argument("--pg-port", type=int, default=15432)
    parser.add_argument("--keep", action="store_true",
                        help="leave the schemas, topic and znodes behind for inspection")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "apply.json")
    args = parser.parse_args()
    blocks = [int(b) for b in args.blocks.split(",") if b.strip()]
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - {"mariadb", "postgresql"}
    if unknown:
        parser.error(f"unknown target(s): {', '.join(sorted(unknown))}")
    ports = Ports(args.source_port, args.target_port, args.pg_port)

    service = f"apply{uuid.uuid4().hex[:6]}"
    schema = f"abench_{service}"
    config = write_config(service, schema, ports, blocks)
    cfg = load_config(config)
    rows = make_rows(args.rows)
    try:
        prepare(cfg, schema, ports)
        print(f"service {service}: extracting {args.rows} rows in transactions of "
              f"{args.txn_rows} rows ...", flush=True)
        tail, fill_seconds = fill_thl(cfg, config, schema, rows, args.txn_rows, ports.source)
        runs = []
        for target in targets:
            for block in blocks:
                group = f"{target}_b{block}"
                print(f"applying with {group} ...", flush=True)
                runs.append(measure_apply(cfg, config, group, schema, tail, args.rows,
                                          args.timeout))
        reference: dict[str, dict[str, float]] = {}
        for target in targets:
            print(f"bulk insert into {target} ...", flush=True)
            seconds = (bulk_insert_mariadb(ports.target, schema, rows) if target == "mariadb"
                       else bulk_insert_postgresql(ports.pg, schema, rows))
            reference[target] = {"seconds": round(seconds, 2),
                                 "rows_per_second": round(args.rows / seconds)}
        for run in runs:
            run["bulk_insert_rows_per_second"] = reference[run["target"]]["rows_per_second"]
            # Against the bulk insert, the wall-clock rate includes process start-up.
            run["ratio_to_bulk_insert"] = round(
                run["rows_per_second"] / run["bulk_insert_rows_per_second"], 3)
            if "steady_rows_per_second" in run:
                run["steady_ratio_to_bulk_insert"] = round(
                    run["steady_rows_per_second"] / run["bulk_insert_rows_per_second"], 3)
    finally:
        if not args.keep:
            cleanup(cfg, config, schema, ports)
    result = {
        "benchmark": "apply",
        "rows": args.rows, "rows_per_transaction": args.txn_rows,
        "transactions": -(-args.rows // args.txn_rows),
        # THL events applied: the transactions plus the extractor's own CREATE SCHEMA IF NOT
        # EXISTS of its tracking schema, which it extracts at start-up.
        "events": tail + 1,
        "thl_fill_seconds": round(fill_seconds, 2),
        "runs": runs,
        "bulk_insert": reference,
        "note": "wall time and its rates include consumer start-up (imports, ZooKeeper, Kafka, "
                "epoch handshake); steady rates run from the first block commit to the last. "
                "Bulk insert: the driver's executemany of the same rows in one transaction.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
