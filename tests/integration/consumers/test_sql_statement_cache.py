"""The SQL applier's compiled statements follow the tables they were made for, across DDL.

Found by the parallel kill test: after a statement event the applier reflects its tables
again, and a new table object can get a dropped one's ``id()``; a statement text cached by
that id then wrote one schema's rows into another schema's table of the same layout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.sql.applier import SqlApplier
from consumers.sql.config import SqlTarget
from replicator.config import ServiceSettings
from stack.services.mariadb import MariaDB
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent

_SPECS = [ColumnSpec(index=1, name="id", type="INT", nullable=False, primary_key=True),
          ColumnSpec(index=2, name="v", type="VARCHAR", length=16)]


def _event(seqno: int, *items: RowChange | Statement) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="src", event_id=f"bin.000001:{seqno};0",
                    shard_id="db", tstamp=int(time.time() * 1e6), data=list(items))


def _insert(schema: str, key: int) -> RowChange:
    return RowChange(RowAction.INSERT, schema, "t", column_specs=_SPECS,
                     column_values=[[key, schema[-2:]]])


@pytest.fixture
def schemas(mariadb_target: MariaDB) -> Iterator[tuple[str, str, str]]:
    """Two schemas with the same table, and the tracking schema, on the MariaDB target."""
    base = f"cache_{uuid.uuid4().hex[:8]}"
    names = (f"{base}_a", f"{base}_b", f"tungsten_{base}")
    conn = pymysql.connect(host="127.0.0.1", port=mariadb_target.port, user="root",
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            for s in names[:2]:
                cur.execute(f"CREATE DATABASE {s}")
                cur.execute(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(16))")
        yield names
        with conn.cursor() as cur:
            for s in names:
                cur.execute(f"DROP DATABASE IF EXISTS {s}")
    finally:
        conn.close()


def test_rows_after_a_statement_go_to_their_own_table(
        mariadb_target: MariaDB, schemas: tuple[str, str, str]) -> None:
    a, b, tracking = schemas
    applier = SqlApplier(
        SqlTarget(url=f"mysql+pymysql://root@127.0.0.1:{mariadb_target.port}/"),
        ApplierContext(ServiceSettings(service=tracking.removeprefix("tungsten_")), "g"))
    applier.connect()
    try:
        for seqno in range(40):
            applier.begin()
            # One schema's rows, a DDL (the tables are reflected again), the other's rows.
            first, second = (a, b) if seqno % 2 else (b, a)
            event = _event(seqno, _insert(first, seqno), Statement(
                f"CREATE TABLE IF NOT EXISTS {first}.ddl{seqno} (x INT)",
                default_schema=first), _insert(second, seqno))
            applier.apply(event)
            applier.commit(Position.of(event, 0))
    finally:
        applier.close()
    conn = pymysql.connect(host="127.0.0.1", port=mariadb_target.port, user="root")
    try:
        with conn.cursor() as cur:
            for s in (a, b):
                cur.execute(f"SELECT id, v FROM {s}.t ORDER BY id")
                assert cur.fetchall() == tuple((i, s[-2:]) for i in range(40)), s
    finally:
        conn.close()
