"""MongoDB apply benchmark: THL events into the stack's MongoDB-wire server, beside a raw
pymongo bulk write of the same documents.

``make bench`` runs it against the local stack (FerretDB here; ports from
``stack.settings.port``). Method, on a fresh service:

1. create ``mbench_<service>.items`` (primary key, int, varchar, decimal, datetime) on the
   source and seed the source's ``trep_commit_seqno`` right after the DDL, so the THL holds
   the rows only;
2. start the extractor alone (``trep-run --no-consumers``), commit ``--rows`` rows as
   transactions of ``--txn-rows`` rows, wait until the THL holds them all, stop it;
3. for each ``--blocks`` value: drop the collection, clear the stored position, start the
   consumer group alone (``trep-run --no-extractor --consumer NAME``) and time it until
   ``trep_commit_seqno`` on the target reaches the THL tail (polled every 50 ms; the
   position is written right after the block's documents);
4. as the reference, right after each apply run, the documents the applier wrote (read back
   from the target, so they are the same bytes) are written again into a fresh collection
   with one pymongo ``insert_many`` (ordered), the fastest way pymongo has to put them there.

Each measurement is repeated ``--repeat`` times, each apply run followed by its raw write,
and the medians are reported; the ratios are the medians of each apply run's ratio to the
raw write right after it. The machines this runs on are shared: one run of either can be
off by half, and a pair sees about the same load.
Reported per block size: wall seconds (including process start-up, ZooKeeper, Kafka and the
epoch handshake), rows/s on that wall time, the steady rate (first to last block commit), CPU
seconds of the consumer process, per million rows overall and while steady (start-up left
out), and the ratios to the raw write.
Everything the benchmark created is removed afterwards. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from apply_bench import (
    COLUMNS,
    MARIADB_DDL,
    cpu_seconds,
    fill_thl,
    make_rows,
    start_runner,
    stop_runner,
)
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError
from pymongo import MongoClient

from replicator.tracking import CommitSeqno, CommitSeqnoTable
from replicator.zk import connect
from stack.settings import port
from trep.config import ServiceConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
GROUP = "mongodb_b{block}"


def write_config(service: str, schema: str, blocks: list[int], block_ms: int | None,
                 batch_ops: int | None) -> Path:
    """The benchmark service: one MongoDB consumer group per block size."""
    target: dict[str, Any] = {"type": "mongodb",
                              "url": f"mongodb://127.0.0.1:{port('ferretdb')}/"}
    if batch_ops is not None:
        target["batch_ops"] = batch_ops
    consumers: dict[str, Any] = {GROUP.format(block=b): {
        "target": target, "block_commit_events": b} for b in blocks}
    if block_ms is not None:
        for group in consumers.values():
            group["block_commit_ms"] = block_ms
    path = ROOT / ".run" / f"{service}.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({
        "service": service,
        "kafka": {"bootstrap_servers": f"127.0.0.1:{port('kafka')}"},
        "zookeeper": {"hosts": f"127.0.0.1:{port('zookeeper')}"},
        "source": {"host": "127.0.0.1", "port": port("mariadb-source"), "user": "root",
                   "password": ""},
        "extractor": {"server_id": 9500 + int(service[-4:], 16) % 400,
                      "source_id": "mongodb-bench",
                      "filters": {"replicate": [f"{schema}.*"]}},
        "consumers": consumers,
    }))
    return path


def prepare(cfg: ServiceConfig, schema: str) -> None:
    """The table on the source, and the extractor's start right after the DDL."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port('mariadb-source')}/")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {schema}"))
            conn.execute(sa.text(MARIADB_DDL.format(table=f"{schema}.items")))
            tracking.create(conn)
            status = conn.execute(sa.text("SHOW MASTER STATUS")).first()
            if status is None:
                raise SystemExit("the source has no binary log")
            tracking.write(conn, CommitSeqno(
                seqno=-1, epoch=0, eventid=f"{status[0]}:{int(status[1]):016d};0",
                source_id="mongodb-bench"))
    finally:
        engine.dispose()


def client() -> MongoClient[dict[str, Any]]:
    return MongoClient(f"mongodb://127.0.0.1:{port('ferretdb')}/",
                       serverSelectionTimeoutMS=5000)


def applied_seqno(mongo: MongoClient[dict[str, Any]], cfg: ServiceConfig) -> int:
    """``trep_commit_seqno.seqno`` on the target (-1: nothing committed yet)."""
    doc = mongo[cfg.tracking_schema]["trep_commit_seqno"].find_one({"_id": 0})
    return -1 if doc is None or doc.get("seqno") is None else int(doc["seqno"])


def measure_apply(cfg: ServiceConfig, config: Path, group: str, schema: str, tail: int,
                  rows: int, timeout: float) -> dict[str, Any]:
    """Run one consumer group alone from an empty target to the THL tail, timed."""
    with client() as mongo:
        mongo[schema].drop_collection("items")
        mongo[cfg.tracking_schema]["trep_commit_seqno"].delete_many({})
        log = ROOT / ".run" / f"{cfg.service}-{group}.log"
        started = time.monotonic()
        proc = start_runner(config, log, "--no-extractor", "--consumer", group)
        first_commit: tuple[float, int] | None = None
        cpu = first_cpu = 0.0
        now = started
        try:
            while True:
                seqno = applied_seqno(mongo, cfg)
                now = time.monotonic()
                if seqno >= 0 and first_commit is None:
                    first_commit = (now, seqno)
                    first_cpu = cpu_seconds(proc.pid)
                if seqno >= tail:
                    break
                if proc.poll() is not None:
                    raise SystemExit(f"consumer group {group} exited; see {log}")
                if now - started > timeout:
                    raise SystemExit(f"consumer group {group} did not reach seqno {tail} "
                                     f"within {timeout} s; see {log}")
                cpu = cpu_seconds(proc.pid)
                time.sleep(0.05)
            elapsed = now - started
            cpu = cpu_seconds(proc.pid)
        finally:
            stop_runner(proc)
        on_target = mongo[schema]["items"].count_documents({})
    events = tail + 1
    result: dict[str, Any] = {
        "block_commit_events": cfg.consumers[group].block_commit_events,
        "wall_seconds": round(elapsed, 2),
        "rows_per_second": round(rows / elapsed),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_million_rows": round(cpu / rows * 1e6, 1),
        "documents_on_target": on_target,
    }
    if first_commit is not None and now > first_commit[0]:
        steady_events = tail - first_commit[1]
        steady_rows = rows * steady_events / events
        result["steady_rows_per_second"] = round(steady_rows / (now - first_commit[0]))
        # Start-up (imports, connections) left out: CPU per row while applying.
        result["steady_cpu_seconds_per_million_rows"] = round(
            (cpu - first_cpu) / steady_rows * 1e6, 1)
        result["startup_seconds"] = round(first_commit[0] - started, 2)
    return result


def raw_bulk_write(schema: str) -> tuple[float, int]:
    """Seconds for one ordered ``insert_many`` of the documents the applier wrote."""
    with client() as mongo:
        docs = list(mongo[schema]["items"].find())
        mongo[schema].drop_collection("items_ref")
        started = time.monotonic()
        mongo[schema]["items_ref"].insert_many(docs, ordered=True)
        elapsed = time.monotonic() - started
        mongo[schema].drop_collection("items_ref")
        return elapsed, len(docs)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of repeated runs of one block size (and each run's steady rate)."""
    out: dict[str, Any] = {"block_commit_events": runs[0]["block_commit_events"],
                           "repeats": len(runs)}
    for key in ("wall_seconds", "rows_per_second", "steady_rows_per_second",
                "startup_seconds", "cpu_seconds", "cpu_seconds_per_million_rows",
                "steady_cpu_seconds_per_million_rows",
                "ratio_to_raw_bulk_write", "steady_ratio_to_raw_bulk_write"):
        values = [r[key] for r in runs if key in r]
        if values:
            out[key] = round(statistics.median(values), 3)
    out["documents_on_target"] = min(r["documents_on_target"] for r in runs)
    out["each_steady_rows_per_second"] = [r.get("steady_rows_per_second") for r in runs]
    out["each_steady_ratio"] = [round(r["steady_ratio_to_raw_bulk_write"], 3) for r in runs
                                if "steady_ratio_to_raw_bulk_write" in r]
    return out


def cleanup(cfg: ServiceConfig, config: Path, schema: str) -> None:
    """Remove what the benchmark created: schemas, THL topic, consumer groups, znodes."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port('mariadb-source')}/")
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {schema}"))
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {cfg.tracking_schema}"))
    finally:
        engine.dispose()
    with client() as mongo:
        mongo.drop_database(schema)
        mongo.drop_database(cfg.tracking_schema)
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
    parser.add_argument("--rows", type=int, default=100_000, help="rows in the THL")
    parser.add_argument("--txn-rows", type=int, default=10,
                        help="rows per source transaction (one THL event each)")
    parser.add_argument("--blocks", default="1000,100",
                        help="block_commit_events values to measure, comma-separated")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one apply run may take at most")
    parser.add_argument("--block-ms", type=int, default=None,
                        help="block_commit_ms of every group (default: the applier's)")
    parser.add_argument("--batch-ops", type=int, default=None,
                        help="the target's batch_ops (default: the applier's)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each measurement (medians are reported)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the schemas, topic and znodes behind for inspection")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "mongodb.json")
    args = parser.parse_args()
    blocks = [int(b) for b in args.blocks.split(",") if b.strip()]
    service = f"mongo{uuid.uuid4().hex[:6]}"
    schema = f"mbench_{service}"
    config = write_config(service, schema, blocks, args.block_ms, args.batch_ops)
    cfg = load_config(config)
    rows = make_rows(args.rows)
    runs = []
    try:
        prepare(cfg, schema)
        print(f"service {service}: extracting {args.rows} rows in transactions of "
              f"{args.txn_rows} rows ...", flush=True)
        tail, fill_seconds = fill_thl(cfg, config, schema, rows, args.txn_rows,
                                      port("mariadb-source"))
        raw_seconds: list[float] = []
        written = 0
        for block in blocks:
            group = GROUP.format(block=block)
            repeats = []
            for n in range(args.repeat):
                print(f"applying with {group} ({n + 1}/{args.repeat}), then the raw "
                      "insert_many of the same documents ...", flush=True)
                run = measure_apply(cfg, config, group, schema, tail, args.rows, args.timeout)
                seconds, written = raw_bulk_write(schema)
                raw_seconds.append(seconds)
                run["ratio_to_raw_bulk_write"] = run["rows_per_second"] * seconds / written
                if "steady_rows_per_second" in run:
                    run["steady_ratio_to_raw_bulk_write"] = \
                        run["steady_rows_per_second"] * seconds / written
                repeats.append(run)
            runs.append(median_run(repeats))
        seconds = statistics.median(raw_seconds)
        raw = {"seconds": round(seconds, 2), "documents": written,
               "rows_per_second": round(written / seconds),
               "each_rows_per_second": [round(written / s) for s in raw_seconds]}
        with client() as mongo:
            server = mongo.admin.command("buildInfo")
    finally:
        if not args.keep:
            cleanup(cfg, config, schema)
    result = {
        "benchmark": "mongodb-apply",
        "server": f"FerretDB {server['ferretdbVersion']}" if "ferretdbVersion" in server
        else f"MongoDB {server.get('version')}",
        "rows": args.rows, "rows_per_transaction": args.txn_rows,
        "events": tail + 1, "columns": list(COLUMNS),
        "thl_fill_seconds": round(fill_seconds, 2),
        "runs": runs,
        "raw_bulk_write": raw,
        "note": "wall time and its rate include consumer start-up (imports, ZooKeeper, "
                "Kafka, epoch handshake); steady rates run from the first block commit to "
                "the last. Raw bulk write: one ordered pymongo insert_many of the documents "
                "the applier wrote, into a fresh collection, right after each apply run. "
                "Ratios: median of each run's ratio to its own raw write.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
