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

import argparse
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pymysql
import sqlalchemy as sa
import yaml

from replicator.tracking import CommitSeqno, CommitSeqnoTable
from thl_topics.errors import ThlTopicMissing
from thl_topics.reader import ThlReader
from trep.config import load_config

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _connect(port: int) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="",
                           autocommit=False, charset="utf8mb4")


def write_workload(port: int, schema: str, tables: int, rows: int, txns: int) -> tuple[int, int]:
    """Fill and churn ``tables`` sbtest tables; (transactions, rows changed) in the binlog."""
    rng = random.Random(42)
    conn = _connect(port)
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


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS KiB) of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1])
    return cpu, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--rows", type=int, default=25_000, help="rows per table")
    parser.add_argument("--txns", type=int, default=5_000, help="write-only transactions")
    parser.add_argument("--port", type=int, default=13306)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "extract.json")
    args = parser.parse_args()

    service = f"bench{uuid.uuid4().hex[:6]}"
    schema = f"sbench_{service}"
    conn = _connect(args.port)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute("SHOW MASTER STATUS")
        status = cur.fetchone()
        if status is None:
            raise SystemExit("the source has no binary log")
        file, pos = status[:2]
    conn.commit()
    conn.close()
    # Seed the tracking table so the extractor starts where the workload starts.
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{args.port}/")
    tracking = CommitSeqnoTable(f"tungsten_{service}")
    with engine.begin() as sa_conn:
        tracking.create(sa_conn)
        tracking.write(sa_conn, CommitSeqno(seqno=-1, epoch=0, eventid=f"{file}:{pos:016d};0",
                                            source_id="bench"))
    engine.dispose()
    print(f"writing the workload into the binlog ({args.tables} tables x {args.rows} rows, "
          f"{args.txns} write transactions) ...", flush=True)
    n_txn, n_rows = write_workload(args.port, schema, args.tables, args.rows, args.txns)
    expected_last = n_txn + args.tables - 1  # the CREATE TABLEs are transactions too

    config = ROOT / ".run" / f"{service}.yml"
    config.write_text(yaml.safe_dump({
        "service": service,
        "source": {"port": args.port, "user": "root", "password": ""},
        "extractor": {"filters": {"replicate": [f"{schema}.*"]}},
    }))
    kafka = load_config(config).kafka.client()
    log = ROOT / ".run" / f"{service}.log"
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "trep.extract", "-c", str(config)],
                                cwd=ROOT, stdout=out, stderr=out,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
    cpu = peak = 0.0
    last = -1
    try:
        while last < expected_last:
            if proc.poll() is not None:
                print(f"extractor exited; see {log}", file=sys.stderr)
                return 1
            cpu, peak = proc_stats(proc.pid)
            try:
                with ThlReader(kafka, f"thl.{service}") as reader:
                    tail = reader.tail()
                last = tail.seqno if tail else -1
            except ThlTopicMissing:
                pass
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        cpu, peak = proc_stats(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    result = {
        "benchmark": "extract", "transactions": n_txn, "rows": n_rows,
        "wall_seconds": round(elapsed, 2),
        "rows_per_second": round(n_rows / elapsed),
        "transactions_per_second": round(n_txn / elapsed),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_million_rows": round(cpu / n_rows * 1e6, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "note": "wall time includes extractor start-up (imports, ZooKeeper, Kafka init)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    conn = _connect(args.port)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {schema}")
        cur.execute(f"DROP DATABASE tungsten_{service}")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
