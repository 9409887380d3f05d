"""A continuous source workload: numbered transactions, so the THL can be checked exactly."""

from __future__ import annotations

import threading
from typing import Any

import pymysql

from thl_topics.event import RowChange, ThlEvent


class NumberedWorkload:
    """Commits transaction k = 1, 2, ... each inserting (k, 0) and (k, 1) into ``schema.w``.

    With ``referred``, every even k also inserts (k, POINT(k k)) into ``schema.g`` after
    ``w``, in the same transaction. The extractor's rows decoder reads ``w``'s events and
    leaves GEOMETRY tables to pymysqlreplication (``test_fast_path.py`` proves both), so
    such a transaction mixes the two paths and a kill can land between them.
    """

    def __init__(self, port: int, schema: str, referred: bool = False) -> None:
        self.port = port
        self.schema = schema
        self.referred = referred
        self.committed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        conn = self._connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {schema}.w (k INT, part INT, PRIMARY KEY (k, part))")
            if referred:
                cur.execute(f"CREATE TABLE {schema}.g (k INT PRIMARY KEY, p POINT NOT NULL)")
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
                    if self.referred and k % 2 == 0:
                        cur.execute(f"INSERT INTO {self.schema}.g VALUES "
                                    f"(%s, ST_GeomFromText('POINT({k} {k})'))", (k,))
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


def referred_transactions(events: list[ThlEvent]) -> list[int]:
    """The k of each ``g`` row in THL order, checking it shares its event with ``w``'s k."""
    out = []
    for event in events:
        changes = [item for item in event.data if isinstance(item, RowChange)]
        for item in changes:
            if item.table != "g":
                continue
            assert len(item.column_values) == 1, item.column_values
            k, point = item.column_values[0]
            # SRID (4 bytes) and a WKB point (21 bytes): the geometry arrived as bytes.
            assert isinstance(point, bytes) and len(point) == 25, point
            assert any(c.table == "w" and c.column_values[0][0] == k for c in changes), \
                f"g row {k!r} is not in the event of w's transaction"
            out.append(int(k))  # type: ignore[arg-type]
    return out
