"""Extraction benchmark: a sysbench-like write workload through the extractor, as JSON.

``make bench`` runs it against the local stack. It writes the workload into the binlog first
(oltp_write_only-style transactions over ``sbtest`` tables: an index update, a non-index
update, a delete and an insert per transaction, plus bulk inserts to fill the tables), seeds
the new service's ``trep_commit_seqno`` with the position where the workload starts, then
times one extractor process from start to the last event in the THL. Reported: rows/s and
transactions/s (wall clock, from first to last event), CPU seconds per million rows and peak
RSS of the extractor process. Not a test: nothing is asserted.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
import options
from processes import ROOT, cpu_seconds, peak_rss_kib, spawn, stop
from results import write_result
from service import binlog_position, connect_mysql, drop_schemas, seed_start, write_config
from thl_fill import thl_tail

from trep.config import ServiceConfig, load_config

RUN = ROOT / ".run"


def write_workload(port: int, schema: str, tables: int, rows: int, txns: int) -> tuple[int, int]:
    """Fill and churn ``tables`` sbtest tables; (transactions, rows changed) in the binlog."""
    rng = random.Random(42)
    conn = connect_mysql(port)
    n_txn = n_rows = 0
    with conn.cursor() as cur:
        for t in range(1, tables + 1):
            cur.execute(f"CREATE TABLE {schema}.sbtest{t} (id INT PRIMARY KEY, k INT NOT NULL, "
                        "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_idx (k))")
            for start in range(1, rows + 1, 1000):
                batch = [(i, rng.randint(1, rows), f"{rng.getrandbits(240):060x}"[:119],
                          f"{rng.getrandbits(200):050x}"[:59])
                         for i in range(start, min(start + 1000, rows + 1))]
                cur.executemany(f"INSERT INTO {schema}.sbtest{t} VALUES (%s, %s, %s, %s)", batch)
                conn.commit()
                n_txn += 1
                n_rows += len(batch)
        for _ in range(txns):
            t = rng.randint(1, tables)
            i = rng.randint(1, rows)
            cur.execute(f"UPDATE {schema}.sbtest{t} SET k = k + 1 WHERE id = %s", (i,))
            cur.execute(f"UPDATE {schema}.sbtest{t} SET c = %s WHERE id = %s",
                        (f"{rng.getrandbits(240):060x}"[:119], rng.randint(1, rows)))
            d = rng.randint(1, rows)
            cur.execute(f"DELETE FROM {schema}.sbtest{t} WHERE id = %s", (d,))
            cur.execute(f"INSERT INTO {schema}.sbtest{t} VALUES (%s, %s, %s, %s)",
                        (d, rng.randint(1, rows), "c" * 119, "p" * 59))
            conn.commit()
            n_txn += 1
            n_rows += 4
    conn.close()
    return n_txn, n_rows


def prepare(port: int, service: str, schema: str) -> None:
    """The workload's schema, and the extractor's start right after it."""
    conn = connect_mysql(port)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
    at = binlog_position(conn)
    conn.commit()
    conn.close()
    # Seed the tracking table so the extractor starts where the workload starts.
    seed_start(port, f"tungsten_{service}", "bench", at=at)


def time_extractor(cfg: ServiceConfig, config: Path, log: Path, last_seqno: int
                   ) -> tuple[float, float, int] | None:
    """One extractor process from its start until the THL holds ``last_seqno``: (seconds,
    CPU seconds, peak RSS KiB); None if it exited on the way."""
    started = time.monotonic()
    proc = spawn([sys.executable, "-m", "trep.extract", "-c", str(config)], log)
    cpu, peak = 0.0, 0
    last = -1
    try:
        while last < last_seqno:
            if proc.poll() is not None:
                return None
            cpu, peak = cpu_seconds(proc.pid), peak_rss_kib(proc.pid)
            last = max(last, thl_tail(cfg)[0])
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        cpu, peak = cpu_seconds(proc.pid), peak_rss_kib(proc.pid)
    finally:
        stop(proc)
    return elapsed, cpu, peak


def figures(n_txn: int, n_rows: int, elapsed: float, cpu: float, peak: int
            ) -> dict[str, Any]:
    return {
        "benchmark": "extract", "transactions": n_txn, "rows": n_rows,
        "wall_seconds": round(elapsed, 2),
        "rows_per_second": round(n_rows / elapsed),
        "transactions_per_second": round(n_txn / elapsed),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_million_rows": round(cpu / n_rows * 1e6, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "note": "wall time includes extractor start-up (imports, ZooKeeper, Kafka init)",
    }


@options.command(__doc__)
@click.option("--tables", type=int, default=4)
@click.option("--rows", type=int, default=25_000, help="rows per table")
@click.option("--txns", type=int, default=5_000, help="write-only transactions")
@click.option("--port", type=int, default=13306)
@options.out("extract.json")
def main(tables: int, rows: int, txns: int, port: int, out: Path) -> None:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    service = f"bench{uuid.uuid4().hex[:6]}"
    schema = f"sbench_{service}"
    prepare(port, service, schema)
    print(f"writing the workload into the binlog ({tables} tables x {rows} rows, "
          f"{txns} write transactions) ...", flush=True)
    n_txn, n_rows = write_workload(port, schema, tables, rows, txns)
    config = write_config(RUN / f"{service}.yml", service, {
        "source": {"port": port, "user": "root", "password": ""},
        "extractor": {"filters": {"replicate": [f"{schema}.*"]}},
    })
    log = RUN / f"{service}.log"
    # The CREATE TABLEs are transactions too.
    measured = time_extractor(load_config(config), config, log, n_txn + tables - 1)
    if measured is None:
        print(f"extractor exited; see {log}", file=sys.stderr)
        sys.exit(1)
    write_result(figures(n_txn, n_rows, *measured), out)
    drop_schemas(port, [schema, f"tungsten_{service}"])


if __name__ == "__main__":
    main()
