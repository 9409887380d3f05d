"""``make bench-compare``: this replicator beside Debezium and MariaDB's own replication.

One run, on the local stack, on one finished binlog (PERF.md's workload: ``--txns``
transactions of 10 single-row statements on a sysbench-like ``sbtest1``, 80% INSERT, 15%
UPDATE, 5% DELETE):

1. **Extraction**, alternating runs (``--runs``): this project's extractor
   (``trep-extractor``) and Debezium's MariaDB connector (Kafka Connect standalone, jars from
   Maven Central, with JsonConverter schemas on and off), each from the same binlog start
   into Kafka. The benchmark has a MariaDB source of its own (``mariadb-bench-source``,
   started and stopped here), whose binlog it resets (``RESET MASTER``) before the
   workload, so the stack's shared source and the demo's positions are left alone:
   Debezium with ``snapshot.mode=never`` streams from the first binlog file, so both read
   exactly the workload's binlog.
2. **Apply**, alternating runs: this project's SQL applier into the MariaDB target and into
   PostgreSQL, each from an empty target and an already filled THL, beside native MariaDB
   replication: a bench-only MariaDB replica (``mariadb-replica``) of the source that first
   fetches the relay log, then only its SQL thread is timed (the like-for-like comparison
   with a consumer group reading a filled THL). Every run ends with the target equal to the
   source (a digest of all rows), or the benchmark stops.
3. **Warehouse**: THL to Delta on ``local[2]`` (``warehouse_bench.py``'s end-to-end part,
   ``--warehouse-rows`` inserts and half as many updates), twice in one Spark JVM: a
   freshly started driver, whose JIT is still compiling Spark's and Delta's code, then a
   warm one (issue 33's goal: 30,000 rows/s).
4. **Latency**: the extractor and the MariaDB consumer group run live while the workload is
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

import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import options
import yaml
from compare_apply import Replica, apply_groups, drop_targets, run_apply, run_native
from compare_extract import DEBEZIUM_VERSION, debezium_jars, run_debezium, run_ours
from compare_latency import Latency, latency_sweep, pipeline_latency
from compare_workload import RUN, SOURCE, Workload, write_workload
from results import RESULTS, write_result
from service import remove_service

from stack import settings
from stack.services.mariadb import bench_source
from stack.settings import JAVA_HOME
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config

Run = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    """The command line."""

    txns: int
    runs: int
    skip_debezium: bool
    skip_native: bool
    latency_seconds: float
    latency_fractions: str
    latency_only: float | None
    pipeline_txns: int
    heartbeat_ms: int
    warehouse_rows: int
    timeout: float
    out: Path | None

    @property
    def fractions(self) -> list[float]:
        return [float(f) for f in options.comma_list(self.latency_fractions)]

    @property
    def latency(self) -> Latency:
        return Latency(self.latency_seconds, self.heartbeat_ms, self.timeout,
                       self.pipeline_txns)


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


def alternate(makers: list[Callable[[], Run]], runs: int, show: Callable[[int, Run], str]
              ) -> list[Run]:
    """``runs`` rounds of every maker, the order rotated every round (the machine's load
    varies); each result gets its round, and a line on the console."""
    results = []
    for run in range(runs):
        for i in range(len(makers)):
            res = makers[(i + run) % len(makers)]()
            res["run"] = run
            results.append(res)
            print(show(run, res), flush=True)
    return results


def extraction_runs(work: Workload, jars: Path | None, runs: int, timeout: float
                    ) -> list[Run]:
    """The extractor, and Debezium with JSON schemas on and off, alternating."""
    readers: list[Callable[[], Run]] = [lambda: run_ours(work, timeout)]
    if jars is not None:
        readers += [lambda: run_debezium(work, jars, True, timeout),
                    lambda: run_debezium(work, jars, False, timeout)]
    return alternate(readers, runs, lambda run, res: (
        f"  extract run {run}: {res['reader']}: {res['rows_per_second']} rows/s "
        f"(steady {res['steady_rows_per_second']}), "
        f"{res['cpu_seconds_per_million_rows']} CPU s/M rows"))


def apply_service(schema: str, extraction: list[Run]) -> tuple[ServiceConfig, Path, int]:
    """The last extraction run's service with the apply groups added, and its THL tail."""
    ours = [r for r in extraction if r["reader"] == "tungsten-kafka"]
    path = RUN / f"{ours[-1]['service']}.yml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()),
                                    **apply_groups(schema)}))
    cfg = load_config(path)
    with ThlReader(cfg.kafka.client(), cfg.thl_topic) as thl:
        tail_rec = thl.tail()
    return cfg, path, tail_rec.seqno if tail_rec else -1


def remove_services(extraction: list[Run]) -> None:
    """Every extraction run's service (THL topic, consumer groups, znodes, configuration):
    a run of 20,000 transactions leaves 20,000 records per run in the stack's Kafka."""
    for run in extraction:
        path = RUN / f"{run['service']}.yml" if "service" in run else None
        if path is not None and path.exists():
            try:
                remove_service(load_config(path), path)
            except Exception as exc:  # the figures matter more than the clean-up
                print(f"cleanup: {run['service']}: {exc}", file=sys.stderr)


def apply_runs(cfg: ServiceConfig, path: Path, work: Workload, tail: int,
               replica: Replica | None, runs: int, timeout: float) -> list[Run]:
    """The MariaDB groups (the default block, 200 events, and 10; the first also timed from
    ``trepctl online`` on a running process), PostgreSQL (also from ``trepctl online``) and
    the native replica, alternating."""
    appliers: list[Callable[[], Run]] = [
        lambda: run_apply(cfg, path, "mariadb", work, tail, timeout),
        lambda: run_apply(cfg, path, "mariadb_online", work, tail, timeout),
        lambda: run_apply(cfg, path, "mariadb_b10", work, tail, timeout),
        lambda: run_apply(cfg, path, "postgresql", work, tail, timeout),
        lambda: run_apply(cfg, path, "postgresql_online", work, tail, timeout)]
    if replica is not None:
        appliers.append(lambda: run_native(replica, work, timeout))
    return alternate(appliers, runs, lambda run, res: (
        f"  apply run {run}: {res['applier']}: {res['rows_per_second']} rows/s, "
        f"{res['cpu_seconds_per_million_rows']} CPU s/M rows"))


def medians(extraction: list[Run], apply: list[Run]) -> dict[str, Any]:
    """Per reader and per applier, the median of each figure over the runs."""
    def med(rows: list[Run], key: str, **match: str) -> float | None:
        return median([r.get(key) for r in rows  # type: ignore[misc]
                       if all(r.get(k) == v for k, v in match.items())])

    summary: dict[str, Any] = {}
    for name in sorted({r["reader"] for r in extraction}):
        summary[name] = {k: med(extraction, k, reader=name) for k in (
            "rows_per_second", "steady_rows_per_second", "cpu_seconds_per_million_rows",
            "cores_used", "peak_rss_mib")}
    for name in sorted({r["applier"] for r in apply}):
        summary[name] = {k: med(apply, k, applier=name) for k in (
            "rows_per_second", "steady_rows_per_second", "cpu_seconds_per_million_rows",
            "steady_cpu_seconds_per_million_rows")}
    return summary


def compare_ratios(summary: dict[str, Any]) -> dict[str, Any]:
    """This project's medians over Debezium's and the native replica's."""
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
    my10 = summary["tungsten-kafka-mariadb_b10"]
    if native:
        ratios["apply_mariadb_vs_native_sql_thread"] = ratio(my["rows_per_second"],
                                                             native["rows_per_second"])
        ratios["apply_mariadb_block10_vs_native_sql_thread"] = ratio(
            my10["rows_per_second"], native["rows_per_second"])
        ratios["apply_mariadb_cpu_per_row_vs_native"] = ratio(
            my["cpu_seconds_per_million_rows"], native["cpu_seconds_per_million_rows"])
        # The native figures hold no process start (the replica's SQL thread is timed from
        # START SLAVE SQL_THREAD on a running server): the like-for-like figures are the
        # group's from its request for ONLINE on a running process, and the steady ones.
        online = summary.get("tungsten-kafka-mariadb_online")
        if online:
            ratios["apply_mariadb_from_online_vs_native_sql_thread"] = ratio(
                online["rows_per_second"], native["rows_per_second"])
            ratios["apply_mariadb_from_online_cpu_per_row_vs_native"] = ratio(
                online["cpu_seconds_per_million_rows"], native["cpu_seconds_per_million_rows"])
        for name, group in (("mariadb", my), ("mariadb_block10", my10)):
            ratios[f"apply_{name}_steady_vs_native_sql_thread"] = ratio(
                group["steady_rows_per_second"], native["rows_per_second"])
            ratios[f"apply_{name}_steady_cpu_per_row_vs_native"] = ratio(
                group["steady_cpu_seconds_per_million_rows"],
                native["cpu_seconds_per_million_rows"])
    ratios["apply_postgresql_vs_mariadb"] = ratio(pg["rows_per_second"], my["rows_per_second"])
    # Both groups without their process's start (imports, ZooKeeper, Kafka): the appliers'
    # own rates, as the MariaDB group is set beside the SQL thread.
    my_online = summary.get("tungsten-kafka-mariadb_online")
    pg_online = summary.get("tungsten-kafka-postgresql_online")
    if my_online and pg_online:
        ratios["apply_postgresql_from_online_vs_mariadb_from_online"] = ratio(
            pg_online["rows_per_second"], my_online["rows_per_second"])
    return ratios


def warehouse_runs(rows: int) -> dict[str, Any] | None:
    """THL to Delta (``warehouse_bench.py``, a process of its own): ``rows`` inserts and
    half as many updates, applied twice in one Spark JVM (fresh, then warm); None if
    ``rows`` is 0."""
    if rows <= 0:
        return None
    print(f"warehouse: {rows + rows // 2:,} row changes THL -> Delta, a fresh then a warm "
          "driver JVM ...", flush=True)
    out = RUN / "tmp" / "warehouse.json"
    subprocess.run([sys.executable, str(Path(__file__).with_name("warehouse_bench.py")),
                    "--base-rows", "1000", "--batches", "0", "--e2e-rows", str(rows),
                    "--e2e-runs", "2", "--out", str(out)], check=True, timeout=3600)
    done = json.loads(out.read_text())
    return {"fresh_jvm": done["end_to_end"], "warm_jvm": done["end_to_end_warm"][0]}


def workload_figures(work: Workload) -> dict[str, Any]:
    """What the binlog holds."""
    return {"transactions": work.txns, "row_changes": work.rows,
            "inserts": work.inserts, "updates": work.updates,
            "deletes": work.deletes, "binlog_bytes": work.end[1] - work.start[1]
            if work.end[0] == work.start[0] else None,
            "statements_per_transaction": 10}


def report(result: Run, out: Path | None) -> None:
    """The whole result into ``out`` (by default ``bench/results/compare-<time>.json``); the
    medians, ratios, latencies and machine on the console."""
    out = out or RESULTS / f"compare-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}.json"
    write_result(result, out, echo=False)
    print(json.dumps({key: result[key] for key in (
        "medians", "ratios", "warehouse", "latency_sweep", "pipeline_max", "pipeline_latency_sweep",
        "machine")}, indent=2))
    print(f"written to {out}")


def latency_only(ceiling: float, s: Settings, before: dict[str, Any]) -> None:
    """Only the latency sweeps: at fractions of ``ceiling`` (rows/s, from an earlier run)
    and of the live pipeline's own maximum, measured again."""
    sweep = latency_sweep(ceiling, s.fractions, s.latency)
    pipeline, pipeline_sweep = pipeline_latency(s.fractions, s.latency)
    print(json.dumps({"latency_sweep": sweep, "pipeline_max": pipeline,
                      "pipeline_latency_sweep": pipeline_sweep, "machine": before},
                     indent=2))


def compare(s: Settings) -> None:
    """Extraction, apply and latency on one fresh binlog of the benchmark's own source; the
    result written and shown."""
    RUN.mkdir(parents=True, exist_ok=True)
    source = bench_source()
    source.start()
    try:
        _compare(s)
    finally:
        source.stop()


def _compare(s: Settings) -> None:
    before = machine()
    if s.latency_only is not None:
        latency_only(s.latency_only, s, before)
        return
    jars = None if s.skip_debezium else debezium_jars()
    replica = None
    if not s.skip_native:
        replica = Replica()
        replica.start()
    print(f"writing {s.txns} transactions x 10 statements into a fresh binlog ...",
          flush=True)
    work = write_workload(settings.port(SOURCE), f"bc_{uuid.uuid4().hex[:6]}",
                          s.txns)
    print(f"  {work.rows} row changes in {work.write_seconds} s, binlog {work.start} .. "
          f"{work.end}", flush=True)
    extraction = extraction_runs(work, jars, s.runs, s.timeout)
    try:
        cfg, path, tail = apply_service(work.schema, extraction)
        try:
            apply = apply_runs(cfg, path, work, tail, replica, s.runs, s.timeout)
        finally:
            drop_targets(cfg, work.schema)
    finally:
        remove_services(extraction)
    summary = medians(extraction, apply)
    ratios = compare_ratios(summary)
    # Latency at half of the pipeline's maximum: the slower of extraction and MariaDB apply.
    us, my = summary["tungsten-kafka"], summary["tungsten-kafka-mariadb"]
    ceiling = min(us["steady_rows_per_second"] or us["rows_per_second"],
                  my.get("steady_rows_per_second") or my["rows_per_second"])
    sweep = latency_sweep(ceiling, s.fractions, s.latency)
    pipeline, pipeline_sweep = pipeline_latency(s.fractions[:1], s.latency)
    if replica is not None:
        replica.stop()
    warehouse = warehouse_runs(s.warehouse_rows)
    report({
        "benchmark": "bench-compare", "when": dt.datetime.now(dt.UTC).isoformat(),
        "machine": before, "load_average_after": os.getloadavg(),
        "workload": workload_figures(work),
        "runs": s.runs, "extraction": extraction, "apply": apply, "medians": summary,
        "ratios": ratios, "warehouse": warehouse,
        "latency": sweep[0] if sweep else None, "latency_sweep": sweep,
        "pipeline_max": pipeline, "pipeline_latency_sweep": pipeline_sweep,
    }, s.out)
    shutil.rmtree(RUN / "tmp", ignore_errors=True)


@options.command(__doc__)
@click.option("--txns", type=int, default=20_000,
              help="transactions of 10 single-row statements")
@click.option("--runs", type=int, default=3, help="alternating runs of each reader")
@click.option("--skip-debezium", is_flag=True)
@click.option("--skip-native", is_flag=True)
@click.option("--latency-seconds", type=float, default=30.0)
@click.option("--latency-fractions", default="0.5,0.25,0.1",
              help="latency runs at these fractions of the measured maximum "
                   "(the first is the goal's: half of the maximum)")
@click.option("--latency-only", type=float, default=None, metavar="ROWS_PER_S",
              help="skip extraction and apply: only the latency sweeps, with this "
                   "maximum (rows/s) from an earlier run and the live pipeline's "
                   "own, measured again")
@click.option("--pipeline-txns", type=int, default=6_000,
              help="transactions written unpaced to measure the live pipeline's "
                   "own maximum (0: skip it)")
@click.option("--heartbeat-ms", type=int, default=100)
@click.option("--warehouse-rows", type=int, default=600_000, show_default=True,
              help="inserts (and half as many updates) applied THL to Delta, twice in one "
                   "Spark JVM (0: skip the warehouse); a multiple of 200,000 fills the "
                   "group's 300,000-row blocks (a last partial block waits for its 30 s)")
@options.timeout("per run, seconds")
@options.out(None)
def main(**params: Any) -> None:
    """Run the benchmark; the JSON goes to ``--out`` (or ``bench/results/``) and stdout."""
    compare(Settings(**params))


if __name__ == "__main__":
    main()
