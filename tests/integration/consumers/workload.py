"""A mixed source workload over accounts (PK), nopk (no key, duplicates) and the type matrix."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from decimal import Decimal
from typing import Any, Protocol

import pymysql

from .tables import TYPES_NAMES, TYPES_ROWS


class Committing(Protocol):
    committed: int
    error: BaseException | None
    _thread: threading.Thread | None


def await_committed(work: Committing, n: int, timeout: float = 120) -> None:
    """Wait until ``work``'s thread has committed ``n`` transactions (or died)."""
    deadline = time.monotonic() + timeout
    while work.committed < n and work.error is None:
        assert work._thread is not None and work._thread.is_alive(), "the workload stopped"
        assert time.monotonic() < deadline, f"only {work.committed} of {n} transactions"
        time.sleep(0.05)


class MixedWorkload:
    """Commits numbered transactions of 1-3 random statements; deterministic per seed."""

    def __init__(self, port: int, schema: str, seed: int = 7, types: bool = False,
                 rate: float = 0) -> None:
        self.port, self.schema = port, schema
        #: Transactions per second at most (0: as fast as the source takes them).
        self.rate = rate
        #: Also update the type matrix table (seed_types() first).
        self.types = types
        self.rng = random.Random(seed)
        self.committed = 0
        self._next_id = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _connect(self) -> pymysql.connections.Connection[Any]:
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                               charset="utf8mb4", autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET sql_mode = ''")
        return conn

    def seed_types(self) -> None:
        conn = self._connect()
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(TYPES_NAMES))
            cur.executemany(f"INSERT INTO {self.schema}.types VALUES ({marks})", TYPES_ROWS)
        conn.commit()
        conn.close()

    def run(self, transactions: int) -> None:
        """Commit ``transactions`` transactions (or until stop())."""
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                for _ in range(transactions):
                    if self._stop.is_set():
                        break
                    for _ in range(self.rng.randint(1, 3)):
                        self._statement(cur)
                    conn.commit()
                    self.committed += 1
                    if self.rate:
                        time.sleep(1 / self.rate)
        finally:
            conn.close()

    def start(self, transactions: int = 10**9) -> None:
        """Commit in a thread until stop(); after a stop(), go on where it stopped."""
        self._stop.clear()

        def run() -> None:
            try:
                self.run(transactions)
            except BaseException as exc:
                self.error = exc
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self, at_least: int = 0) -> int:
        """Stop the thread, once it has committed ``at_least`` transactions in all: a test's
        preconditions then hold however quickly its kills went (the quick tier does few)."""
        await_committed(self, at_least)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise self.error
        return self.committed

    def _statement(self, cur: Any) -> None:
        s, rng = self.schema, self.rng
        pick = rng.random()
        if pick < 0.30:
            i = self._next_id
            self._next_id += 1
            cur.execute(f"INSERT INTO {s}.accounts VALUES (%s, %s, %s, %s, %s, %s)",
                        (i, rng.choice(["ann", "bob", "zoë 😀", "o'neil", None]),
                         Decimal(rng.randint(-10**12, 10**12)) / 10000,
                         rng.choice([None, "", "note", "ünï\ncode"]),
                         dt.datetime(2020, 1, 1) + dt.timedelta(
                             microseconds=rng.randint(0, 10**14)),
                         rng.choice([0, 1, -128, 127, None])))
        elif pick < 0.50:
            cur.execute(f"UPDATE {s}.accounts SET balance = balance + %s, note = %s "
                        f"WHERE id = %s", (Decimal(rng.randint(-999, 999)) / 100,
                                          rng.choice([None, "upd", "é"]),
                                          rng.randint(1, self._next_id)))
        elif pick < 0.58:
            cur.execute(f"DELETE FROM {s}.accounts WHERE id = %s",
                        (rng.randint(1, self._next_id),))
        elif pick < 0.75:
            # A small domain makes duplicate rows common: the hard case without a key.
            cur.execute(f"INSERT INTO {s}.nopk VALUES (%s, %s, %s)",
                        (rng.randint(1, 20), rng.choice([None, "x", "y"]),
                         rng.choice([None, 0.5, 1e-300])))
        elif pick < 0.85:
            cur.execute(f"UPDATE {s}.nopk SET c = %s WHERE a = %s LIMIT 1",
                        (rng.choice([None, 2.25, -0.0]), rng.randint(1, 20)))
        elif pick < 0.92 or not self.types:
            cur.execute(f"DELETE FROM {s}.nopk WHERE a = %s LIMIT 1", (rng.randint(1, 20),))
        else:
            row = rng.choice([1, 2, 3])
            cur.execute(f"UPDATE {s}.types SET dec_small = %s, txt = %s, vb = %s, b9 = %s "
                        f"WHERE id = %s",
                        (Decimal(rng.randint(-99999999, 99999999)) / 10000,
                         rng.choice(["a", "ü😀", None]), bytes([0, rng.randint(0, 255), 0]),
                         rng.randint(0, 511), row))
