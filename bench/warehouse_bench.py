"""Warehouse benchmark (Spark local[2] + Delta), not a test: nothing is asserted.

1. **MERGE**: a Delta table of ``--base-rows`` rows (default 1,000,000) made by the
   warehouse's own MERGE path, then ``--batches`` batches of ``--batch-rows`` row changes
   (default 100,000: 50 % updates of existing keys, 40 % inserts, 10 % deletes), each staged
   as CSV and materialized exactly as the applier does (read, ANSI casts, last operation per
   key, seqno-guarded MERGE). Beside it, a plain Delta append of the same typed rows.
2. **end to end**: ``--e2e-rows`` rows in THL events of ``--txn-rows`` rows published to a
   fresh THL topic, applied by a warehouse group in this process (its Spark is this one)
   from start to the position reaching the last seqno: rows/s from THL to Delta.
   ``--e2e-runs`` repeats it in the same Spark JVM: the first run pays the JVM's warm-up
   (its JIT compiling Spark's and Delta's code), later ones show a driver that has run.

JSON lands in ``bench/results/warehouse.json``; the console shows a summary.
"""

from __future__ import annotations

import resource
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import options
from results import write_result
from service import write_config

from consumers.warehouse import session as spark_sessions
from consumers.warehouse.applier import DEFAULT_BLOCK
from consumers.warehouse.config import SparkSettings, WarehouseTarget
from consumers.warehouse.merge import DeltaWriter
from consumers.warehouse.staging import BatchStager, StagingArea
from replicator.gc_tuning import tune_for_throughput
from stack.services.spark import warehouse_spark
from stack.settings import RUN_DIR, port
from thl_topics.event import (
    ColumnSpec,
    DataItem,
    RowAction,
    RowChange,
    ThlEvent,
)


@dataclass(frozen=True)
class Sizes:
    """The command line's sizes."""

    base_rows: int
    batch_rows: int
    batches: int
    e2e_rows: int
    e2e_block_rows: int
    txn_rows: int


SPECS = [ColumnSpec(1, "id", "INT", primary_key=True, nullable=False),
         ColumnSpec(2, "name", "VARCHAR", length=40),
         ColumnSpec(3, "amount", "DECIMAL", length=12, scale=2),
         ColumnSpec(4, "updated", "DATETIME", scale=6)]


def _row(i: int, version: int) -> list[Any]:
    return [i, f"name {i} v{version} ü", f"{(i * 7 + version) % 100000}.{i % 100:02d}",
            f"2024-01-{1 + i % 28:02d} 12:00:00.{i % 1000000:06d}"]


def _events(seqno: int, rows: list[tuple[RowAction, list[Any]]], per_event: int
            ) -> list[ThlEvent]:
    events = []
    for start in range(0, len(rows), per_event):
        chunk = rows[start:start + per_event]
        items: list[DataItem] = []
        for action, values in chunk:
            if action is RowAction.INSERT:
                items.append(RowChange(action, "bench", "items", SPECS, [], [values]))
            elif action is RowAction.DELETE:
                items.append(RowChange(action, "bench", "items", [], SPECS, [], [values]))
            else:
                items.append(RowChange(action, "bench", "items", SPECS, SPECS, [values],
                                       [values]))
        events.append(ThlEvent(seqno=seqno, epoch=0, source_id="bench",
                               event_id=f"bench:{seqno}", shard_id="bench",
                               tstamp=1_700_000_000_000_000 + seqno, data=items))
        seqno += 1
    return events


class Materializer:
    """Events staged and merged into the Delta table exactly as the applier does."""

    def __init__(self, spark: Any, base: Path, collapse: bool) -> None:
        cfg = WarehouseTarget(location=str(base))
        self.spark = spark
        self.collapse = collapse
        self.writer = DeltaWriter(spark, cfg)
        self.area = StagingArea(cfg.staging(), "bench", "merge")

    def stage(self, events: list[ThlEvent], first_segment: int = 0) -> BatchStager:
        """The events as staged CSV segments (numbered from ``first_segment``)."""
        stager = BatchStager(collapse=self.collapse)
        for event in events:
            stager.add(event)
        for i, seg in enumerate(stager.segments):
            self.area.write(seg, first_segment + i, self.spark)
        return stager

    def materialize(self, events: list[ThlEvent], app: str) -> tuple[float, float, int]:
        """(staging seconds, read + MERGE seconds, staged lines); prints the split."""
        t0 = time.monotonic()
        stager = self.stage(events)
        staged = time.monotonic() - t0
        plans = self.writer.plan(stager.segments, history=False)
        t1 = time.monotonic()
        for plan in plans:
            self.writer.read(plan)
        read = time.monotonic() - t1
        for plan in plans:
            self.writer.prepare_table(plan)
            self.writer.merge(plan, app, {"tungsten": {"low": plan.segment.low,
                                                       "high": plan.segment.high}})
        total = time.monotonic() - t1
        print(f"  read+type+collapse {read:.2f} s, MERGE {total - read:.2f} s", flush=True)
        return staged, total, sum(s.rows for s in stager.segments)

    def append(self, events: list[ThlEvent], base: Path) -> float:
        """The reference: the same typed rows appended to a plain Delta table; seconds."""
        stager = self.stage(events, 100)
        (plan_one,) = self.writer.plan(stager.segments, history=False)
        frame = self.writer.read(plan_one)
        t2 = time.monotonic()
        frame.write.format("delta").mode("append").save(f"file://{base}/append_ref")
        return time.monotonic() - t2


def batch_changes(b: int, sizes: Sizes, next_id: int
                  ) -> tuple[list[tuple[RowAction, list[Any]]], int]:
    """Batch ``b``'s row changes (50 % updates, 40 % inserts, 10 % deletes), next new id."""
    rows = []
    for k in range(sizes.batch_rows):
        kind = k % 10
        if kind < 5:
            i = (b * sizes.batch_rows + k * 13) % sizes.base_rows
            rows.append((RowAction.UPDATE, _row(i, b + 1)))
        elif kind < 9:
            rows.append((RowAction.INSERT, _row(next_id, 0)))
            next_id += 1
        else:
            i = (b * sizes.batch_rows * 3 + k * 17) % sizes.base_rows
            rows.append((RowAction.DELETE, _row(i, 0)))
    return rows, next_id


def build_base(merger: Materializer, base_rows: int) -> tuple[int, float]:
    """The base table through the same path (inserts only): (next seqno, seconds)."""
    seqno, t0 = 0, time.monotonic()
    for start in range(0, base_rows, 250_000):
        rows = [(RowAction.INSERT, _row(i, 0))
                for i in range(start, min(base_rows, start + 250_000))]
        events = _events(seqno, rows, 1000)
        seqno += len(events)
        merger.materialize(events, "bench.base")
    return seqno, time.monotonic() - t0


def merge_bench(sizes: Sizes, spark: Any, base: Path, collapse: bool) -> dict[str, Any]:
    """The base table, then each batch merged beside a plain append of it."""
    merger = Materializer(spark, base, collapse)
    seqno, base_s = build_base(merger, sizes.base_rows)
    results: list[dict[str, float]] = []
    next_id = sizes.base_rows
    n = sizes.batch_rows
    for b in range(sizes.batches):
        rows, next_id = batch_changes(b, sizes, next_id)
        events = _events(seqno, rows, 100)
        seqno += len(events)
        staged, merged, lines = merger.materialize(events, "bench.batches")
        append_s = merger.append(events, base)
        results.append({"row_changes": n, "staged_lines": lines,
                        "stage_s": round(staged, 3), "merge_s": round(merged, 3),
                        "merge_rows_per_s": round(n / merged),
                        "append_s": round(append_s, 3),
                        "append_rows_per_s": round(n / append_s)})
        print(f"batch {b}: {n:,} row changes merged in {merged:.2f} s "
              f"({n / merged:,.0f} rows/s); staging {staged:.2f} s; plain "
              f"append {append_s:.2f} s ({n / append_s:,.0f} rows/s)", flush=True)
    count = spark.read.format("delta").load(f"file://{base}/bench/items").count()
    return {"base_rows": sizes.base_rows, "base_build_s": round(base_s, 1),
            "final_rows": count, "batches": results}


def _spark() -> dict[str, object]:
    """The stack's Spark settings with the JVM's own JIT (C2) and Spark's code generation,
    as a production driver has them: the stack's quick JVM flags and interpreted SQL suit
    short test runs on small blocks, not a measurement."""
    return warehouse_spark("local[2]", quick_jvm=False, interpreted=False)


def e2e_bench(sizes: Sizes, base: Path, collapse: bool) -> dict[str, Any]:
    """THL events into a fresh topic, applied by a warehouse group in this process."""
    from stack.services.kafka import Kafka
    from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
    from thl_topics.producer import ThlProducer
    from trep.config import load_config
    from trep.runner import Runner

    name = f"wb{uuid.uuid4().hex[:8]}"
    kafka = Kafka()
    config = write_config(base / f"{name}.yml", name, {
        "kafka": {"bootstrap_servers": kafka.bootstrap},
        "zookeeper": {"hosts": f"127.0.0.1:{port('zookeeper')}"},
        "source": {"host": "127.0.0.1", "port": 1, "user": "root", "password": ""},
        "consumers": {"w": {"target": {"type": "warehouse", "location": str(base / name),
                                       "spark": _spark(),
                                       # Kept files hold every operation: not collapsed.
                                       "keep_staging": not collapse},
                            "block_commit_rows": sizes.e2e_block_rows,
                            "block_commit_ms": 30000}}})
    cfg = load_config(config)
    ensure_thl_topic(kafka.admin(), ThlTopicSpec(cfg.thl_topic))
    producer = ThlProducer(kafka.bootstrap, cfg.thl_topic, f"bench-{name}")
    rows = [(RowAction.INSERT, _row(i, 0)) for i in range(sizes.e2e_rows)]
    rows += [(RowAction.UPDATE, _row(i, 1)) for i in range(0, sizes.e2e_rows, 2)]
    events = _events(0, rows, sizes.txn_rows)
    for event in events:
        producer.publish(event)
        if event.seqno % 50 == 49:
            producer.commit()
    producer.commit()
    producer.close()
    last = events[-1].seqno
    runner = Runner(cfg, extractor=False, consumers=["w"])
    runtime = runner.runtimes[0]
    t0 = time.monotonic()
    runner.start()
    while runtime.status.appliedLastSeqno < last:
        if runtime.status.state == "OFFLINE:ERROR":
            raise SystemExit(f"the group failed: {runtime.status.pendingExceptionMessage}")
        time.sleep(0.05)
    wall = time.monotonic() - t0
    runner.stop()
    runner.wait()
    kafka.admin().delete_topics([cfg.thl_topic])
    return {"row_changes": len(rows), "events": len(events),
            "block_rows": sizes.e2e_block_rows, "wall_s": round(wall, 2),
            "rows_per_s": round(len(rows) / wall),
            # The group's Python side (staging holds a block's lines), the bench's included.
            "python_max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}


@options.command(__doc__)
@click.option("--base-rows", type=int, default=1_000_000)
@click.option("--batch-rows", type=int, default=100_000)
@click.option("--batches", type=int, default=3)
@click.option("--e2e-rows", type=int, default=200_000)
@click.option("--e2e-block-rows", type=int, default=DEFAULT_BLOCK.rows)
@options.txn_rows(100, help=None)
@click.option("--skip-e2e", is_flag=True)
@click.option("--e2e-runs", type=int, default=1, show_default=True,
              help="end-to-end runs one after another in the same Spark JVM: the first "
                   "pays the JVM's warm-up (its JIT compiles Spark's and Delta's code: "
                   "about 40 CPU s on this machine's 2 cores), the later ones show the "
                   "rate of a driver that has been running")
@options.out("warehouse.json")
@click.option("--collapse/--no-collapse", default=True,
              help="stage each key's last operation only (the applier's default), or every "
                   "one and let Spark rank them (as before 2026-11-28)")
def main(base_rows: int, batch_rows: int, batches: int, e2e_rows: int, e2e_block_rows: int,
         txn_rows: int, skip_e2e: bool, e2e_runs: int, out: Path, collapse: bool) -> None:
    """Run the benchmark; the JSON goes to ``--out`` (``bench/results/warehouse.json``)."""
    sizes = Sizes(base_rows, batch_rows, batches, e2e_rows, e2e_block_rows, txn_rows)
    base = RUN_DIR / "warehouse-bench"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    # The applier's own session settings (consumers/warehouse/session.py), on local[2].
    spark = spark_sessions.acquire(SparkSettings.model_validate(_spark()))
    result: dict[str, Any] = {"spark": "local[2]", "collapse": collapse,
                              "merge": merge_bench(sizes, spark, base, collapse)}
    if not skip_e2e:
        # The collector set as trep-run sets it for its groups (replicator/gc_tuning.py).
        tune_for_throughput()
        runs = []
        for run in range(e2e_runs):
            e2e = e2e_bench(sizes, base, collapse)
            runs.append(e2e)
            print(f"end to end{' (JVM warm)' if run else ''}: {e2e['row_changes']:,} row "
                  f"changes THL -> Delta in {e2e['wall_s']} s ({e2e['rows_per_s']:,} rows/s; "
                  f"Python at most {e2e['python_max_rss_mib']} MiB)")
        result["end_to_end"] = runs[0]
        if len(runs) > 1:
            result["end_to_end_warm"] = runs[1:]
    write_result(result, out, echo=False)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
