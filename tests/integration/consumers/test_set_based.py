"""Set-based apply (the SQL targets' default) on MariaDB and PostgreSQL: a block's changes
collapsed by primary key come out equal to the source, whatever the history of each key;
what the target refuses in that form goes again in order; divergence is still found."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections.abc import Callable

from ..harness.thl import commit_marker, tail_record, wait_marker
from .conftest import Replication
from .tables import TYPES_MYSQL, TYPES_NAMES, TYPES_PG, TYPES_ROWS, compare, create_tables

#: One block for the whole backlog: every key's history collapses together.
ONE_BLOCK = {"block_commit_events": 10_000, "block_commit_ms": 5_000}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _counter(port: int, name: str, group: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = re.search(rf'{name}_total{{group="{group}",service="[^"]+"}} (\S+)', text)
    assert found is not None, text
    return float(found.group(1))


def _backlog_then_apply(rep: Replication, write: Callable[[], None]) -> int:
    """Write the source's changes while only the extractor runs, then start the groups:
    they apply the whole backlog from the THL; the metrics port."""
    rep.start(consumers=[])
    write()
    marker = commit_marker(rep.src, rep.schema)
    wait_marker(lambda: tail_record(rep.cfg.kafka.client(), rep.cfg.thl_topic), marker,
                time.monotonic() + 60)
    rep.stop()
    port = _free_port()
    rep.start(metrics_port=port)
    rep.wait_source_applied()
    return port


def _same(rep: Replication, table: str, columns: str, order: str) -> list[tuple[object, ...]]:
    s = rep.schema
    source = rep.src(f"SELECT {columns} FROM {s}.{table} ORDER BY {order}")
    assert rep.tgt(f"SELECT {columns} FROM {s}.{table} ORDER BY {order}") == source
    assert [tuple(r) for r in rep.pgsql(
        f'SELECT {columns} FROM "{s}".{table} ORDER BY {order}')] == source
    return source


def test_every_history_of_a_key_collapses_to_the_source_rows(
        make_replication: Callable[..., Replication]) -> None:
    rep = make_replication(**ONE_BLOCK)
    s = rep.schema

    def write() -> None:
        rep.src(f"CREATE TABLE {s}.acct (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)",
                f"CREATE TABLE {s}.pair (a INT, b VARCHAR(8), v INT, PRIMARY KEY (b, a))",
                f"CREATE TABLE {s}.bag (v INT)")
        rep.src(f"INSERT INTO {s}.acct VALUES (1,'one',1),(2,'two',2),(3,'three',3),"
                "(4,'four',4),(5,'five',5)")
        for n in range(3):
            rep.src(f"UPDATE {s}.acct SET n = n + 10 WHERE id = 1",       # kept
                    f"INSERT INTO {s}.acct VALUES ({10 + n}, 'new', {n})",  # new
                    f"DELETE FROM {s}.acct WHERE id = {10 + n}" if n == 1 else "DO 0")
        rep.src(f"DELETE FROM {s}.acct WHERE id = 2",                       # gone
                f"DELETE FROM {s}.acct WHERE id = 3",
                f"INSERT INTO {s}.acct VALUES (3, 'back', 33)",               # gone, back
                f"UPDATE {s}.acct SET id = 40 WHERE id = 4",                  # key move
                f"UPDATE {s}.acct SET id = 4 WHERE id = 5",                   # into the gap
                f"UPDATE {s}.acct SET v = 'after the move' WHERE id = 4")
        rep.src(f"INSERT INTO {s}.pair VALUES (1,'x',1),(1,'y',2),(2,'x',3)",
                f"UPDATE {s}.pair SET v = v * 10 WHERE a = 1",
                f"DELETE FROM {s}.pair WHERE a = 2",
                f"INSERT INTO {s}.bag VALUES (1),(1),(2)",
                f"DELETE FROM {s}.bag WHERE v = 1 LIMIT 1")

    port = _backlog_then_apply(rep, write)
    assert _same(rep, "acct", "id, v, n", "id") == [
        (1, "one", 31), (3, "back", 33), (4, "after the move", 5), (10, "new", 0),
        (12, "new", 2), (40, "four", 4)]
    _same(rep, "pair", "a, b, v", "b, a")
    _same(rep, "bag", "v", "v")
    for group in ("mariadb", "pg"):
        # The keyed tables' rows up to the key move were collapsed, nothing was refused.
        assert _counter(port, "trep_rows_collapsed", group) >= 15, group
        assert _counter(port, "trep_set_based_refused", group) == 0, group


def test_what_the_target_refuses_in_set_form_goes_again_in_order(
        make_replication: Callable[..., Replication]) -> None:
    """Unique values swapped between rows (PostgreSQL upserts one row onto the other's
    value) and a child row inserted before the parent it ends up with (MariaDB keeps the
    source's foreign keys; the block's inserts go in the order tables were first touched):
    both targets refuse the collapsed block, apply it again in order and end equal."""
    rep = make_replication(**ONE_BLOCK)
    s = rep.schema

    def write() -> None:
        rep.src(f"CREATE TABLE {s}.parent (id INT PRIMARY KEY, name VARCHAR(10))",
                f"CREATE TABLE {s}.child (id INT PRIMARY KEY, parent INT NOT NULL, "
                f"FOREIGN KEY (parent) REFERENCES {s}.parent (id))",
                f"CREATE TABLE {s}.seat (id INT PRIMARY KEY, place INT, UNIQUE KEY (place))")
        rep.src(f"INSERT INTO {s}.parent VALUES (1, 'first')",
                f"INSERT INTO {s}.seat VALUES (1, 10), (2, 20)")
        rep.src(f"INSERT INTO {s}.child VALUES (1, 1)")
        rep.src(f"INSERT INTO {s}.parent VALUES (2, 'second')",
                f"UPDATE {s}.child SET parent = 2 WHERE id = 1")
        rep.src(f"UPDATE {s}.seat SET place = NULL WHERE id = 1",
                f"UPDATE {s}.seat SET place = 10 WHERE id = 2",
                f"UPDATE {s}.seat SET place = 20 WHERE id = 1")

    rep.pgsql(f'CREATE TABLE "{s}".seat (id INT PRIMARY KEY, place INT UNIQUE)')
    port = _backlog_then_apply(rep, write)
    _same(rep, "parent", "id, name", "id")
    assert _same(rep, "child", "id, parent", "id") == [(1, 2)]
    assert _same(rep, "seat", "id, place", "id") == [(1, 20), (2, 10)]
    assert _counter(port, "trep_set_based_refused", "mariadb") >= 1
    assert _counter(port, "trep_set_based_refused", "pg") >= 1
    assert rep.status("mariadb")["state"] == rep.status("pg")["state"] == "ONLINE"


def test_a_row_missing_on_the_target_still_stops_the_group_at_its_seqno(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.acct (id INT PRIMARY KEY, v INT)")
    rep.src(f"INSERT INTO {s}.acct VALUES (1, 1), (2, 2), (3, 3)")
    rep.wait_source_applied()
    rep.tgt(f"DELETE FROM {s}.acct WHERE id = 2")
    rep.pgsql(f'DELETE FROM "{s}".acct WHERE id = 2')
    rep.src(f"UPDATE {s}.acct SET v = 10 WHERE id = 1")
    rep.src(f"UPDATE {s}.acct SET v = 20 WHERE id = 2")
    for group in ("mariadb", "pg"):
        stopped = rep.wait_state(group, "OFFLINE:ERROR")
        message = stopped["pendingExceptionMessage"]
        assert "diverged" in message and f"{s}.acct" in message, message
        assert stopped["pendingErrorSeqno"] == stopped["appliedLastSeqno"] + 1
    assert rep.tgt(f"SELECT id, v FROM {s}.acct ORDER BY id") == [(1, 10), (3, 3)]


#: Texts of each character set's columns: escapes, quotes, NUL, trailing spaces, empty.
_TEXTS = ["plain", "é ü ÿ", "'q' \"d\" \\ \n \r \x1a", "", "trailing  ", None,
          "a%s%%b"]
_WIDE = ["漢字 ∑", "🎉 party", "x" * 3000]


def test_text_of_every_character_set_arrives_exactly_in_new_and_kept_rows(
        make_replication: Callable[..., Replication]) -> None:
    """MariaDB gets the strings of its UTF-8 text columns (utf8mb4 and utf8mb3, CHAR,
    VARCHAR, TEXT, JSON) as hexadecimal literals, and those of other columns (latin1, ENUM)
    quoted: both, in new rows (INSERT) and in kept ones (the upsert that counts the rows it
    finds), end equal to the source, and none is refused."""
    rep = make_replication()
    s = rep.schema
    port = _free_port()
    rep.start(metrics_port=port)
    rep.src(f"CREATE TABLE {s}.texts (id INT PRIMARY KEY, u4 VARCHAR(3100) CHARSET utf8mb4, "
            "u3 VARCHAR(40) CHARSET utf8mb3, l1 VARCHAR(40) CHARSET latin1, "
            "ch CHAR(12) CHARSET utf8mb4, tx TEXT CHARSET utf8mb4, "
            "e ENUM('plain', 'é ü ÿ', '') CHARSET utf8mb4, j JSON)")
    rows = [(i, (_TEXTS + _WIDE)[i % 10], _TEXTS[i % 7] if i % 7 != 3 else "漢字",
             _TEXTS[(i + 1) % 7], (_TEXTS[i % 7] or "")[:12] or None, (_WIDE + _TEXTS)[i % 10],
             ["plain", "é ü ÿ", "", None][i % 4], '{"k": "é 🎉", "n": [1, 2]}' if i % 2 else None)
            for i in range(1, 121)]
    rep.src(f"INSERT INTO {s}.texts VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", params=rows,
            many=True)
    rep.wait_source_applied()
    # One transaction, one block: every row is there and kept, with new texts.
    rep.src(f"UPDATE {s}.texts SET u4 = CONCAT(COALESCE(u4, 'n'), ' 🎉'), "
            "u3 = CONCAT('∑ ', COALESCE(u3, '')), l1 = CONCAT(COALESCE(l1, ''), ' ñ'), "
            "tx = REVERSE(tx), e = 'é ü ÿ', j = NULL WHERE id % 3 = 0",
            f"UPDATE {s}.texts SET ch = NULL, j = '[\"∑\"]' WHERE id % 3 = 1")
    rep.wait_source_applied()
    columns = "id, u4, u3, l1, ch, tx, e, j"
    if rep.tgt(f"SELECT {columns} FROM {s}.texts ORDER BY id") != rep.src(
            f"SELECT {columns} FROM {s}.texts ORDER BY id"):
        raise AssertionError("the MariaDB target differs from the source")
    pg = rep.pgsql(f'SELECT id, u4, u3, l1, ch, tx, e FROM "{s}".texts ORDER BY id')
    assert [tuple(r) for r in pg] == rep.src(
        f"SELECT id, u4, u3, l1, ch, tx, e FROM {s}.texts ORDER BY id")
    for group in ("mariadb", "pg"):
        assert _counter(port, "trep_rows_collapsed", group) >= 120 + 80, group
        assert _counter(port, "trep_set_based_refused", group) == 0, group


#: Texts a COPY must carry as they are: its own escapes, separators and NULL marker too.
AWKWARD = ["tab\there", "line\nbreak\r\n", "back\\slash \\N \\.", "\\N", "", "é ü 漢字 🎉",
           "'quoted' \"double\"", "x" * 3000, None]


def test_many_new_rows_of_one_table_arrive_exactly(
        make_replication: Callable[..., Replication]) -> None:
    """A block's new rows of a table (PostgreSQL: by COPY from 64 rows on) with texts full
    of COPY's own escapes, binary values, NULLs, decimals, times, and odd names."""
    rep = make_replication(**ONE_BLOCK)
    s = rep.schema
    rows = [(i, AWKWARD[i % len(AWKWARD)], bytes([i % 256, 0, 9, 10, 92, 255]) if i % 5 else
             None, f"{i}.{i:010d}", f"2024-02-{1 + i % 28:02d} 12:34:56.{i:06d}",
             f"odd {i}" if i % 3 else None) for i in range(1, 301)]

    def write() -> None:
        rep.src(f"CREATE TABLE {s}.`new rows` (id INT PRIMARY KEY, t TEXT, b VARBINARY(16), "
                "d DECIMAL(30,10), ts DATETIME(6), `sp ace \"q\"` VARCHAR(20))")
        for start in range(0, len(rows), 100):
            rep.src(f"INSERT INTO {s}.`new rows` VALUES (%s, %s, %s, %s, %s, %s)",
                    params=rows[start:start + 100], many=True)
        rep.src(f"UPDATE {s}.`new rows` SET t = 'kept' WHERE id = 7",
                f"DELETE FROM {s}.`new rows` WHERE id = 8")

    port = _backlog_then_apply(rep, write)
    source = rep.src(f"SELECT id, t, b, d, ts, `sp ace \"q\"` FROM {s}.`new rows` ORDER BY id")
    assert len(source) == 299 and source[6][1] == "kept"
    assert rep.tgt(f"SELECT id, t, b, d, ts, `sp ace \"q\"` FROM {s}.`new rows` "
                   "ORDER BY id") == source
    got = rep.pgsql(f'SELECT id, t, b, d, ts, "sp ace ""q""" FROM "{s}"."new rows" ORDER BY id')
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
            for r in got] == source
    assert _counter(port, "trep_set_based_refused", "pg") == 0


def test_every_column_type_arrives_exactly_in_many_new_rows(
        make_replication: Callable[..., Replication]) -> None:
    """The type matrix's edge values, 80 times over in one block: PostgreSQL takes them by
    COPY (its text form of every type, not the INSERT's literals), MariaDB as INSERTs."""
    rep = make_replication(**ONE_BLOCK)
    marks = ", ".join(["%s"] * len(TYPES_NAMES))
    rows = [(10 * n + row[0], *row[1:]) for n in range(80) for row in TYPES_ROWS]

    def write() -> None:
        create_tables(rep, (TYPES_MYSQL, TYPES_PG))
        for start in range(0, len(rows), 60):
            rep.src(f"INSERT INTO {rep.schema}.types ({', '.join(TYPES_NAMES)}) "
                    f"VALUES ({marks})", params=rows[start:start + 60], many=True)

    port = _backlog_then_apply(rep, write)
    assert compare(rep, "types", TYPES_NAMES, "id") == len(rows)
    assert _counter(port, "trep_rows_collapsed", "pg") >= len(rows)
    assert _counter(port, "trep_set_based_refused", "pg") == 0


def test_new_rows_the_target_refuses_by_copy_go_again_in_order(
        make_replication: Callable[..., Replication]) -> None:
    """PostgreSQL's copy of a table's new rows fails on a foreign key only the target has
    (the child table, first touched, is copied before its parents): the block goes again
    in order, and ends equal."""
    rep = make_replication(**ONE_BLOCK)
    s = rep.schema
    rep.pgsql(f'CREATE SCHEMA IF NOT EXISTS "{s}"',
              f'CREATE TABLE "{s}".parent (id INT PRIMARY KEY)',
              f'CREATE TABLE "{s}".child (id INT PRIMARY KEY, parent INT REFERENCES '
              f'"{s}".parent (id))')

    def write() -> None:
        rep.src(f"CREATE TABLE {s}.parent (id INT PRIMARY KEY)",
                f"CREATE TABLE {s}.child (id INT PRIMARY KEY, parent INT)")
        rep.src(f"INSERT INTO {s}.child VALUES (0, NULL)")
        rep.src(f"INSERT INTO {s}.parent VALUES (%s)", params=[(i,) for i in range(1, 101)],
                many=True)
        rep.src(f"INSERT INTO {s}.child VALUES (%s, %s)",
                params=[(i, i) for i in range(1, 101)], many=True)

    port = _backlog_then_apply(rep, write)
    _same(rep, "parent", "id", "id")
    assert len(_same(rep, "child", "id, parent", "id")) == 101
    assert _counter(port, "trep_set_based_refused", "pg") >= 1
    assert rep.status("pg")["state"] == "ONLINE"
