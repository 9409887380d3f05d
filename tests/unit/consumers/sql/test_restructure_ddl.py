"""The DDL of renamed and dropped tables and renamed columns (``consumers.sql.ddl``): run for
real on PostgreSQL in tests/integration/consumers/test_sql_restructure.py, compiled only for
Oracle (no Oracle server here: its documented syntax, ``ALTER TABLE s.a RENAME TO b``,
``ALTER TABLE t RENAME COLUMN a TO b``, ``MODIFY (c NULL)``)."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import oracle, postgresql

from consumers.sql.ddl import (
    allow_null,
    copy_column,
    ddl_text,
    drop_table,
    new_table,
    rename_column,
    rename_table,
)
from consumers.sql.naming import exact

PG = postgresql.dialect()  # type: ignore[no-untyped-call]
ORA = oracle.dialect()  # type: ignore[no-untyped-call]


def test_rename_table_in_its_schema_quotes_both_names() -> None:
    for dialect in (PG, ORA):
        table = new_table('sch"ema', "it ems", [], dialect)
        assert ddl_text(rename_table(table, 'sch"ema', "goods", dialect), dialect) == [
            'ALTER TABLE "sch""ema"."it ems" RENAME TO "goods"']


def test_rename_table_to_another_schema_on_postgresql_makes_and_sets_it() -> None:
    table = new_table("s", "items", [], PG)
    assert ddl_text(rename_table(table, "moved", "goods", PG), PG) == [
        'CREATE SCHEMA IF NOT EXISTS "moved"', 'ALTER TABLE "s"."items" SET SCHEMA "moved"',
        'ALTER TABLE "moved"."items" RENAME TO "goods"']
    # Same name, other schema: no RENAME TO.
    assert ddl_text(rename_table(table, "moved", "items", PG), PG)[-1] == \
        'ALTER TABLE "s"."items" SET SCHEMA "moved"'


def test_oracle_cannot_move_a_table_to_another_schema() -> None:
    with pytest.raises(ValueError, match="another schema"):
        rename_table(new_table("S", "items", [], ORA), "T", "goods", ORA)


def test_rename_column_and_allow_null() -> None:
    pg_table, ora_table = new_table("s", "t", [], PG), new_table("S", "t", [], ORA)
    assert ddl_text(rename_column(pg_table, "name", "Label x", PG), PG) == [
        'ALTER TABLE "s"."t" RENAME COLUMN name TO "Label x"']
    assert ddl_text(rename_column(ora_table, "name", "label", ORA), ORA) == [
        'ALTER TABLE "S"."t" RENAME COLUMN name TO label']
    assert ddl_text(allow_null(pg_table, "name", PG), PG) == [
        'ALTER TABLE "s"."t" ALTER COLUMN name DROP NOT NULL']
    assert ddl_text(allow_null(ora_table, "name", ORA), ORA) == [
        'ALTER TABLE "S"."t" MODIFY (name NULL)']


def test_copy_fills_only_the_rows_not_filled_yet() -> None:
    for dialect in (PG, ORA):
        text = str(copy_column(new_table("S", "t", [], dialect), "name", "label")
                   .compile(dialect=dialect))
        assert text == ('UPDATE "S"."t" SET label="S"."t".name WHERE "S"."t".label IS NULL')


def test_drop_table() -> None:
    assert [t.strip() for t in ddl_text(drop_table(new_table("s", "t", [], PG)), PG)] == [
        'DROP TABLE "s"."t"']


def test_reflection_names_stay_as_made_on_oracle() -> None:
    # Tables are made with quoted names: Oracle's reflection must not upper-case them.
    assert ORA.denormalize_name(exact("orders")) == "orders"  # type: ignore[no-untyped-call]
    assert exact(None) is None
