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

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import click
import options
from group_timing import pick, time_group
from items import COLUMNS, DDL, extract_items, make_rows
from processes import ROOT
from pymongo import MongoClient
from results import write_result
from service import drop_schemas, extractor, remove_service, seed_start, stack_servers, write_config

from stack.settings import port
from trep.config import ServiceConfig, load_config

RUN = ROOT / ".run"
GROUP = "mongodb_b{block}"
SOURCE_ID = "mongodb-bench"


def write_service(service: str, schema: str, blocks: list[int], block_ms: int | None,
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
    return write_config(RUN / f"{service}.yml", service, {
        **stack_servers(),
        "extractor": extractor(service, 9500, 400, [schema], SOURCE_ID),
        "consumers": consumers,
    })


def prepare(cfg: ServiceConfig, schema: str) -> None:
    """The table on the source, and the extractor's start right after the DDL."""
    seed_start(port("mariadb-source"), cfg.tracking_schema, SOURCE_ID,
               [f"CREATE DATABASE {schema}", DDL.format(table=f"{schema}.items")])


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
        run = time_group(config, RUN / f"{cfg.service}-{group}.log", group,
                         lambda: applied_seqno(mongo, cfg), tail, timeout)
        on_target = mongo[schema]["items"].count_documents({})
    figures = run.figures(rows, tail)
    # The steady CPU leaves start-up (imports, connections) out: CPU per row while applying.
    return {"block_commit_events": cfg.consumers[group].block_commit_events,
            **pick(figures, "wall_seconds", "rows_per_second", "cpu_seconds",
                   "cpu_seconds_per_million_rows"),
            "documents_on_target": on_target,
            **pick(figures, "steady_rows_per_second", "steady_cpu_seconds_per_million_rows",
                   "startup_seconds")}


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


def measure_block(cfg: ServiceConfig, config: Path, block: int, schema: str, tail: int,
                  rows: int, repeat: int, timeout: float
                  ) -> tuple[dict[str, Any], list[float], int]:
    """``repeat`` apply runs of one block size, each followed by its raw write: the medians,
    the raw writes' seconds and how many documents they wrote."""
    group = GROUP.format(block=block)
    repeats, raw_seconds, written = [], [], 0
    for n in range(repeat):
        print(f"applying with {group} ({n + 1}/{repeat}), then the raw "
              "insert_many of the same documents ...", flush=True)
        run = measure_apply(cfg, config, group, schema, tail, rows, timeout)
        seconds, written = raw_bulk_write(schema)
        raw_seconds.append(seconds)
        run["ratio_to_raw_bulk_write"] = run["rows_per_second"] * seconds / written
        if "steady_rows_per_second" in run:
            run["steady_ratio_to_raw_bulk_write"] = \
                run["steady_rows_per_second"] * seconds / written
        repeats.append(run)
    return median_run(repeats), raw_seconds, written


def raw_summary(raw_seconds: list[float], written: int) -> dict[str, Any]:
    """The raw writes of every run: the median, and each one's rate."""
    seconds = statistics.median(raw_seconds)
    return {"seconds": round(seconds, 2), "documents": written,
            "rows_per_second": round(written / seconds),
            "each_rows_per_second": [round(written / s) for s in raw_seconds]}


def cleanup(cfg: ServiceConfig, config: Path, schema: str) -> None:
    """Remove what the benchmark created: schemas, THL topic, consumer groups, znodes."""
    drop_schemas(port("mariadb-source"), [schema, cfg.tracking_schema])
    with client() as mongo:
        mongo.drop_database(schema)
        mongo.drop_database(cfg.tracking_schema)
    remove_service(cfg, config)


def benchmark(rows: int, txn_rows: int, blocks: list[int], block_ms: int | None,
              batch_ops: int | None, repeat: int, timeout: float, keep: bool
              ) -> dict[str, Any]:
    """Fill a fresh service's THL, then the apply runs and raw writes of each block size."""
    service = f"mongo{uuid.uuid4().hex[:6]}"
    schema = f"mbench_{service}"
    config = write_service(service, schema, blocks, block_ms, batch_ops)
    cfg = load_config(config)
    data = make_rows(rows)
    runs = []
    try:
        prepare(cfg, schema)
        tail, fill_seconds = extract_items(
            cfg, config, RUN / f"{service}-extractor.log", port("mariadb-source"),
            [f"{schema}.items"], data, txn_rows)
        raw_seconds: list[float] = []
        written = 0
        for block in blocks:
            run, seconds, written = measure_block(cfg, config, block, schema, tail, rows,
                                                  repeat, timeout)
            runs.append(run)
            raw_seconds += seconds
        raw = raw_summary(raw_seconds, written)
        with client() as mongo:
            server = mongo.admin.command("buildInfo")
    finally:
        if not keep:
            cleanup(cfg, config, schema)
    return {
        "benchmark": "mongodb-apply",
        "server": f"FerretDB {server['ferretdbVersion']}" if "ferretdbVersion" in server
        else f"MongoDB {server.get('version')}",
        "rows": rows, "rows_per_transaction": txn_rows,
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


@options.command(__doc__)
@options.rows(100_000)
@options.txn_rows()
@options.blocks("1000,100")
@options.timeout("seconds one apply run may take at most")
@click.option("--block-ms", type=int, default=None,
              help="block_commit_ms of every group (default: the applier's)")
@click.option("--batch-ops", type=int, default=None,
              help="the target's batch_ops (default: the applier's)")
@click.option("--repeat", type=int, default=3,
              help="runs of each measurement (medians are reported)")
@options.keep("leave the schemas, topic and znodes behind for inspection")
@options.out("mongodb.json")
def main(rows: int, txn_rows: int, blocks: str, timeout: float, block_ms: int | None,
         batch_ops: int | None, repeat: int, keep: bool, out: Path) -> None:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    result = benchmark(rows, txn_rows, [int(b) for b in options.comma_list(blocks)],
                       block_ms, batch_ops, repeat, timeout, keep)
    write_result(result, out)


if __name__ == "__main__":
    main()
