"""The ``items`` workload of the apply benchmarks: one table (primary key, int, varchar,
decimal, datetime) and the same seeded rows for every target and every reference load."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pymysql
from thl_fill import fill_thl

from trep.config import ServiceConfig

COLUMNS = ("id", "qty", "label", "price", "created")
DDL = ("CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, qty INT NOT NULL, "
       "label VARCHAR(64) NOT NULL, price DECIMAL(12,2) NOT NULL, "
       "created DATETIME NOT NULL)")
INSERT = f"INSERT INTO {{table}} ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s)"

Row = tuple[int, int, str, decimal.Decimal, dt.datetime]


def make_rows(count: int) -> list[Row]:
    """``count`` seeded rows: the source workload and the reference loads alike."""
    rng = random.Random(42)
    base = dt.datetime(2024, 1, 1)  # noqa: DTZ001 - a DATETIME column is naive
    return [(i, rng.randint(0, 10_000), f"item {i} {rng.getrandbits(64):016x}",
             decimal.Decimal(rng.randrange(0, 10**9)).scaleb(-2),
             base + dt.timedelta(seconds=rng.randrange(0, 365 * 86400)))
            for i in range(1, count + 1)]


def insert_rows(conn: pymysql.connections.Connection[Any], tables: Sequence[str],
                rows: list[Row], txn_rows: int) -> None:
    """Commit ``rows`` as transactions of ``txn_rows`` rows, each into one of ``tables``
    (``schema.items``), round robin."""
    with conn.cursor() as cur:
        for n, start in enumerate(range(0, len(rows), txn_rows)):
            cur.executemany(INSERT.format(table=tables[n % len(tables)]),
                            rows[start:start + txn_rows])
            conn.commit()


def extract_items(cfg: ServiceConfig, config: Path, log: Path, source_port: int,
                  tables: Sequence[str], rows: list[Row], txn_rows: int) -> tuple[int, float]:
    """The rows into ``tables`` on the source and through the extractor alone into the THL;
    (THL tail seqno, seconds)."""
    print(f"service {cfg.service}: extracting {len(rows)} rows in transactions of "
          f"{txn_rows} rows ...", flush=True)
    return fill_thl(cfg, config, log, source_port,
                    lambda conn: insert_rows(conn, tables, rows, txn_rows))
