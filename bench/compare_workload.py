"""bench-compare's workload and what every run of it shares: one finished binlog of
sysbench-like transactions, the digest every target must match, and the services that read it.

PERF.md's workload: transactions of 10 single-row statements on ``sbtest1``, 80% INSERT,
15% UPDATE, 5% DELETE, one round trip each.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pymysql
from pymysql.constants import CLIENT
from service import connect_mysql, extractor, stack_servers, write_config

from stack import settings
from stack.settings import HOST

RUN = settings.RUN_DIR / "bench-compare"
#: The stack's name of bench-compare's own source: it resets that server's binlog, which
#: would invalidate the positions of every other service on a shared source (the demo's).
SOURCE = "mariadb-bench-source"
TABLE_DDL = ("CREATE TABLE {schema}.sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, "
             "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL)")


def query(port: int, sql: str) -> list[tuple[Any, ...]]:
    """Rows of one statement (autocommit)."""
    with connect_mysql(port, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


@dataclass
class Workload:
    """What was written into the binlog, and where."""

    schema: str
    start: tuple[str, int] = ("", 0)
    end: tuple[str, int] = ("", 0)
    txns: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    last_gtid: str = ""
    write_seconds: float = 0.0

    @property
    def rows(self) -> int:
        return self.inserts + self.updates + self.deletes


@dataclass
class Writer:
    """The workload's transactions, 10 single-row statements each, one round trip each."""

    schema: str
    rng: random.Random = field(default_factory=lambda: random.Random(42))
    ids: list[int] = field(default_factory=list)
    next_id: int = 1
    counts: dict[str, int] = field(default_factory=lambda: {"I": 0, "U": 0, "D": 0})

    def _text(self, n: int) -> str:
        return f"{self.rng.getrandbits(4 * n):0{n}x}"[:n]

    def transaction(self) -> str:
        t = f"{self.schema}.sbtest1"
        stmts = ["BEGIN"]
        for _ in range(10):
            r = self.rng.random()
            if r < 0.8 or len(self.ids) < 10:
                i, self.next_id = self.next_id, self.next_id + 1
                self.ids.append(i)
                stmts.append(f"INSERT INTO {t} VALUES ({i}, {self.rng.randint(1, 10**6)}, "
                             f"'{self._text(120)}', '{self._text(60)}')")
                self.counts["I"] += 1
            elif r < 0.95:
                stmts.append(f"UPDATE {t} SET k = k + 1, c = '{self._text(120)}' "
                             f"WHERE id = {self.rng.choice(self.ids)}")
                self.counts["U"] += 1
            else:
                i = self.ids.pop(self.rng.randrange(len(self.ids)))
                stmts.append(f"DELETE FROM {t} WHERE id = {i}")
                self.counts["D"] += 1
        stmts.append("COMMIT")
        return ";".join(stmts)


def run_writer(port: int, writer: Writer, txns: int, rate_tps: float | None = None,
               between: Callable[[pymysql.cursors.Cursor], None] | None = None,
               every_s: float = 0.0) -> float:
    """Write ``txns`` transactions (paced to ``rate_tps`` if given); seconds taken.

    ``between`` runs on the same connection every ``every_s`` seconds (heartbeats).
    """
    conn = connect_mysql(port, autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
    started = last = time.monotonic()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for n in range(txns):
            if rate_tps:
                wait = started + n / rate_tps - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            cur.execute(writer.transaction())
            while cur.nextset():
                pass
            if between is not None and time.monotonic() - last >= every_s:
                last = time.monotonic()
                between(cur)
    conn.close()
    return time.monotonic() - started


def master_status(port: int) -> tuple[str, int]:
    (row,) = query(port, "SHOW MASTER STATUS")
    return str(row[0]), int(row[1])


def write_workload(port: int, schema: str, txns: int) -> Workload:
    """Reset the binlog, then write the schema and the transactions into it."""
    # Debezium (snapshot.mode=never, no offsets) asks for an empty GTID state, which MariaDB
    # serves from its first binlog file only while no GTID history was purged: RESET MASTER
    # makes the workload the whole binlog, so both readers read exactly the same events.
    query(port, "RESET MASTER")
    work = Workload(schema, start=master_status(port))
    query(port, f"CREATE DATABASE {schema}")
    query(port, TABLE_DDL.format(schema=schema))
    writer = Writer(schema)
    work.write_seconds = round(run_writer(port, writer, txns), 1)
    work.txns = txns
    work.inserts, work.updates, work.deletes = (writer.counts[k] for k in "IUD")
    work.end = master_status(port)
    work.last_gtid = str(query(port, "SELECT @@gtid_binlog_pos")[0][0])
    return work


def rows_digest(rows: Iterator[tuple[Any, ...]]) -> tuple[int, str]:
    """(count, sha256) of rows in id order, each as its text."""
    h = hashlib.sha256()
    n = 0
    for row in rows:
        h.update(repr(tuple(str(v) for v in row)).encode())
        n += 1
    return n, h.hexdigest()


def mariadb_digest(port: int, schema: str) -> tuple[int, str]:
    with connect_mysql(port, autocommit=True) as conn, \
            conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT id, k, c, pad FROM {schema}.sbtest1 ORDER BY id")
        return rows_digest(iter(cur.fetchone, None))


def pg_digest(port: int, schema: str) -> tuple[int, str]:
    with psycopg.connect(host=HOST, port=port, user="postgres", dbname="postgres") as conn:
        rows = conn.execute(f'SELECT id, k, c, pad FROM "{schema}".sbtest1 ORDER BY id')
        return rows_digest(iter(rows))


def service_config(name: str, schema: str, extra: dict[str, Any] | None = None) -> Path:
    """A service of this benchmark (its own THL topic, tracking schema, consumer groups)."""
    return write_config(RUN / f"{name}.yml", name, {
        **stack_servers(SOURCE), "extractor": extractor(name, 7000, 1000, [schema], "bench"),
        **(extra or {})})
