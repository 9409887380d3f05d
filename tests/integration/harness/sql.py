"""SQL a test runs on the stack's MariaDB servers and PostgreSQL, one transaction a call."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pymysql
from pymysql.cursors import Cursor


def hex_bytes(value: bytes) -> str:
    """``value`` as a MariaDB hex literal, decoded by the server: PyMySQL's own escaping of
    bytes is Python code that takes seconds for tens of MiB, a test's time for nothing."""
    return f"X'{value.hex()}'"


def hex_text(value: str) -> str:
    """``value`` as a utf8mb4 text expression made from a hex literal (see ``hex_bytes``)."""
    return f"CONVERT({hex_bytes(value.encode())} USING utf8mb4)"


def execute(cur: Cursor, statements: Sequence[str], params: Any = None,
            many: bool = False) -> None:
    """Run statements on a MariaDB cursor; ``params`` bind the last (``many``: once per row
    of ``params``)."""
    for i, stmt in enumerate(statements):
        last = i == len(statements) - 1
        if many and last:
            cur.executemany(stmt, params)
        else:
            cur.execute(stmt, params if last else None)


def mysql(port: int, statements: Sequence[str], params: Any = None,
          many: bool = False) -> list[tuple[Any, ...]]:
    """Run statements on the MariaDB at ``port`` in one transaction, the session in UTC;
    ``params`` bind the last (``many``: once per row of ``params``); its rows."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="",
                           charset="utf8mb4", autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            execute(cur, statements, params, many)
            rows = list(cur.fetchall())
        conn.commit()
        return rows
    finally:
        conn.close()


def postgresql(port: int, statements: Sequence[str], params: Any = None
               ) -> list[tuple[Any, ...]]:
    """Run statements on the PostgreSQL at ``port`` in one transaction (session in UTC);
    ``params`` bind the last; the rows of the last that returns any."""
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres",
                         dbname="postgres", options="-c timezone=UTC") as conn:
        rows: list[tuple[Any, ...]] = []
        for i, stmt in enumerate(statements):
            cur = conn.execute(stmt.encode(), params if i == len(statements) - 1 else None)
            if cur.description is not None:
                rows = list(cur.fetchall())
        return rows


#: MariaDB's error for an XID no session can decide (yet).
XAER_NOTA = 1397


def xa_decide(port: int, statement: str, timeout: float = 30.0) -> None:
    """``XA COMMIT`` / ``XA ROLLBACK`` of a transaction prepared by a session that just
    closed, from a new session. MariaDB detaches the prepared transaction from its closed
    connection in the background; until then every other session gets XAER_NOTA (seen in CI
    right after a large prepare), so that one error is waited out."""
    deadline = time.monotonic() + timeout
    while True:
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="",
                               autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
            return
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != XAER_NOTA or time.monotonic() > deadline:
                raise
        finally:
            conn.close()
        time.sleep(0.1)
