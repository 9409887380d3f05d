"""Operations benchmark: provisioning rows/s (source to THL) and `trepctl check` rows/s.

On a 500,000-row table (sysbench-like: id, k, CHAR(120), CHAR(60)) that exists before the
service does, it starts one extractor with ``provision: initial`` and times the provisioning
from the request to the THL holding the last chunk; then it starts a MariaDB consumer group,
waits until it applied everything, and times ``trepctl check`` of the table (source digests
in the stream, target digests by the group) until every range is reported. JSON on stdout
and under bench/results/. Not a test: nothing is asserted.
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
import yaml

from replicator.requests import ProvisionRequest, read_request
from replicator.zk import connect
from stack.settings import port
from trep.config import load_config

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _fill(schema: str, rows: int) -> None:
    rng = random.Random(7)
    conn = pymysql.connect(host="127.0.0.1", port=port("mariadb-source"), user="root",
                           password="", autocommit=False, charset="utf8mb4")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--chunk", type=int, default=5000)
    parser.add_argument("--check-limit", type=int, default=10_000)
    args = parser.parse_args()
    service = f"opsb{uuid.uuid4().hex[:8]}"
    schema = f"src_{service}"
    _fill(schema, args.rows)
    run = ROOT / ".run"
    run.mkdir(exist_ok=True)
    config = run / f"{service}.yml"
    config.write_text(yaml.safe_dump({
        "service": service,
        "kafka": {"bootstrap_servers": f"127.0.0.1:{port('kafka')}"},
        "zookeeper": {"hosts": f"127.0.0.1:{port('zookeeper')}"},
        "source": {"host": "127.0.0.1", "port": port("mariadb-source"), "user": "root",
                   "password": ""},
        "extractor": {"server_id": 7000 + random.randint(0, 999),
                      "filters": {"replicate": [f"{schema}.*"]}, "provision": "initial",
                      "provision_chunk_rows": args.chunk},
        "consumers": {"mariadb": {"target": {
            "type": "sql", "url": f"mysql+pymysql://root@127.0.0.1:{port('mariadb-target')}/"},
            "block_commit_events": 50}},
    }))
    cfg = load_config(config)
    zk = connect(cfg.zookeeper.hosts, 10)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = (run / f"{service}.log").open("wb")
    result: dict[str, Any] = {"rows": args.rows, "chunk_rows": args.chunk,
                              "check_limit": args.check_limit, "cpus": os.cpu_count()}
    extractor = subprocess.Popen([sys.executable, "-m", "trep.runner", "-c", str(config),
                                  "--no-consumers"], stdout=log, stderr=log, env=env,
                                 cwd=ROOT)
    try:
        started = None
        while True:
            req = read_request(zk, cfg, ProvisionRequest)
            if req is not None and started is None and req.state == "running":
                started = time.monotonic()
            if req is not None and req.state == "done":
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - (started or time.monotonic())
        result["provision"] = {"seconds": round(elapsed, 2),
                               "rows_per_second": round(args.rows / elapsed),
                               "extractor_cpu_s_per_million_rows": round(
                                   _cpu(extractor.pid) / args.rows * 1e6, 1)}
        group = subprocess.Popen([sys.executable, "-m", "trep.runner", "-c", str(config),
                                  "--no-extractor"], stdout=log, stderr=log, env=env, cwd=ROOT)
        try:
            applied = subprocess.run([sys.executable, "-m", "trep.trepctl", "-c", str(config),
                                      "wait", "-applied", "0", "-limit", "900"], env=env,
                                     cwd=ROOT, capture_output=True, check=False)
            while True:  # the whole provisioned table on the target
                conn = pymysql.connect(host="127.0.0.1", port=port("mariadb-target"),
                                       user="root", password="")
                with conn.cursor() as cur:
                    cur.execute(f"SELECT COUNT(*) FROM {schema}.sbtest1")
                    row = cur.fetchone()
                conn.close()
                if row is not None and row[0] >= args.rows:
                    break
                time.sleep(0.5)
            if applied.returncode != 0:
                raise SystemExit(f"the group did not apply: {applied.stderr!r}")
            t0 = time.monotonic()
            check = subprocess.run([sys.executable, "-m", "trep.trepctl", "-c", str(config),
                                    "check", f"{schema}.sbtest1", "-limit",
                                    str(args.check_limit), "-timeout", "900"], env=env,
                                   cwd=ROOT, capture_output=True, text=True, check=False)
            elapsed = time.monotonic() - t0
            result["check"] = {"seconds": round(elapsed, 2),
                               "rows_per_second": round(args.rows / elapsed),
                               "exit": check.returncode, "output": check.stdout.strip()}
        finally:
            group.terminate()
            group.wait(60)
    finally:
        extractor.terminate()
        extractor.wait(60)
        zk.stop()
        zk.close()
        conn = pymysql.connect(host="127.0.0.1", port=port("mariadb-source"), user="root",
                               password="")
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"DROP DATABASE IF EXISTS tungsten_{service}")
        conn.close()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ops-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result,
                                                                               indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
