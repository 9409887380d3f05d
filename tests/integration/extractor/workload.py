"""A continuous source workload: numbered transactions, so the THL can be checked exactly."""

from __future__ import annotations

import threading
from typing import Any

import pymysql

from thl_topics.event import RowChange, ThlEvent


class NumberedWorkload:
    """Commits transaction k = 1, 2, ... each inserting (k, 0) and (k, 1) into ``schema.w``."""

    def __init__(self, port: int, schema: str) -> None:
        self.port = port
        self.schema = schema
        self.committed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        conn = self._connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {schema}.w (k INT, part INT, PRIMARY KEY (k, part))")
        conn.commit()
        conn.close()

    def _connect(self) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                               autocommit=False)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        """Stop; the number of transactions committed."""
        self._stop.set()
        self._thread.join(30)
        return self.committed

    def _run(self) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                while not self._stop.is_set():
                    k = self.committed + 1
                    cur.execute(f"INSERT INTO {self.schema}.w VALUES (%s, 0), (%s, 1)", (k, k))
                    conn.commit()
                    self.committed = k
                    self._stop.wait(0.005)
        finally:
            conn.close()


def numbered_transactions(events: list[ThlEvent]) -> list[int]:
    """The workload's k of each THL event holding workload rows, in THL order."""
    out = []
    for event in events:
        for item in event.data:
            if isinstance(item, RowChange) and item.table == "w":
                ks = {row[0] for row in item.column_values}
                assert len(ks) == 1 and len(item.column_values) == 2, item.column_values
                out.append(int(ks.pop()))  # type: ignore[arg-type]
    return out
