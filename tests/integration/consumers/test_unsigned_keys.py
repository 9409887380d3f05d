"""Maximal unsigned keys on every SQL target: BIGINT UNSIGNED 18446744073709551615 as a
primary key, inserted, updated and deleted."""

from __future__ import annotations

from decimal import Decimal

from .conftest import Replication

MAX = 18446744073709551615


def test_the_largest_bigint_unsigned_key_is_inserted_updated_and_deleted(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.wide (id BIGINT UNSIGNED PRIMARY KEY, v INT) "
            "DEFAULT CHARSET=utf8mb4")
    rep.src(f"INSERT INTO {s}.wide VALUES (%s, %s)",
            params=[(MAX, 1), (0, 2), (1 << 63, 3), (MAX - 1, 4)], many=True)
    rep.src(f"UPDATE {s}.wide SET v = 10 WHERE id = {MAX}",
            f"DELETE FROM {s}.wide WHERE id = {MAX - 1}")
    rep.wait_source_applied()
    expected = [(0, 2), (1 << 63, 3), (MAX, 10)]
    assert rep.tgt(f"SELECT id, v FROM {s}.wide ORDER BY id") == expected
    assert rep.pgsql(f'SELECT id, v FROM "{s}".wide ORDER BY id') == [
        (Decimal(i), v) for i, v in expected]


def test_a_value_refused_inside_a_batched_block_names_its_statement_and_seqno(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.narrow (id INT PRIMARY KEY, v BIGINT) DEFAULT CHARSET=utf8mb4")
    # Made by hand on PostgreSQL, too narrow for the source's values.
    rep.pgsql(f'CREATE SCHEMA IF NOT EXISTS "{s}"',
              f'CREATE TABLE "{s}".narrow (id INT PRIMARY KEY, v INTEGER)')
    rep.src(f"INSERT INTO {s}.narrow VALUES (1, 1), (2, 2)")
    rep.src(f"INSERT INTO {s}.narrow VALUES (3, {1 << 40})")
    stopped = rep.wait_state("pg", "OFFLINE:ERROR")
    message = stopped["pendingExceptionMessage"]
    assert f"INSERT into {s}.narrow" in message and "out of range" in message, message
    assert "trep_commit_seqno" not in message, message
    assert rep.pgsql(f'SELECT id, v FROM "{s}".narrow ORDER BY id') == [(1, 1), (2, 2)]
    assert stopped["pendingErrorSeqno"] == stopped["appliedLastSeqno"] + 1
