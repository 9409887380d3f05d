"""XA transactions reach the THL exactly as the source decided them: a commit as one
transaction at its commit's place, a rollback not at all, whatever came between the prepare
and the outcome (other transactions, a disconnect, an extractor killed and restarted)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pymysql

from extractor.xa import META_XA_OPEN, META_XA_PREPARE_GTID, META_XA_XID
from replicator.crashpoints import EXIT_STATUS
from thl_topics.event import RowAction, RowChange, ThlEvent, ThlValue

from ..harness.sql import xa_decide
from .conftest import ServiceUnderTest, wait_leading


def _connect(svc: ServiceUnderTest) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=svc.source.port, user="root", password="",
                           autocommit=True)


def _prepare(svc: ServiceUnderTest, xid: str, *statements: str) -> None:
    """XA START .. XA PREPARE in a session that then disconnects (the transaction stays
    prepared on MariaDB 10.5+, as a transaction manager's would between its two phases)."""
    conn = _connect(svc)
    try:
        with conn.cursor() as cur:
            cur.execute(f"XA START {xid}")
            for stmt in statements:
                cur.execute(stmt)
            cur.execute(f"XA END {xid}")
            cur.execute(f"XA PREPARE {xid}")
    finally:
        conn.close()


def _inserted(events: list[ThlEvent], table: str) -> list[ThlValue]:
    """The ids inserted into ``table``, in THL order."""
    return [row[0] for e in events for item in e.data
            if isinstance(item, RowChange) and item.table == table
            and item.action is RowAction.INSERT for row in item.column_values]


def _wait_inserted(svc: ServiceUnderTest, table: str, last: int) -> list[ThlEvent]:
    """Every event, once the THL holds the insert of ``last`` into ``table``."""
    deadline = time.monotonic() + 60
    while True:
        events = svc.events()
        if last in _inserted(events, table):
            return events
        assert time.monotonic() < deadline, (_inserted(events, table),
                                             svc.log_path.read_text()[-3000:]
                                             if svc.log_path.exists() else "")
        time.sleep(0.3)


def _seqno_of(events: list[ThlEvent], table: str, first_id: int) -> int:
    for e in events:
        for item in e.data:
            if isinstance(item, RowChange) and item.table == table and \
                    item.column_values and item.column_values[0][0] == first_id:
                return e.seqno
    raise AssertionError(f"no insert of {first_id} into {table} in the THL")


def test_committed_xa_transactions_arrive_once_in_commit_order_rolled_back_never(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service(fragment_rows=50, batch_ms=20)
    ex, thread = svc.start_thread()
    wait_leading(svc, ex, thread)
    s = svc.schema
    try:
        svc.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        _prepare(svc, "'x1'", f"INSERT INTO {s}.t VALUES (1, 'two-phase')")
        svc.sql(f"INSERT INTO {s}.t VALUES (2, 'between')")  # commits before x1 does
        _prepare(svc, "'x2','branch',7", f"INSERT INTO {s}.t VALUES (3, 'rolled back')",
                 f"UPDATE {s}.t SET v = 'never' WHERE id = 2")
        xa_decide(svc.source.port, "XA ROLLBACK 'x2','branch',7")
        conn = _connect(svc)
        with conn.cursor() as cur:  # one phase: logged as an ordinary transaction
            cur.execute("XA START 'x3'")
            cur.execute(f"INSERT INTO {s}.t VALUES (4, 'one phase')")
            cur.execute("XA END 'x3'")
            cur.execute("XA COMMIT 'x3' ONE PHASE")
        conn.close()
        _prepare(svc, "X'00ff',X'01',3",
                 *(f"INSERT INTO {s}.t VALUES ({i}, 'big xa')" for i in range(100, 220)))
        xa_decide(svc.source.port, "XA COMMIT 'x1'")  # from another session than its prepare
        xa_decide(svc.source.port, "XA COMMIT X'00ff',X'01',3")
        svc.sql(f"INSERT INTO {s}.t VALUES (5, 'after')")
        events = [e for e in _wait_inserted(svc, "t", 5) if any(
            isinstance(i, RowChange) and i.table == "t" for i in e.data)]
        rows_t = _inserted(events, "t")
        assert rows_t == [2, 4, 1, *range(100, 220), 5], rows_t
        assert not any(isinstance(i, RowChange) and i.action is RowAction.UPDATE
                       for e in events for i in e.data), "a rolled-back update was published"
        x1 = next(e for e in events if e.seqno == _seqno_of(events, "t", 1))
        assert x1.metadata[META_XA_XID] == "X'7831',X'',1"
        assert x1.metadata["gtid"] != x1.metadata[META_XA_PREPARE_GTID]
        between = next(e for e in events if e.seqno == _seqno_of(events, "t", 2))
        assert between.event_id < x1.event_id and between.seqno < x1.seqno
        # While x1 was prepared, the events said so (a restart would read it again).
        assert "X'7831',X'',1" in json.loads(between.metadata[META_XA_OPEN])
        big = [e for e in svc.events() if e.metadata.get(META_XA_XID) == "X'00ff',X'01',3"]
        assert len({e.seqno for e in big}) == 1, "one XA transaction, one seqno"
        assert [e.fragno for e in big] == [0, 1, 2] and big[-1].last_frag
        assert ex.status.xaPrepared == "NONE"
    finally:
        ex.stop()
        thread.join(30)
    assert not thread.errors  # type: ignore[attr-defined]


def test_an_xa_left_prepared_holds_back_nothing_shows_in_status_and_stops_cleanly(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service(batch_ms=20)
    s = svc.schema
    svc.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
    # Another schema, not replicated: its prepared XA is none of this service's business.
    svc.sql(f"CREATE DATABASE {s}_x")
    svc.sql(f"CREATE TABLE {s}_x.t (id INT PRIMARY KEY)")
    proc = svc.start_process()
    svc.wait_streaming(proc=proc)
    try:
        svc.sql(f"INSERT INTO {s}.t VALUES (1)")
        _prepare(svc, "'a3x'", f"INSERT INTO {s}_x.t VALUES (2)")
        _prepare(svc, "'a3'", f"INSERT INTO {s}.t VALUES (2)")
        svc.sql(f"INSERT INTO {s}.t VALUES (3)")
        deadline = time.monotonic() + 60
        while _inserted(svc.events(), "t") != [1, 3]:
            assert time.monotonic() < deadline, _inserted(svc.events(), "t")
            time.sleep(0.3)
        deadline = time.monotonic() + 30
        while "'a3'" not in _status(svc).get("xaPrepared", ""):
            assert time.monotonic() < deadline, _status(svc)
            time.sleep(0.3)
        assert "1 prepared, oldest 'a3' (1 row(s)) open for" in _status(svc)["xaPrepared"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        assert proc.returncode == 0, svc.log_path.read_text()[-3000:]
    finally:
        xa_decide(svc.source.port, "XA ROLLBACK 'a3'")
        xa_decide(svc.source.port, "XA ROLLBACK 'a3x'")
        svc.sql(f"DROP DATABASE {s}_x")


def _status(svc: ServiceUnderTest) -> dict[str, str]:
    from replicator.control import ComponentNodes
    from replicator.zk import connect

    zk = connect(svc.cfg.zookeeper.hosts, 10)
    try:
        nodes = ComponentNodes(zk, svc.cfg.zookeeper.root, svc.name, "extractor")
        return dict(nodes.status() or {})
    finally:
        zk.stop()
        zk.close()


def test_sigkill_between_prepare_and_commit_delivers_once(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    """Killed right after a THL commit made while x9 was prepared (crash point
    extract-xa-open): the restart reads x9's prepare again, publishes it at its commit, once;
    then killed again while x10 is prepared and nothing else was committed, and x10 is
    committed and x11 rolled back while the extractor is down. An XA of a schema this
    service does not replicate, prepared meanwhile (as other tests' are on the shared
    source), holds nothing back: commits made while only it is open are not the crash
    point's."""
    svc = make_service(batch_ms=20, fragment_rows=40)
    s = svc.schema
    svc.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v LONGTEXT)")
    svc.sql(f"CREATE DATABASE {s}_x")
    svc.sql(f"CREATE TABLE {s}_x.t (id INT PRIMARY KEY)")
    proc = svc.start_process(crash_at="extract-xa-open")
    try:
        svc.wait_streaming(proc=proc)
        _prepare(svc, "'x9x'", f"INSERT INTO {s}_x.t VALUES (1)")
        for _ in range(2):  # the second one needs the extractor alive after the first commit
            svc.wait_streaming(proc=proc, after=svc.tail_seqno())
    finally:
        xa_decide(svc.source.port, "XA ROLLBACK 'x9x'")
        svc.sql(f"DROP DATABASE {s}_x")
    _prepare(svc, "'x9'", *(f"INSERT INTO {s}.t VALUES ({i}, REPEAT('x', 1000))"
                            for i in range(10, 110)))
    svc.sql(f"INSERT INTO {s}.t VALUES (1, 'after the prepare')")
    assert proc.wait(60) == EXIT_STATUS, svc.log_path.read_text()[-3000:]
    proc = svc.start_process()
    svc.wait_streaming(proc=proc, after=svc.tail_seqno())
    xa_decide(svc.source.port, "XA COMMIT 'x9'")
    svc.sql(f"INSERT INTO {s}.t VALUES (2, 'after the commit')")
    _wait_inserted(svc, "t", 2)
    _prepare(svc, "'x10'", f"INSERT INTO {s}.t VALUES (3, 'x10')")
    _prepare(svc, "'x11'", f"INSERT INTO {s}.t VALUES (4, 'x11')")
    deadline = time.monotonic() + 30
    while "2 prepared" not in _status(svc).get("xaPrepared", ""):
        assert time.monotonic() < deadline, _status(svc)
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    xa_decide(svc.source.port, "XA COMMIT 'x10'")
    xa_decide(svc.source.port, "XA ROLLBACK 'x11'")
    proc = svc.start_process()
    try:
        svc.sql(f"INSERT INTO {s}.t VALUES (5, 'after the restart')")
        events = _wait_inserted(svc, "t", 5)
        assert _inserted(events, "t") == [1, *range(10, 110), 2, 3, 5], _inserted(events, "t")
        whole = [e.seqno for e in events if e.last_frag]
        assert whole == list(range(len(whole))), "seqnos not gapless"
        x9 = [e for e in events if e.metadata.get(META_XA_XID) == "X'7839',X'',1"]
        assert [e.fragno for e in x9] == [0, 1, 2]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, svc.log_path.read_text()[-3000:]
