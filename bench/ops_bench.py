"""Operations benchmark: provisioning rows/s (source to THL) and `trepctl check` rows/s.

On a 500,000-row table (sysbench-like: id, k, CHAR(120), CHAR(60)) that exists before the
service does, it starts one extractor with ``provision: initial`` and times the provisioning
from the request to the THL holding the last chunk; then it starts a MariaDB consumer group,
waits until it applied everything, and times ``trepctl check`` of the table (source digests
in the stream, target digests by the group) until every range is reported. JSON on stdout
and under bench/results/. Not a test: nothing is asserted.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
import options
from processes import ROOT, cpu_seconds, start_runner, stop
from results import RESULTS, write_result
from service import connect_mysql, drop_schemas, stack_servers, write_config

from replicator.requests import ProvisionRequest, read_request
from replicator.zk import connect
from stack.settings import port
from trep.config import ServiceConfig, load_config

RUN = ROOT / ".run"


def _fill(schema: str, rows: int) -> None:
    rng = random.Random(7)
    conn = connect_mysql(port("mariadb-source"))
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(f"CREATE TABLE {schema}.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, "
                    "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)")
        for start in range(1, rows + 1, 5000):
            cur.executemany(f"INSERT INTO {schema}.sbtest1 VALUES (%s, %s, %s, %s)", [
                (i, rng.randint(1, rows), f"{rng.getrandbits(240):060x}",
                 f"{rng.getrandbits(200):050x}") for i in range(start, min(start + 5000,
                                                                         rows + 1))])
            conn.commit()
    conn.close()


def write_service(service: str, schema: str, chunk: int) -> Path:
    """An extractor that provisions the table at its first start, and a MariaDB group."""
    return write_config(RUN / f"{service}.yml", service, {
        **stack_servers(),
        "extractor": {"server_id": 7000 + random.randint(0, 999),
                      "filters": {"replicate": [f"{schema}.*"]}, "provision": "initial",
                      "provision_chunk_rows": chunk},
        "consumers": {"mariadb": {"target": {
            "type": "sql", "url": f"mysql+pymysql://root@127.0.0.1:{port('mariadb-target')}/"},
            "block_commit_events": 50}},
    })


def trepctl(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``trepctl -c CONFIG ARGS``, its output captured."""
    return subprocess.run([sys.executable, "-m", "trep.trepctl", "-c", str(config), *args],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
                          capture_output=True, text=True, check=False)


def time_provision(cfg: ServiceConfig, extractor_pid: int, rows: int) -> dict[str, Any]:
    """From the provisioning request running to done."""
    zk = connect(cfg.zookeeper.hosts, 10)
    try:
        started = None
        while True:
            req = read_request(zk, cfg, ProvisionRequest)
            if req is not None and started is None and req.state == "running":
                started = time.monotonic()
            if req is not None and req.state == "done":
                break
            time.sleep(0.05)
    finally:
        zk.stop()
        zk.close()
    elapsed = time.monotonic() - (started or time.monotonic())
    return {"seconds": round(elapsed, 2), "rows_per_second": round(rows / elapsed),
            "extractor_cpu_s_per_million_rows": round(
                cpu_seconds(extractor_pid) / rows * 1e6, 1)}


def wait_applied(config: Path, schema: str, rows: int) -> None:
    """Until the group applied everything and the whole table is on the target."""
    applied = trepctl(config, "wait", "-applied", "0", "-limit", "900")
    while True:
        conn = connect_mysql(port("mariadb-target"))
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {schema}.sbtest1")
            row = cur.fetchone()
        conn.close()
        if row is not None and row[0] >= rows:
            break
        time.sleep(0.5)
    if applied.returncode != 0:
        raise SystemExit(f"the group did not apply: {applied.stderr!r}")


def time_check(config: Path, schema: str, rows: int, limit: int) -> dict[str, Any]:
    """``trepctl check`` of the table until every range is reported."""
    t0 = time.monotonic()
    check = trepctl(config, "check", f"{schema}.sbtest1", "-limit", str(limit),
                    "-timeout", "900")
    elapsed = time.monotonic() - t0
    return {"seconds": round(elapsed, 2), "rows_per_second": round(rows / elapsed),
            "exit": check.returncode, "output": check.stdout.strip()}


def benchmark(rows: int, chunk: int, check_limit: int) -> dict[str, Any]:
    """Provision a fresh table into a new service's THL, apply it, then check it."""
    service = f"opsb{uuid.uuid4().hex[:8]}"
    schema = f"src_{service}"
    _fill(schema, rows)
    config = write_service(service, schema, chunk)
    cfg = load_config(config)
    log = RUN / f"{service}.log"
    result: dict[str, Any] = {"rows": rows, "chunk_rows": chunk, "check_limit": check_limit,
                              "cpus": os.cpu_count()}
    extractor = start_runner(config, log, "--no-consumers")
    try:
        result["provision"] = time_provision(cfg, extractor.pid, rows)
        group = start_runner(config, log, "--no-extractor")
        try:
            wait_applied(config, schema, rows)
            result["check"] = time_check(config, schema, rows, check_limit)
        finally:
            stop(group)
    finally:
        stop(extractor)
        drop_schemas(port("mariadb-source"), [schema, f"tungsten_{service}"])
    return result


@options.command(__doc__)
@click.option("--rows", type=int, default=500_000)
@click.option("--chunk", type=int, default=5000)
@click.option("--check-limit", type=int, default=10_000)
def main(rows: int, chunk: int, check_limit: int) -> None:
    """Run the benchmark; the JSON goes to ``bench/results/ops-<time>.json`` and stdout."""
    result = benchmark(rows, chunk, check_limit)
    write_result(result, RESULTS / f"ops-{time.strftime('%Y%m%d-%H%M%S')}.json")


if __name__ == "__main__":
    main()
