"""The conformance suite: every applier, against its real server, passes the same tests.

Each test runs once per kind registered in ``kinds.KINDS``. A kind declares what it can do
(keyless tables, replay safety); the tests check that it does exactly that, and that the
runtime's guarantees (restart, crash, reset, skip, outage) hold for it.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from decimal import Decimal

import pytest

from replicator.crashpoints import EXIT_STATUS
from thl_topics.reader import ThlReader
from thl_topics.values import incomplete_date

from ..harness import sql
from ..harness.processes import stacks
from ..harness.sql import xa_decide
from ..soak import outage_s
from .conftest import Conformance
from .tables import (
    BIG,
    BLOBS,
    COMPOSITE,
    GAINS_KEY,
    GENERATED,
    GOODS,
    HOSTILE,
    ITEMS,
    LINES,
    LOSES_KEY,
    NOPK,
    NOTES,
    ORDERS,
    PARTS,
    REKEYED,
    TYPES,
    TYPES_ROWS,
    ZERO_DATES,
    Table,
    mysql_columns,
)


def _items(svc: Conformance, start: int, count: int) -> None:
    s = svc.schema
    rows = [(i, f"item {i} ü😀", i % 7, Decimal(i) / 4) for i in range(start, start + count)]
    svc.src(f"INSERT INTO {s}.items VALUES (%s, %s, %s, %s)", params=rows, many=True)


def _workload(svc: Conformance, rounds: int = 5, first: int = 0) -> None:
    """Inserts, updates, deletes and key changes over the keyed tables (rounds numbered from
    ``first``: each round's keys are its own)."""
    s = svc.schema
    for r in range(first, first + rounds):
        base = 1000 * r
        _items(svc, base, 20)
        svc.src(f"UPDATE {s}.items SET qty = qty + 1, name = NULL WHERE id % 3 = 0 "
                f"AND id >= {base}",
                f"DELETE FROM {s}.items WHERE id % 5 = 1 AND id >= {base}")
        svc.src(f"INSERT INTO {s}.composite VALUES ('x{r}', {r}, 'v'), ('y{r}', {r}, NULL)",
                f"UPDATE {s}.composite SET v = 'changed' WHERE a = {r} AND b = 'x{r}'")


def _wait_exit(proc: subprocess.Popen[bytes], svc: Conformance, point: str) -> None:
    try:
        status = proc.wait(120 + svc.kind.startup_s)
    except subprocess.TimeoutExpired:
        where = stacks(proc.pid)
        proc.kill()
        raise AssertionError(f"crash point {point} never reached; the process's threads:\n"
                             f"{where}") from None
    log = svc.log_path.read_text()
    assert status == EXIT_STATUS and f"crash point {point} reached" in log, log[-3000:]


def test_inserts_updates_deletes_and_key_changes(conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(ITEMS, COMPOSITE)
    _workload(svc)
    s = svc.schema
    # Key changes: one row moves to another key, a composite key changes one part.
    svc.src(f"UPDATE {s}.items SET id = 99999, name = 'moved' WHERE id = 2")
    svc.src(f"UPDATE {s}.composite SET b = 'z0' WHERE a = 0 AND b = 'x0'")
    svc.src(f"UPDATE {s}.items SET id = id + 100000 WHERE id BETWEEN 4 AND 8")
    svc.wait_source_applied()
    counts = svc.compare(ITEMS, COMPOSITE)
    assert counts["items"] > 50 and counts["composite"] == 10


def test_table_without_a_key_is_applied_or_refused_as_declared(
        conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(ITEMS, NOPK)
    s = svc.schema
    _items(svc, 0, 5)
    before = svc.wait_source_applied()
    svc.src(f"INSERT INTO {s}.nopk VALUES (1, 'dup'), (1, 'dup'), (2, NULL), (NULL, NULL)")
    svc.src(f"UPDATE {s}.nopk SET b = 'one' WHERE a = 1 LIMIT 1",
            f"DELETE FROM {s}.nopk WHERE a IS NULL")
    if svc.kind.keyless:
        svc.wait_source_applied()
        assert svc.compare(NOPK) == {"nopk": 3}
        return
    status = svc.wait_state("OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == before + 1
    assert f"{s}.nopk has no primary key" in status["pendingExceptionMessage"]
    assert status["appliedLastSeqno"] == before


def test_type_matrix_round_trips(conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(TYPES)
    marks = ", ".join(["%s"] * len(TYPES.columns))
    svc.src("SET sql_mode = ''",
            f"INSERT INTO {svc.schema}.types ({mysql_columns(TYPES)}) VALUES ({marks})",
            params=TYPES_ROWS, many=True)
    svc.src(f"UPDATE {svc.schema}.types SET txt = 'ü😀', vb = x'00ff00', b9 = 257, "
            f"dt6 = '2001-02-03 04:05:06.000007' WHERE id = 2")
    svc.wait_source_applied()
    assert svc.compare(TYPES) == {"types": 3}
    if svc.kind.checks:
        # The check's canonical values must see through every type map: equal, exactly.
        checked = _check(svc, f"{svc.schema}.types")
        word = "equal" if svc.kind.checks_json_text else "different"
        assert f"{svc.schema}.types" in checked.stdout and word in checked.stdout, \
            checked.stdout + checked.stderr


def test_zero_dates_leave_the_group_online_as_null_or_as_they_are(
        conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(ZERO_DATES)
    s = svc.schema
    svc.src("SET sql_mode = ''",
            f"INSERT INTO {s}.zero_dates VALUES (1, '0000-00-00', '0000-00-00 00:00:00', "
            "'0000-00-00 00:00:00', '0000-00-00'), (2, '2024-03-00', '2024-00-00 10:00:00', "
            "NULL, 'partial'), (3, '2024-03-05', '2024-03-05 10:00:00', "
            "'2024-03-05 10:00:00', 'whole')")
    svc.src("SET sql_mode = ''", f"UPDATE {s}.zero_dates SET d = '0000-00-00' WHERE id = 3")
    svc.wait_source_applied()
    source = svc.src(f"SELECT id, d, t, ts, note FROM {s}.zero_dates ORDER BY id")
    dates = range(1, 4)  # d, t, ts; note is text and keeps '0000-00-00' everywhere
    expected = [svc.kind.normalize(ZERO_DATES, tuple(
        None if i in dates and not svc.kind.zero_dates_kept and incomplete_date(v) else v
        for i, v in enumerate(row))) for row in source]
    assert sorted(svc.kind.rows(s, ZERO_DATES), key=lambda r: r[0]) == expected
    assert svc.status()["state"] == "ONLINE"


def test_hostile_identifiers(conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(HOSTILE)
    table = f"{svc.schema}.`sel``ect \"tbl\" ü`"
    svc.src(f"INSERT INTO {table} VALUES (1, 'a\"b', 1, '😀', 1), (2, NULL, 2, 'x', 2), "
            f"(3, '%s', 3, '%(x)s', 3)")
    svc.src(f"UPDATE {table} SET `we\"ird` = 'q''uote', `order` = 10 WHERE `from` = 1")
    svc.src(f"DELETE FROM {table} WHERE `from` = 2")
    svc.wait_source_applied()
    assert svc.compare(HOSTILE) == {HOSTILE.name: 2}


def test_names_a_target_cannot_hold_are_mapped_by_one_rule(conformance: Conformance) -> None:
    """A schema name with a space, 64-character table and column names (PostgreSQL holds 63
    bytes; Kafka topics and FerretDB databases take no space): every kind maps them by the
    one naming rule (``consumers.naming``), stays ONLINE, and ``trepctl check``, which reads
    the target by the same rule, finds the table equal to the source."""
    svc = conformance
    odd = f"{svc.schema} x"
    svc.configure(filters={"replicate": [f"{svc.schema}.*", f"{odd}.*"]})
    svc.start()
    svc.create(ITEMS)
    table, long = "t" * 64, "c" * 64
    name = f"`{odd}`.`{table}`"
    try:
        svc.src(f"CREATE DATABASE `{odd}`")
        svc.src(f"CREATE TABLE {name} (id INT PRIMARY KEY, `{long}` VARCHAR(20), "
                f"`{long[:-1]}d` INT)")
        svc.src(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'b', 2), (3, NULL, 3)",
                f"UPDATE {name} SET `{long}` = 'z' WHERE id = 2",
                f"DELETE FROM {name} WHERE id = 3")
        _items(svc, 0, 3)
        svc.wait_source_applied()
        assert svc.status()["state"] == "ONLINE"
        checked = _check(svc, f"{odd}.{table}")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"{odd}.{table}" in checked.stdout and " equal" in checked.stdout, \
            checked.stdout
        assert svc.compare(ITEMS) == {"items": 3}
    finally:
        svc.src(f"DROP DATABASE IF EXISTS `{odd}`")


def _restart_right_after(svc: Conformance, *statements: str) -> int:
    """Each statement a transaction of its own on the source; the group's process stops
    once it applied the last one and starts again right there; that seqno."""
    last = svc.wait_source_applied() + len(statements)
    for statement in statements:
        svc.src(statement)
    svc.wait_applied(last)
    svc.stop()
    svc.start()
    return last


def test_truncate_empties_the_table_and_a_restart_right_after_it_changes_nothing(
        conformance: Conformance) -> None:
    """TRUNCATE between writes: the table's rows go at that seqno on every kind (the
    MariaDB target replays the statement; the others empty the table themselves; change
    topics get a delete for every key), the rows written after it arrive, and a restart
    right after the truncate changes nothing."""
    svc = conformance
    svc.start()
    svc.create(ITEMS, COMPOSITE)
    _items(svc, 0, 5)
    _workload(svc, rounds=1, first=3)
    svc.wait_source_applied()
    composite = svc.compare(COMPOSITE)["composite"]
    last = _restart_right_after(svc, f"TRUNCATE TABLE {svc.schema}.items")
    assert svc.wait_state("ONLINE")["appliedLastSeqno"] == last
    _items(svc, 100, 3)
    svc.wait_source_applied()
    assert svc.compare(ITEMS, COMPOSITE) == {"items": 3, "composite": composite}


def test_widened_and_narrowed_columns_take_their_values(conformance: Conformance) -> None:
    """``MODIFY qty BIGINT`` (was INT) between writes, then values beyond 2^31: every kind
    follows (PostgreSQL widens its column, Elasticsearch maps integers as long from the
    start, the warehouse widens the Delta column, Avro promotes int to long), and a restart
    right after the change finds nothing to redo. Then ``MODIFY price DECIMAL(10,2)`` (was
    (12,2)): the target keeps its wider column and takes the rows written after it."""
    svc = conformance
    svc.start()
    svc.create(ITEMS)
    _items(svc, 0, 3)
    s = svc.schema
    _restart_right_after(svc, f"ALTER TABLE {s}.items MODIFY qty BIGINT",
                         f"INSERT INTO {s}.items VALUES (10, 'wide', 5000000000, 1.25)")
    svc.src(f"UPDATE {s}.items SET qty = -5000000000 WHERE id = 1",
            f"ALTER TABLE {s}.items MODIFY price DECIMAL(10,2)",
            f"INSERT INTO {s}.items VALUES (11, 'narrow', 1, 12345678.25)",
            f"UPDATE {s}.items SET price = 0.5 WHERE id = 2")
    svc.wait_source_applied()
    assert svc.status()["state"] == "ONLINE"
    assert svc.compare(ITEMS) == {"items": 5}


def test_a_dropped_column_is_kept_and_checks_stay_equal(conformance: Conformance) -> None:
    """``DROP COLUMN`` between writes, ``schema_changes: lenient`` (the default): every kind
    goes on (a kept column is NULL in the rows written from then on), a restart right after
    the drop finds nothing to redo, and ``trepctl check`` (which reads the columns the
    source has) finds the table equal."""
    svc = conformance
    svc.start()
    svc.create(ITEMS)
    _items(svc, 0, 3)
    s = svc.schema
    _restart_right_after(svc, f"ALTER TABLE {s}.items DROP COLUMN price")
    svc.src(f"INSERT INTO {s}.items VALUES (10, 'after the drop', 4)",
            f"UPDATE {s}.items SET qty = 9 WHERE id = 1")
    svc.wait_source_applied()
    assert svc.status()["state"] == "ONLINE"
    _assert_equal(svc, f"{s}.items")


def _renamed(svc: Conformance) -> None:
    """items and big with rows; items renamed to goods (a restart right after), its name
    column to label; then updates and deletes of the rows written before the renames (one
    row left as it was), an insert, and ``DROP TABLE big``."""
    svc.start()
    svc.create(ITEMS, BIG)
    _items(svc, 0, 4)
    s = svc.schema
    svc.src(f"INSERT INTO {s}.big VALUES (1, 'kept?')")
    _restart_right_after(svc, f"RENAME TABLE {s}.items TO {s}.goods")
    svc.src(f"ALTER TABLE {s}.goods RENAME COLUMN name TO label",
            f"UPDATE {s}.goods SET qty = 40 WHERE id = 0",
            f"UPDATE {s}.goods SET label = 'relabelled' WHERE id = 1",
            f"DELETE FROM {s}.goods WHERE id = 2",
            f"INSERT INTO {s}.goods VALUES (10, 'after the renames', 4, 1.5)",
            f"DROP TABLE {s}.big")
    svc.wait_source_applied()
    assert svc.status()["state"] == "ONLINE"
    assert svc.compare(GOODS) == {"goods": 4}
    assert svc.kind.columns(s, "items") is None


def test_renamed_tables_and_columns_keep_their_rows(conformance: Conformance) -> None:
    """``schema_changes: lenient`` (the default): a renamed table's target (table, index,
    collection, Delta table, topic) follows with the rows written before the rename, a
    renamed column is added beside the old one and filled from it, so updates of earlier
    rows land on them; a restart right after the rename changes nothing; ``trepctl check``
    finds the table equal; a dropped table is kept (the MySQL family replays the drop)."""
    svc = conformance
    _renamed(svc)
    s = svc.schema
    columns = svc.kind.columns(s, "goods")
    assert columns is not None and {"label", "qty"} <= columns, columns
    _assert_equal(svc, f"{s}.goods")
    kept = svc.kind.columns(s, "big")
    assert (kept is None) if svc.kind.replays_ddl else (kept is not None), kept


def test_schema_changes_evolve_renames_and_drops(conformance: Conformance) -> None:
    """``schema_changes: evolve``: the same renames, and the old column goes; so does the
    dropped table, and a dropped column from every row already there (tables drop it at
    their next row, stores of documents and records at the drop itself); ``trepctl check``
    finds the table equal."""
    svc = conformance
    svc.configure(group={"schema_changes": "evolve"})
    _renamed(svc)
    s = svc.schema
    columns = svc.kind.columns(s, "goods")
    assert columns is not None and "label" in columns and "name" not in columns, columns
    assert svc.kind.columns(s, "big") is None
    svc.src(f"ALTER TABLE {s}.goods DROP COLUMN price",
            f"INSERT INTO {s}.goods VALUES (11, 'after the drop', 5)")
    svc.wait_source_applied()
    columns = svc.kind.columns(s, "goods")
    assert columns is not None and "price" not in columns, columns
    assert svc.compare(replace(GOODS, columns=("id", "label", "qty"))) == {"goods": 5}
    _assert_equal(svc, f"{s}.goods")


def test_a_changed_primary_key_is_followed_or_stops_the_group(
        conformance: Conformance) -> None:
    """``ALTER TABLE ... DROP PRIMARY KEY, ADD PRIMARY KEY (code)`` between writes: a target
    that follows it has the source's rows by the new key, a restart included; one that finds
    rows by the old key's values (document ids, record keys) stops at the first row change
    by the new key, nothing of it applied, instead of leaving the old rows behind, and the
    repair its message gives (the target's table emptied and provisioned again, or the
    registry's compatibility changed; then online) works."""
    svc = conformance
    svc.start()
    svc.create(REKEYED)
    s = svc.schema
    svc.src(f"INSERT INTO {s}.rekeyed VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3), "
            "(4, 'd', 4), (5, 'e', 5)",
            f"UPDATE {s}.rekeyed SET v = 10 WHERE id = 1")
    svc.src(f"ALTER TABLE {s}.rekeyed DROP PRIMARY KEY, ADD PRIMARY KEY (code)")
    ddl = svc.wait_source_applied()
    # A restart right after the change: the old key is known only from the target.
    svc.stop()
    svc.start()
    # A delete alone first (a row change with a before image only, which must not miss its
    # document without a word), then a value, a non-key column that was the key, a key
    # move, and new rows, one of them with an id the old key held.
    svc.src(f"DELETE FROM {s}.rekeyed WHERE code = 'e'")
    svc.src(f"UPDATE {s}.rekeyed SET v = 100 WHERE code = 'b'",
            f"UPDATE {s}.rekeyed SET id = 20 WHERE code = 'c'",
            f"UPDATE {s}.rekeyed SET code = 'z' WHERE code = 'd'",
            f"INSERT INTO {s}.rekeyed VALUES (6, 'f', 6), (1, 'g', 7)")
    if svc.kind.key_change_stop is not None:
        status = svc.wait_state("OFFLINE:ERROR")
        assert status["pendingErrorSeqno"] == ddl + 1, status
        assert svc.kind.key_change_stop in status["pendingExceptionMessage"], status
        assert status["appliedLastSeqno"] == ddl
        # The repair the message gives: empty the table's target, provision it, online.
        if svc.kind.repair_key_change(s, svc.name, REKEYED):
            done = svc.trepctl("provision", "-table", f"{s}.rekeyed")
            assert done.returncode == 0, done.stdout + done.stderr
        assert svc.trepctl("online").returncode == 0
    svc.wait_source_applied()
    assert svc.compare(REKEYED) == {"rekeyed": 6}
    svc.stop()
    svc.start()
    svc.src(f"UPDATE {s}.rekeyed SET v = 7 WHERE code = 'a'",
            f"DELETE FROM {s}.rekeyed WHERE code = 'g'",
            f"INSERT INTO {s}.rekeyed VALUES (2, 'h', 8)")
    svc.wait_source_applied()
    assert svc.compare(REKEYED) == {"rekeyed": 6}


@pytest.mark.parametrize("table", [GAINS_KEY, LOSES_KEY], ids=["gains", "loses"])
def test_a_key_gained_or_lost_is_followed_or_stops_the_group(
        conformance: Conformance, table: Table) -> None:
    """``ALTER TABLE ... ADD PRIMARY KEY (a)`` on a keyless table, ``DROP PRIMARY KEY`` on
    a keyed one, between writes: the target follows (equal row by row) or the group stops
    at the first row change after it, nothing of it applied, with a message that says why
    (a kind that refuses keyless tables stops at the first keyless row)."""
    svc = conformance
    svc.start()
    svc.create(table)
    s, name = svc.schema, table.name
    gains = table is GAINS_KEY
    svc.src(f"INSERT INTO {s}.{name} VALUES (1, 'x'), (2, 'y'), (3, 'z')")
    if gains and not svc.kind.keyless:
        assert "has no primary key" in svc.wait_state("OFFLINE:ERROR")["pendingExceptionMessage"]
        return
    svc.src(f"ALTER TABLE {s}.{name} " + ("ADD PRIMARY KEY (a)" if gains else "DROP PRIMARY KEY"))
    ddl = svc.wait_source_applied()
    svc.src(f"UPDATE {s}.{name} SET b = 'yy' WHERE a = 2", f"DELETE FROM {s}.{name} WHERE a = 3",
            f"INSERT INTO {s}.{name} VALUES ({4 if gains else 1}, 'w')")
    stop = svc.kind.key_gained_stop if gains else \
        svc.kind.key_lost_stop if svc.kind.keyless else "has no primary key"
    if stop is not None:
        status = svc.wait_state("OFFLINE:ERROR")
        assert status["pendingErrorSeqno"] == ddl + 1, status
        assert stop in status["pendingExceptionMessage"], status
        assert status["appliedLastSeqno"] == ddl
        return
    svc.wait_source_applied()
    assert svc.compare(table) == {name: 3}


def test_foreign_key_cascades_reach_every_target(conformance: Conformance) -> None:
    """ON DELETE CASCADE two levels deep, ON UPDATE CASCADE and SET NULL: InnoDB changes the
    child rows and the binlog holds only the parent's change. Every kind ends equal to the
    source: the MariaDB target through its own foreign keys (the DDL is replayed), every
    other kind by looking the child rows up and changing them in the parent's block; that
    holds for child rows committed long before, for rows written in the same transaction
    as the parent's delete or in the transaction just before it (most likely the same
    block: a change-topics group must not wait for its own open Kafka transaction), for
    rows written after an earlier look-up of the same child table, and across a restart
    right after a cascade."""
    svc = conformance
    svc.start()
    svc.create(ORDERS, LINES, PARTS, NOTES)
    s = svc.schema
    svc.src(f"INSERT INTO {s}.orders VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four')",
            f"INSERT INTO {s}.lines VALUES (10, 1, 5), (11, 1, 6), (12, 2, 7), (13, 3, 8)",
            f"INSERT INTO {s}.parts VALUES (100, 10, 'a'), (101, 11, 'b'), (102, 12, 'c'), "
            "(103, 13, 'd'), (104, NULL, 'loose')",
            f"INSERT INTO {s}.notes VALUES (1000, 1, 'n1'), (1001, 2, 'n2'), (1002, 3, 'n3')")
    svc.wait_source_applied()
    # Two levels: lines 10 and 11, then parts 100 and 101; note 1000 loses its order.
    svc.src(f"DELETE FROM {s}.orders WHERE id = 1")
    svc.wait_source_applied()
    # A child written after that look-up (order 3's, below), in the transaction before a
    # parent's delete; children written in the same transaction as the parent's delete.
    svc.src(f"INSERT INTO {s}.lines VALUES (16, 3, 2)")
    svc.src(f"INSERT INTO {s}.lines VALUES (14, 4, 9)",
            f"INSERT INTO {s}.parts VALUES (105, 14, 'e')",
            f"UPDATE {s}.parts SET label = 'moved' WHERE id = 103",
            f"DELETE FROM {s}.orders WHERE id = 4")
    # ON UPDATE CASCADE re-points line 12; ON UPDATE SET NULL clears note 1001.
    svc.src(f"UPDATE {s}.orders SET id = 20 WHERE id = 2")
    _restart_right_after(svc, f"DELETE FROM {s}.orders WHERE id = 3")
    svc.src(f"INSERT INTO {s}.lines VALUES (15, 20, 1)",
            f"DELETE FROM {s}.orders WHERE id = 20")
    svc.wait_source_applied()
    assert svc.status()["state"] == "ONLINE"
    assert svc.compare(ORDERS, LINES, PARTS, NOTES) == {
        "orders": 0, "lines": 0, "parts": 1, "notes": 3}
    for table in ("lines", "parts", "notes"):
        _assert_equal(svc, f"{s}.{table}")


def test_a_real_schema_leaves_every_kind_online_and_equal(conformance: Conformance) -> None:
    """Issue 29's workload in one schema whose name has a space: a table with a trigger
    writing an audit row, a 64-character column, zero dates, the largest BIGINT UNSIGNED
    key, and two levels of ON DELETE CASCADE. Every kind stays ONLINE and ``trepctl check``
    finds each table equal."""
    svc = conformance
    odd = f"{svc.schema} x"
    svc.configure(filters={"replicate": [f"{svc.schema}.*", f"{odd}.*"]})
    svc.start()
    svc.create(ITEMS)
    q = f"`{odd}`"
    long, top = "c" * 64, (1 << 64) - 1
    try:
        svc.src(f"CREATE DATABASE {q}")
        svc.src(f"CREATE TABLE {q}.wide (id BIGINT UNSIGNED PRIMARY KEY, `{long}` VARCHAR(20))",
                f"CREATE TABLE {q}.zero (id INT PRIMARY KEY, d DATE NULL, note VARCHAR(20))",
                f"CREATE TABLE {q}.audited (id INT PRIMARY KEY, total INT)",
                f"CREATE TABLE {q}.audit (id INT AUTO_INCREMENT PRIMARY KEY, audited_id INT)",
                f"CREATE TRIGGER {q}.audited_ai AFTER INSERT ON {q}.audited FOR EACH ROW "
                f"INSERT INTO {q}.audit (audited_id) VALUES (NEW.id)",
                *(t.mysql.format(s=q) for t in (ORDERS, LINES, PARTS)))
        svc.src(f"INSERT INTO {q}.wide VALUES ({top}, 'top'), (0, 'zero'), ({top - 1}, 'x')",
                f"INSERT INTO {q}.audited VALUES (1, 10), (2, 20)",
                f"INSERT INTO {q}.orders VALUES (1, 'one'), (2, 'two')",
                f"INSERT INTO {q}.lines VALUES (10, 1, 1), (11, 2, 1)",
                f"INSERT INTO {q}.parts VALUES (100, 10, 'a'), (101, 11, 'b')")
        svc.src("SET sql_mode = ''",
                f"INSERT INTO {q}.zero VALUES (1, '0000-00-00', 'zero'), (2, '2024-01-02', 'x')")
        svc.src(f"UPDATE {q}.wide SET `{long}` = 'changed' WHERE id = {top}",
                f"DELETE FROM {q}.wide WHERE id = {top - 1}",
                f"UPDATE {q}.audited SET total = 5 WHERE id = 2",
                f"INSERT INTO {q}.audited VALUES (3, 30)",
                f"DELETE FROM {q}.orders WHERE id = 1")
        svc.wait_source_applied()
        assert svc.status()["state"] == "ONLINE"
        for table in ("wide", "zero", "audited", "audit", "orders", "lines", "parts"):
            _assert_equal(svc, f"{odd}.{table}")
    finally:
        svc.src(f"DROP DATABASE IF EXISTS {q}")


def test_schema_changes_exception_stops_at_the_first_change(conformance: Conformance) -> None:
    """``schema_changes: exception``: every kind stops at the DDL's own seqno, naming the
    change and the modes that would let it through, with everything before it applied."""
    svc = conformance
    svc.configure(group={"schema_changes": "exception"})
    svc.start()
    svc.create(ITEMS)
    _items(svc, 0, 3)
    before = svc.wait_source_applied()
    svc.src(f"ALTER TABLE {svc.schema}.items ADD COLUMN note VARCHAR(10)")
    svc.src(f"INSERT INTO {svc.schema}.items VALUES (100, 'after', 1, 1.5, 'n')")
    status = svc.wait_state("OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == before + 1, status
    assert status["appliedLastSeqno"] == before, status
    message = status["pendingExceptionMessage"]
    assert f"add_column {svc.schema}.items.note" in message, message
    assert "schema_changes: lenient (or evolve)" in message, message


def test_restart_right_after_a_fragmented_transaction(conformance: Conformance) -> None:
    svc = conformance
    svc.configure(fragment_rows=1000)
    svc.start()
    svc.create(BIG, ITEMS)
    before = svc.wait_source_applied()
    rows = [(i, f"row {i}") for i in range(5_000)]  # five fragments
    svc.src(f"INSERT INTO {svc.schema}.big VALUES (%s, %s)", params=rows, many=True)
    svc.wait_applied(before + 1)
    svc.stop()
    svc.start()
    status = svc.wait_state("ONLINE")
    assert status["appliedLastSeqno"] == before + 1
    svc.src(f"DELETE FROM {svc.schema}.big WHERE id < 10")
    _items(svc, 0, 5)
    svc.wait_source_applied()
    assert svc.compare(BIG, ITEMS) == {"big": 4_990, "items": 5}


def test_restart_right_after_a_ddl_a_keyless_change_and_generated_columns(
        conformance: Conformance) -> None:
    """Each awkward seqno is the last one the group applied before its process stopped; after
    each restart the group goes on from exactly there and converges."""
    svc = conformance
    svc.start()
    tables = (ITEMS, GENERATED, NOPK) if svc.kind.keyless else (ITEMS, GENERATED)
    svc.create(*tables)
    s = svc.schema
    cases = [[f"CREATE INDEX qty_idx ON {s}.items (qty)"],
             [f"INSERT INTO {s}.gen (id, a, txt) VALUES (1, 5, 'g'), (2, NULL, 'n')",
              f"UPDATE {s}.gen SET a = 7, txt = 'upd' WHERE id = 1"]]
    if svc.kind.keyless:
        cases.append([f"INSERT INTO {s}.nopk VALUES (1, 'dup'), (1, 'dup'), (2, NULL)",
                      f"UPDATE {s}.nopk SET b = 'one' WHERE a = 1 LIMIT 1"])
    for n, statements in enumerate(cases):
        before = svc.wait_source_applied()
        svc.src(*statements)  # one transaction: seqno before + 1
        svc.wait_applied(before + 1)
        svc.stop()
        svc.start()
        status = svc.wait_state("ONLINE")
        assert status["appliedLastSeqno"] == before + 1, (statements, status)
        _items(svc, 100 * n, 3)
    svc.src(f"UPDATE {s}.gen SET a = a + 1", f"DELETE FROM {s}.gen WHERE id = 2")
    svc.wait_source_applied()
    assert svc.compare(*tables)["gen"] == 1


def _prepared(svc: Conformance) -> None:
    """Tables created and applied by a first, clean run, which then stops. It runs in this
    process, as does the recovery after a crash: only the crashing run needs a process of
    its own (a warehouse kind saves a Spark start for each run kept in-process)."""
    svc.start()
    svc.create(ITEMS, COMPOSITE)
    svc.wait_source_applied()
    svc.stop()


def test_crash_between_the_data_and_the_position_write(conformance: Conformance) -> None:
    svc = conformance
    _prepared(svc)
    proc = svc.spawn("apply-before-position:1")
    _workload(svc, rounds=3)
    _wait_exit(proc, svc, "apply-before-position")
    svc.start()
    _workload(svc, rounds=1, first=3)
    svc.wait_source_applied()
    svc.stop()
    assert svc.compare(ITEMS, COMPOSITE)["items"] > 10


def test_seqnos_seen_again_change_nothing(conformance: Conformance) -> None:
    svc = conformance
    _prepared(svc)
    # Killed after the commit, before the Kafka offset and the ZooKeeper mirror: the next
    # process reads those blocks again from the THL.
    proc = svc.spawn("apply-committed:1")
    _workload(svc, rounds=3)
    _wait_exit(proc, svc, "apply-committed")
    svc.start()
    svc.wait_source_applied()
    expected = svc.compare(ITEMS, COMPOSITE)
    if svc.kind.replay_safe:
        # Replaying every applied seqno over the target leaves it as it is.
        assert svc.trepctl("offline").returncode == 0
        svc.wait_state("OFFLINE:NORMAL")
        assert svc.trepctl("reset", "-y").returncode == 0
        assert svc.trepctl("online", "--from-seqno", "0").returncode == 0
        svc.wait_source_applied()
        assert svc.compare(ITEMS, COMPOSITE) == expected
    svc.stop()


def test_reset_and_replay_from_a_seqno(conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    first = svc.thl_tail() + 1
    svc.create(ITEMS, COMPOSITE, NOPK) if svc.kind.keyless else svc.create(ITEMS, COMPOSITE)
    _workload(svc)
    svc.wait_source_applied()
    expected = svc.compare()
    assert svc.trepctl("offline").returncode == 0
    svc.wait_state("OFFLINE:NORMAL")
    done = svc.trepctl("reset", "-y")
    assert done.returncode == 0, done.stderr
    assert svc.status()["appliedLastSeqno"] == -1
    svc.kind.empty(svc.schema, svc.tables)
    assert svc.trepctl("online", "--from-seqno", str(first)).returncode == 0
    svc.wait_source_applied()
    replayed = svc.compare()
    assert replayed["items"] == expected["items"] and replayed["composite"] > 0


def test_skip_seqno_moves_past_a_transaction(conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(ITEMS)
    last = svc.wait_source_applied()
    assert svc.trepctl("offline").returncode == 0
    svc.wait_state("OFFLINE:NORMAL")
    _items(svc, 1, 1)  # seqno last + 1: skipped
    _items(svc, 2, 1)  # seqno last + 2: applied
    bad = svc.trepctl("online", "--skip-seqno", "x")
    assert bad.returncode == 2 and "not a seqno" in bad.stderr
    assert svc.trepctl("online", "--skip-seqno", str(last + 1)).returncode == 0
    svc.wait_source_applied()
    status = svc.status()
    assert last + 1 in status["skippedSeqnos"]
    ids = sorted(r[0] for r in svc.kind.rows(svc.schema, ITEMS))
    assert ids == [2]


# Exclusive of the tests that use the kind's server (conftest: ``Kind.down``).
def test_target_down_under_load(conformance: Conformance) -> None:
    """The kind's server goes away under load (10 s; 30 s in ``make soak``): the group
    retries with backoff, says why while it waits (SQL kinds), and converges."""
    svc = conformance
    svc.start()
    svc.create(ITEMS, COMPOSITE)
    server = svc.kind.server()
    _workload(svc, rounds=2)
    server.stop()
    try:
        deadline = time.monotonic() + outage_s()
        r = 2
        while time.monotonic() < deadline:
            _workload(svc, rounds=1, first=r) if r % 2 else _items(svc, 50_000 + r * 50, 10)
            r += 1
            time.sleep(1)
        if svc.kind.name in ("mariadb", "postgresql"):
            # A SQL group waiting for its target says so (and why) while it retries.
            status = svc.status()
            assert status["state"] == "GOING-ONLINE:SYNCHRONIZING", status
            assert "retrying" in status["pendingExceptionMessage"], status
    finally:
        server.start()
    svc.wait_source_applied(timeout=300)
    assert svc.status()["state"] == "ONLINE"
    assert svc.compare(ITEMS, COMPOSITE)["items"] > 100
    with ThlReader(svc.cfg.kafka.client(), svc.cfg.thl_topic) as reader:
        assert reader.tail() is not None



def _check(svc: Conformance, *tables: str) -> subprocess.CompletedProcess[str]:
    return svc.trepctl("check", *tables, "-limit", "25", "-timeout", "120")


def _assert_equal(svc: Conformance, table: str) -> None:
    """``trepctl check`` of one table finds it equal."""
    checked = _check(svc, table)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert " equal" in checked.stdout and "different" not in checked.stdout, checked.stdout


def test_consistency_check_finds_the_changed_range(conformance: Conformance) -> None:
    svc = conformance
    svc.start()
    svc.create(ITEMS, COMPOSITE)
    _workload(svc)
    svc.wait_source_applied()
    items = f"{svc.schema}.items"
    equal = _check(svc, items, f"{svc.schema}.composite")
    if not svc.kind.checks:
        # Declared unsupported: reported so for every table, never "equal" by default.
        assert equal.returncode == 0, equal.stdout + equal.stderr
        assert f"g                {items:<40} unsupported" in equal.stdout, equal.stdout
        assert "composite" in equal.stdout and "equal" not in equal.stdout
        return
    report = equal.stdout + equal.stderr
    if equal.returncode != 0:
        # The check reports counts and digests only: what the THL said and what the target
        # holds, per table, say which side lost a row.
        report = "\n".join([report, *(f"{svc.thl_changes(t)}\n{svc.kind.explain(svc.schema, t)}"
                                       for t in (ITEMS, COMPOSITE))])
    assert equal.returncode == 0, report
    assert f"g                {items:<40} equal" in equal.stdout
    assert "composite" in equal.stdout and "different" not in equal.stdout
    # One value changed on the target behind the replicator's back.
    ids = sorted(r[0] for r in svc.kind.rows(svc.schema, ITEMS))
    victim = ids[len(ids) // 2]
    svc.kind.tamper(svc.schema, ITEMS, victim, "name", "changed behind its back")
    found = _check(svc, items)
    assert found.returncode == 3, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert any(f"{items}" in line and "different" in line for line in lines), found.stdout
    ranges = [line for line in lines if line.strip().startswith("range ")]
    assert len(ranges) == 1, found.stdout
    after, up_to = ranges[0].split("keys after ")[1].split(" up to ")
    low = None if after == "None" else int(after.strip("[]"))
    high = None if up_to.startswith("None") else int(up_to.split(":")[0].strip("[]"))
    assert (low is None or low < victim) and (high is None or victim <= high), ranges
    status = svc.trepctl("check", "-status", "--json")
    assert status.returncode == 0
    assert '"state": "different"' in status.stdout


def test_xa_transactions_as_committed(conformance: Conformance) -> None:
    """A committed XA transaction arrives (after what committed between its prepare and its
    commit), a rolled-back one never, one phase like any transaction."""
    import pymysql

    svc = conformance
    svc.start()
    svc.create(ITEMS)
    s = svc.schema

    def session(*statements: str) -> None:
        conn = pymysql.connect(host="127.0.0.1", port=svc.source.port, user="root",
                               password="", charset="utf8mb4", autocommit=True)
        try:
            with conn.cursor() as cur:
                for stmt in statements:
                    cur.execute(stmt)
        finally:
            conn.close()  # a prepared XA transaction outlives its session

    row = "INSERT INTO {s}.items VALUES ({i}, 'xa {i}', {i}, 0.25)"
    # XIDs are the server's, not the session's: the kinds run this test side by side on
    # the one source (the same XIDs in two of them: XAER_DUPID, seen in CI).
    c1, r1, o1 = (f"'{x}_{svc.name}'" for x in ("c1", "r1", "o1"))
    session(f"XA START {c1}", *(row.format(s=s, i=i) for i in range(1, 6)),
            f"UPDATE {s}.items SET qty = 0 WHERE id = 1", f"XA END {c1}", f"XA PREPARE {c1}")
    _items(svc, 10, 3)
    session(f"XA START {r1}", *(row.format(s=s, i=i) for i in range(20, 23)),
            f"UPDATE {s}.items SET name = 'rolled back' WHERE id = 10",
            f"XA END {r1}", f"XA PREPARE {r1}")
    session(f"XA START {o1}", row.format(s=s, i=30), f"XA END {o1}",
            f"XA COMMIT {o1} ONE PHASE")
    xa_decide(svc.source.port, f"XA ROLLBACK {r1}")  # sessions of their own, as session()
    xa_decide(svc.source.port, f"XA COMMIT {c1}")
    svc.wait_source_applied()
    assert svc.compare(ITEMS) == {"items": 9}


#: Nine bytes of text with a quote, a backslash and a newline: what a target's literal or
#: file format must escape.
ESCAPED = "é'\\\n字 "


def test_rows_larger_than_a_kafka_record(conformance: Conformance) -> None:
    """A 64 MiB value (8 Kafka records of the THL) and a 12 MiB text arrive exactly where
    the store can hold them; where it cannot, the group stops at that seqno with a data
    error naming the table, the column, the seqno, the size and what would help."""
    import os

    import pymysql

    svc = conformance
    svc.start()
    svc.create(ITEMS, BLOBS)
    mib = 1 << 20
    big, text = os.urandom(64 * mib), "ü😀 " * (2 * mib)  # 64 MiB; 12 MiB of utf8mb4
    before = svc.wait_source_applied()
    conn = pymysql.connect(host="127.0.0.1", port=svc.source.port, user="root", password="",
                           charset="utf8mb4", autocommit=True, max_allowed_packet=256 * mib)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {svc.schema}.blobs VALUES "
                        f"(1, {sql.hex_bytes(big)}, 'small'), (2, 'small', {sql.hex_text(text)})")
    finally:
        conn.close()
    _items(svc, 0, 3)
    limit = svc.kind.max_row_bytes
    if limit is None:
        svc.wait_source_applied()
        # Replaced in a later block (an UPDATE, not collapsed into the INSERT): 18 MiB with
        # a quote, a backslash and a newline to escape every 9 bytes.
        conn = pymysql.connect(host="127.0.0.1", port=svc.source.port, user="root",
                               password="", charset="utf8mb4", autocommit=True,
                               max_allowed_packet=256 * mib)
        try:
            with conn.cursor() as cur:
                cur.execute(f"UPDATE {svc.schema}.blobs SET t = "
                            f"{sql.hex_text(ESCAPED * (2 * mib))} WHERE id = 2")
        finally:
            conn.close()
        svc.wait_source_applied()
        assert svc.compare(BLOBS, ITEMS) == {"blobs": 2, "items": 3}
        return
    status = svc.wait_state("OFFLINE:ERROR", 300)
    message = status["pendingExceptionMessage"]
    assert status["pendingErrorSeqno"] == before + 1, status
    assert status["appliedLastSeqno"] == before, status
    assert f"{svc.schema}.blobs" in message and "column b" in message, message
    assert f"seqno {before + 1}" in message and " MiB" in message, message
    assert "filter" in message, message  # what would help
