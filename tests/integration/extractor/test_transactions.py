"""Source transactions become exactly the expected THL events, in commit order."""

from __future__ import annotations

from collections.abc import Callable

from thl_topics.event import RowAction, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.foreign_keys import CascadeRules, Referential
from thl_topics.records import META_FOREIGN_KEYS
from thl_topics.schema_change import ChangeKind, SchemaChange

from .conftest import ServiceUnderTest


def _rows(event: ThlEvent) -> list[tuple[str, str, list[list[ThlValue]], list[list[ThlValue]]]]:
    out = []
    for item in event.data:
        assert isinstance(item, RowChange)
        out.append((item.action.value, item.table, item.column_values, item.key_values))
    return out


def test_multi_statement_transactions_in_commit_order(running: ServiceUnderTest) -> None:
    s = running.schema
    running.sql(f"CREATE TABLE {s}.a (id INT PRIMARY KEY, v VARCHAR(10))",)
    running.sql(f"CREATE TABLE {s}.nokey (x INT, y VARCHAR(10))")
    running.sql(f"INSERT INTO {s}.a VALUES (1, 'one'), (2, 'two')",
                f"INSERT INTO {s}.nokey VALUES (7, 'dup'), (7, 'dup')",
                f"UPDATE {s}.a SET v = 'uno' WHERE id = 1")
    running.sql(f"DELETE FROM {s}.a WHERE id = 2",
                f"UPDATE {s}.nokey SET y = 'once' WHERE x = 7 LIMIT 1",
                f"DELETE FROM {s}.nokey")
    events = running.wait_for_seqno(3)

    assert [e.seqno for e in events] == [0, 1, 2, 3]
    assert all(e.last_frag and e.fragno == 0 for e in events)
    assert len({e.epoch for e in events}) == 1
    assert isinstance(events[0].data[0], Statement)
    assert events[0].data[0].sql.startswith("CREATE TABLE")
    assert events[0].data[0].default_schema is None or events[0].data[0].default_schema == ""
    assert _rows(events[2]) == [
        ("INSERT", "a", [[1, "one"], [2, "two"]], []),
        ("INSERT", "nokey", [[7, "dup"], [7, "dup"]], []),
        ("UPDATE", "a", [[1, "uno"]], [[1, "one"]]),
    ]
    assert _rows(events[3]) == [
        ("DELETE", "a", [], [[2, "two"]]),
        ("UPDATE", "nokey", [[7, "once"]], [[7, "dup"]]),
        ("DELETE", "nokey", [], [[7, "once"], [7, "dup"]]),
    ]
    rows_a = events[2].data[0]
    assert isinstance(rows_a, RowChange)
    assert [(c.name, c.type, c.primary_key) for c in rows_a.column_specs] == [
        ("id", "INT", True), ("v", "VARCHAR", False)]
    for e in events:
        assert e.shard_id == s
        assert e.metadata["service"] == running.name
        assert e.metadata["mysql_server_id"] == "1"
        assert "gtid" in e.metadata
        assert e.event_id.startswith("mariadb-bin.")
    # event ids grow with seqno: the binlog order is the commit order
    assert [e.event_id for e in events] == sorted(e.event_id for e in events)


def test_ddl_in_place_and_rows_after_alter_carry_new_columns(
        running: ServiceUnderTest) -> None:
    s = running.schema
    running.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)")
    running.sql(f"INSERT INTO {s}.t VALUES (1)")
    running.sql(f"ALTER TABLE {s}.t ADD COLUMN note VARCHAR(20) DEFAULT 'x'")
    running.sql(f"INSERT INTO {s}.t VALUES (2, 'after')")
    running.sql(f"DROP TABLE {s}.t")
    events = running.wait_for_seqno(4)
    kinds = [type(e.data[0]).__name__ for e in events]
    assert kinds == ["Statement", "RowChange", "Statement", "RowChange", "Statement"]
    alter = events[2].data[0]
    assert isinstance(alter, Statement) and alter.sql.startswith("ALTER TABLE")
    assert alter.options["foreign_key_checks"] == "1"
    assert "sql_mode" in alter.options
    before, after = events[1].data[0], events[3].data[0]
    assert isinstance(before, RowChange) and isinstance(after, RowChange)
    assert [c.name for c in before.column_specs] == ["id"]
    assert [c.name for c in after.column_specs] == ["id", "note"]
    assert after.column_values == [[2, "after"]]
    assert after.action is RowAction.INSERT
    drop = events[4].data[0]
    assert isinstance(drop, Statement) and drop.sql.startswith("DROP TABLE")


def test_filtered_transactions_take_no_seqno(running: ServiceUnderTest) -> None:
    running.sql("CREATE DATABASE IF NOT EXISTS unrelated_schema")
    running.sql("CREATE TABLE IF NOT EXISTS unrelated_schema.t (id INT)")
    running.sql("INSERT INTO unrelated_schema.t VALUES (1)")
    running.sql(f"CREATE TABLE {running.schema}.t (id INT PRIMARY KEY)")
    events = running.wait_for_seqno(0)
    assert len(events) == 1
    assert isinstance(events[0].data[0], Statement)
    assert events[0].data[0].sql.startswith(f"CREATE TABLE {running.schema}.t")
    running.sql("DROP DATABASE unrelated_schema")


def test_statement_format_dml_carries_its_session_options(running: ServiceUnderTest) -> None:
    s = running.schema
    running.sql(f"CREATE TABLE {s}.st (id INT PRIMARY KEY, v VARCHAR(10))")
    running.sql("SET SESSION binlog_format = 'STATEMENT'", "SET SESSION foreign_key_checks = 0",
                "SET SESSION sql_mode = 'ANSI_QUOTES'",
                f"INSERT INTO {s}.st VALUES (1, 'stmt')")
    events = running.wait_for_seqno(1)
    stmts = [item for item in events[1].data if isinstance(item, Statement)]
    assert [st.sql for st in stmts] == [f"INSERT INTO {s}.st VALUES (1, 'stmt')"]
    options = stmts[0].options
    assert options["foreign_key_checks"] == "0"
    assert options["sql_mode"] == str(4)  # ANSI_QUOTES is bit 2 of MariaDB's sql_mode
    assert options["time_zone"] == "+00:00"


def test_restart_right_after_ddl_neither_repeats_nor_skips(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service()
    s = svc.schema

    def run_until(seqno: int) -> None:
        ex, thread = svc.start_thread()
        ex.streaming.wait(60)
        if seqno == 1:
            svc.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY)",)
            svc.sql(f"ALTER TABLE {s}.t ADD COLUMN c VARCHAR(5)")
        else:
            svc.sql(f"INSERT INTO {s}.t VALUES (1, 'x')")
        svc.wait_for_tail(seqno)
        ex.stop()
        thread.join(30)
        assert not thread.errors  # type: ignore[attr-defined]

    run_until(1)  # stops right after the ALTER
    run_until(2)
    events = svc.events()
    assert [e.seqno for e in events] == [0, 1, 2]
    assert [type(e.data[0]).__name__ for e in events] == ["Statement", "Statement", "RowChange"]
    row = events[2].data[0]
    assert isinstance(row, RowChange) and row.column_values == [[1, "x"]]
    assert [e.epoch for e in events] == [0, 0, 2]


def test_ddl_statements_carry_their_schema_changes(running: ServiceUnderTest) -> None:
    s = running.schema
    running.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, a INT, b INT, c INT)",
                f"ALTER TABLE {s}.t MODIFY a BIGINT UNSIGNED NOT NULL, "
                "CHANGE b `b 2` VARCHAR(20) FIRST, DROP COLUMN c, ADD d INT AFTER id",
                f"RENAME TABLE {s}.t TO {s}.u, {s}.u TO {s}.v",
                f"TRUNCATE {s}.v",
                # MariaDB's parenthesised ADD: sqlglot cannot read it; the text still goes.
                f"ALTER TABLE {s}.v ADD (e INT, f INT)",
                f"DROP TABLE {s}.v")
    events = running.wait_for_seqno(5)
    statements = [e.data[0] for e in events]
    assert all(isinstance(st, Statement) for st in statements)
    changes = [st.schema_changes for st in statements]  # type: ignore[union-attr]
    assert changes == [
        [SchemaChange(ChangeKind.CREATE_TABLE, s, "t")],
        [SchemaChange(ChangeKind.MODIFY_COLUMN, s, "t", column="a",
                      column_type="BIGINT UNSIGNED", nullable=False),
         SchemaChange(ChangeKind.RENAME_COLUMN, s, "t", column="b", new_name="b 2"),
         SchemaChange(ChangeKind.MODIFY_COLUMN, s, "t", column="b 2",
                      column_type="VARCHAR(20)", position="FIRST"),
         SchemaChange(ChangeKind.DROP_COLUMN, s, "t", column="c"),
         SchemaChange(ChangeKind.ADD_COLUMN, s, "t", column="d", column_type="INT",
                      position="AFTER id")],
        [SchemaChange(ChangeKind.RENAME_TABLE, s, "t", new_schema=s, new_name="u"),
         SchemaChange(ChangeKind.RENAME_TABLE, s, "u", new_schema=s, new_name="v")],
        [SchemaChange(ChangeKind.TRUNCATE, s, "v")],
        None,
        [SchemaChange(ChangeKind.DROP_TABLE, s, "v")],
    ]


def test_deletes_and_key_updates_of_referenced_tables_carry_their_cascading_keys(
        running: ServiceUnderTest) -> None:
    """InnoDB's cascades are not in the binlog: the fragment of a parent's DELETE or UPDATE
    carries the source's cascading foreign keys, two levels deep, with the child tables'
    specs; read again after a DDL adds one; not on inserts, nor with foreign_key_checks=0."""
    s = running.schema
    running.sql(f"CREATE TABLE {s}.p (id INT PRIMARY KEY) ENGINE=InnoDB")
    running.sql(f"CREATE TABLE {s}.c (id INT PRIMARY KEY, p_id INT, CONSTRAINT fk_c "
                f"FOREIGN KEY (p_id) REFERENCES {s}.p (id) ON DELETE CASCADE) ENGINE=InnoDB")
    running.sql(f"CREATE TABLE {s}.g (id INT PRIMARY KEY, c_id INT, note VARCHAR(10)) "
                "ENGINE=InnoDB")
    running.sql(f"INSERT INTO {s}.p VALUES (1), (2), (3)",
                f"INSERT INTO {s}.c VALUES (10, 1), (20, 2)")
    running.sql(f"DELETE FROM {s}.p WHERE id = 1")
    # The catalog is the source's as it is when the extractor reads it: let it pass the
    # delete before the next key is added.
    running.wait_for_seqno(4)
    running.sql(f"ALTER TABLE {s}.g ADD CONSTRAINT fk_g FOREIGN KEY (c_id) REFERENCES "
                f"{s}.c (id) ON DELETE SET NULL ON UPDATE CASCADE")
    running.sql(f"UPDATE {s}.p SET id = 30 WHERE id = 3")
    running.sql("SET foreign_key_checks = 0", f"DELETE FROM {s}.p WHERE id = 2")
    events = running.wait_for_seqno(7)
    marks = {e.seqno: e.metadata.get(META_FOREIGN_KEYS) for e in events}
    assert marks[3] is None  # inserts
    first = CascadeRules.decode(marks[4] or "")
    assert [(r.name, r.parent, r.child, r.on_delete) for r in first.rules] == [
        ("fk_c", (s, "p"), (s, "c"), Referential.CASCADE)]
    assert [c.name for c in first.tables[(s, "c")]] == ["id", "p_id"]
    after_ddl = CascadeRules.decode(marks[6] or "")
    assert [(r.name, r.child_columns, r.on_delete, r.on_update) for r in after_ddl.rules] == [
        ("fk_c", ("p_id",), Referential.CASCADE, Referential.RESTRICT),
        ("fk_g", ("c_id",), Referential.SET_NULL, Referential.CASCADE)]
    assert set(after_ddl.tables) == {(s, "c"), (s, "g")}
    assert marks[7] is None  # foreign_key_checks=0: InnoDB cascaded nothing
