"""Restarts right after the awkward seqnos: a fragmented transaction, a DDL, a table without a
key, generated and invisible columns. Each case is the last thing a group applied before its
process stopped; after the restart the group must go on and converge, not stop for good."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .conftest import Replication
from .tables import NOPK_MYSQL, NOPK_NAMES, NOPK_PG, compare, create_tables

GENERATED_MYSQL = """CREATE TABLE {s}.gen (
  id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, st INT AS (a + 1) STORED,
  h VARCHAR(10) INVISIBLE DEFAULT 'hid', txt VARCHAR(20)) DEFAULT CHARSET=utf8mb4"""
GENERATED_PG = """CREATE TABLE "{s}".gen (
  id INT PRIMARY KEY, a INT, v INT GENERATED ALWAYS AS (a * 2) STORED,
  st INT GENERATED ALWAYS AS (a + 1) STORED, h VARCHAR(10), txt VARCHAR(20))"""
GENERATED_NOPK_MYSQL = """CREATE TABLE {s}.gen_nopk (
  a INT, v INT AS (a * 3) VIRTUAL, st INT AS (a - 1) STORED, txt VARCHAR(20))
  DEFAULT CHARSET=utf8mb4"""
GENERATED_NOPK_PG = """CREATE TABLE "{s}".gen_nopk (
  a INT, v INT GENERATED ALWAYS AS (a * 3) STORED, st INT GENERATED ALWAYS AS (a - 1) STORED,
  txt VARCHAR(20))"""
BIG_MYSQL = "CREATE TABLE {s}.big (id INT PRIMARY KEY, pad VARCHAR(40)) DEFAULT CHARSET=utf8mb4"
BIG_PG = 'CREATE TABLE "{s}".big (id INT PRIMARY KEY, pad VARCHAR(40))'
GEN_NAMES = ["id", "a", "v", "st", "h", "txt"]
GEN_NOPK_NAMES = ["a", "v", "st", "txt"]


def _fragmented(rep: Replication) -> None:
    """30,000 rows in one source transaction: six fragments of 5,000 rows."""
    rows = [(i, f"row {i} " + "x" * 20) for i in range(30_000)]
    rep.src(f"INSERT INTO {rep.schema}.big VALUES (%s, %s)", params=rows, many=True)


def _ddl(rep: Replication) -> None:
    rep.src(f"ALTER TABLE {rep.schema}.big ADD COLUMN extra INT NULL")
    rep.pgsql(f'ALTER TABLE "{rep.schema}".big ADD COLUMN extra INT NULL')


def _keyless(rep: Replication) -> None:
    rep.src(f"INSERT INTO {rep.schema}.nopk VALUES (1, 'dup', 1.5), (1, 'dup', 1.5)",
            f"UPDATE {rep.schema}.nopk SET c = 2.5 WHERE a = 7 LIMIT 1")


def _generated(rep: Replication) -> None:
    s = rep.schema
    rep.src(f"INSERT INTO {s}.gen (id, a, txt) VALUES (100, 5, 'g'), (101, NULL, 'n')",
            f"UPDATE {s}.gen SET a = a + 10, txt = 'upd' WHERE id < 3",
            f"INSERT INTO {s}.gen_nopk (a, txt) VALUES (9, 'k'), (9, 'k')",
            f"UPDATE {s}.gen_nopk SET txt = 'moved' WHERE a = 2 LIMIT 1")


CASES: dict[str, Callable[[Replication], None]] = {
    "fragmented": _fragmented, "ddl": _ddl, "keyless": _keyless, "generated": _generated,
}


def _prepare(rep: Replication) -> None:
    create_tables(rep, (BIG_MYSQL, BIG_PG), (NOPK_MYSQL, NOPK_PG),
                  (GENERATED_MYSQL, GENERATED_PG), (GENERATED_NOPK_MYSQL, GENERATED_NOPK_PG))
    s = rep.schema
    rep.src(f"INSERT INTO {s}.nopk VALUES (7, 'a', 1.0), (7, 'a', 1.0), (8, NULL, NULL)",
            f"INSERT INTO {s}.gen (id, a, txt) VALUES (1, 1, 'one'), (2, 2, 'two')",
            f"INSERT INTO {s}.gen (id, a, h, txt) VALUES (3, 3, 'shown', 'three')",
            f"INSERT INTO {s}.gen_nopk (a, txt) VALUES (2, 'x'), (2, 'x'), (NULL, 'nul')")


def _after(rep: Replication) -> None:
    s = rep.schema
    rep.src(f"UPDATE {s}.big SET pad = 'after restart' WHERE id % 1000 = 0",
            f"DELETE FROM {s}.big WHERE id >= 29990")
    rep.src(f"UPDATE {s}.gen SET a = 42 WHERE id = 100", f"DELETE FROM {s}.gen WHERE id = 101")
    rep.src(f"DELETE FROM {s}.gen_nopk WHERE a = 9 LIMIT 1",
            f"UPDATE {s}.nopk SET b = 'post' WHERE a = 1 LIMIT 1")


@pytest.mark.parametrize("case", list(CASES))
def test_group_restarts_right_after_an_awkward_seqno(make_replication: Callable[..., Replication],
                                                     case: str) -> None:
    rep = make_replication()
    rep.start()
    _prepare(rep)
    before = rep.wait_source_applied()
    CASES[case](rep)
    # Each case is one source transaction: the awkward seqno is the last one applied
    # when the process stops.
    last = before + 1
    rep.wait_thl_tail(last)
    rep.wait_applied(last)
    assert rep.thl_tail() == last
    rep.stop()
    rep.start()
    for group in ("mariadb", "pg"):
        status = rep.wait_state(group, "ONLINE")
        assert status["appliedLastSeqno"] == last, status
    _after(rep)
    rep.wait_source_applied()
    assert compare(rep, "big", ["id", "pad"], "id") == (29_990 if case == "fragmented" else 0)
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") >= 3
    assert compare(rep, "gen", GEN_NAMES, "id") >= 3
    assert compare(rep, "gen_nopk", GEN_NOPK_NAMES, "a, txt") >= 3
