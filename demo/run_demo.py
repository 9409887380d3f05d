"""The README's demo: a workload on the source MariaDB, extracted into the THL and listed.

Run by ``make demo`` after the stack is up. It starts the extractor of service ``demo``,
commits a few transactions (DDL, inserts, an update, a delete, every kind of value), waits
until the THL holds them, prints them with ``thl list``, prints ``thl info``, and stops the
extractor. Run it again: the THL keeps growing, seqnos stay gapless.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pymysql

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIG = HERE / "demo.yml"
PY = sys.executable

WORKLOAD = [
    ["CREATE DATABASE IF NOT EXISTS demo_shop",
     "CREATE TABLE IF NOT EXISTS demo_shop.customers (id INT PRIMARY KEY, name VARCHAR(50), "
     "balance DECIMAL(12,2), joined DATETIME(6), avatar VARBINARY(16))"],
    ["INSERT INTO demo_shop.customers VALUES "
     "(1, 'Ada 😀', 12.50, NOW(6), 0x00FF00), (2, 'Grace', NULL, NOW(6), NULL) "
     "ON DUPLICATE KEY UPDATE name = VALUES(name)"],
    ["UPDATE demo_shop.customers SET balance = COALESCE(balance, 0) + 1 WHERE id = 2",
     "DELETE FROM demo_shop.customers WHERE id = 1"],
]


def thl(*args: str) -> int:
    """Run the thl command against the demo service."""
    return subprocess.call([PY, "-m", "replicator.cli.thl", "-c", str(CONFIG), *args],
                           cwd=ROOT)


def tail_seqno() -> int:
    out = subprocess.run([PY, "-m", "replicator.cli.thl", "-c", str(CONFIG), "list",
                          "-last", "1", "--json"], cwd=ROOT, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return int(lines[-1].split('"seqno": ')[1].split(",")[0]) if lines else -1


def main() -> int:
    log = ROOT / ".run" / "demo-extractor.log"
    log.parent.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with log.open("ab") as out:
        extractor = subprocess.Popen([PY, "-m", "extractor", "-c", str(CONFIG)], cwd=ROOT,
                                     stdout=out, stderr=out, env=env)
    try:
        before = tail_seqno()
        conn = pymysql.connect(host="127.0.0.1", port=13306, user="root", password="",
                               charset="utf8mb4", autocommit=False)
        # The extractor starts at the binlog's end: commit a marker until it shows up.
        deadline = time.monotonic() + 90
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS demo_shop")
            cur.execute("CREATE TABLE IF NOT EXISTS demo_shop.ticks "
                        "(n INT AUTO_INCREMENT PRIMARY KEY)")
            while tail_seqno() <= before:
                if extractor.poll() is not None or time.monotonic() > deadline:
                    print(f"the extractor did not start; see {log}", file=sys.stderr)
                    return 1
                cur.execute("INSERT INTO demo_shop.ticks VALUES ()")
                conn.commit()
                time.sleep(0.5)
            first = tail_seqno() + 1
            for txn in WORKLOAD:
                for stmt in txn:
                    cur.execute(stmt)
                conn.commit()
        conn.close()
        last = first
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and last < first + len(WORKLOAD) - 1:
            time.sleep(0.5)
            last = tail_seqno()
        print(f"\n=== thl list -low {first} -high {last} ===\n", flush=True)
        thl("list", "-low", str(first), "-high", str(last))
        print("=== thl info ===", flush=True)
        thl("info")
        return 0
    finally:
        extractor.send_signal(signal.SIGTERM)
        extractor.wait(60)


if __name__ == "__main__":
    sys.exit(main())
