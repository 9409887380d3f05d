"""bench-compare's latency runs: the extractor and the MariaDB consumer group running live
while the workload is written at a fraction of a measured maximum, with a heartbeat row
every ``heartbeat_ms``; the target records each heartbeat's lag.
"""

from __future__ import annotations

import datetime as dt
import random
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pymysql
import sqlalchemy as sa
from compare_apply import applied, apply_groups, drop_targets
from compare_workload import (
    RUN,
    SOURCE,
    TABLE_DDL,
    Writer,
    master_status,
    query,
    run_writer,
    service_config,
)
from processes import spawn, stop
from service import connect_mysql, remove_service, seed_start

from stack import settings
from stack.settings import HOST
from trep.config import load_config


@dataclass(frozen=True)
class Latency:
    """How the latency runs go: seconds of paced writing, the heartbeat's period, the
    timeout of a run, the transactions that measure the live pipeline's own maximum."""

    seconds: float
    heartbeat_ms: int
    timeout: float
    pipeline_txns: int


class Live:
    """The extractor and the MariaDB consumer group running live on a fresh schema."""

    def __init__(self, prefix: str, timeout: float) -> None:
        self.name = f"{prefix}{uuid.uuid4().hex[:6]}"
        self.schema = f"lat_{self.name}"
        path = self.path = service_config(self.name, self.schema, {"consumers": {
            "mariadb": apply_groups(self.schema)["consumers"]["mariadb"]}})
        self.cfg = load_config(path)
        self.src = settings.port(SOURCE)
        seed_start(self.src, self.cfg.tracking_schema, "bench", at=master_status(self.src))
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
        drop_targets(self.cfg, self.schema)
        remove_service(self.cfg, self.path)


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
        with connect_mysql(live.src, autocommit=True) as conn, conn.cursor() as cur:
            live.heartbeat(cur)
        live.lags()
        took = time.monotonic() - started
    finally:
        live.close()
    return {"transactions": txns, "row_changes": txns * 10,
            "written_seconds": round(wrote, 1), "applied_seconds": round(took, 1),
            "rows_per_second": round(txns * 10 / took)}


def latency_sweep(ceiling: float, fractions: list[float], latency: Latency
                  ) -> list[dict[str, Any]]:
    """Heartbeat latency at each fraction of the pipeline's maximum rows/s: where p99 stays
    under the goal, and where queueing starts."""
    sweep = []
    for fraction in fractions:
        res = run_latency(ceiling * fraction, latency.seconds, latency.heartbeat_ms,
                          latency.timeout)
        res["fraction_of_max"] = fraction
        sweep.append(res)
        print(f"  latency at {fraction:.0%} of {round(ceiling)} rows/s: p50 "
              f"{res['lag_ms_p50']} ms, p99 {res['lag_ms_p99']} ms", flush=True)
    return sweep


def pipeline_latency(fractions: list[float], latency: Latency
                     ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The live pipeline's own maximum, and the latency sweep at fractions of it.

    The main sweep's ceiling is the slower of extraction and apply, each measured alone on
    the machine; live, both run at once on the same 2 cores beside the servers, so the
    pipeline's own maximum is lower and "half of the maximum" means something else."""
    if latency.pipeline_txns <= 0:
        return None, []
    pipeline = run_pipeline_max(latency.pipeline_txns, latency.timeout)
    print(f"  live pipeline maximum: {pipeline['rows_per_second']} rows/s", flush=True)
    return pipeline, latency_sweep(pipeline["rows_per_second"], fractions, latency)
