"""Row-change statements compile for MariaDB/MySQL, PostgreSQL and Oracle (compiled only)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle, postgresql

from consumers.sql.statements import (
    RowStatements,
    TargetTable,
    bind_rows,
    binder,
    statement_for,
)
from thl_topics.event import ColumnSpec, RowAction

HOSTILE = TargetTable('we"ird`schema', "sélect table", {
    "id": sa.types.NullType(), "order": sa.types.NullType(), 'quo"te`s': sa.types.NullType()})
PK = [ColumnSpec(0, "id", "INT", primary_key=True), ColumnSpec(1, "order", "VARCHAR"),
      ColumnSpec(2, 'quo"te`s', "TEXT")]
NO_PK = [ColumnSpec(0, "id", "INT"), ColumnSpec(1, "order", "VARCHAR"),
         ColumnSpec(2, 'quo"te`s', "TEXT")]
DIALECTS = {"mysql": mysql.dialect(),
            "postgresql": postgresql.dialect(),  # type: ignore[no-untyped-call]
            "oracle": oracle.dialect()}  # type: ignore[no-untyped-call]


def _sql(action: RowAction, keys: list[ColumnSpec], dialect: str) -> str:
    stmt = statement_for(RowStatements(dialect), HOSTILE, action, PK, keys)
    return str(stmt.compile(dialect=DIALECTS[dialect]))


def test_identifiers_are_quoted_and_values_bound_in_every_dialect() -> None:
    assert _sql(RowAction.INSERT, PK, "mysql") == (
        "INSERT INTO `we\"ird``schema`.`sélect table` (id, `order`, `quo\"te``s`) "
        "VALUES (%s, %s, %s)")
    assert _sql(RowAction.INSERT, PK, "postgresql") == (
        'INSERT INTO "we""ird`schema"."sélect table" (id, "order", "quo""te`s") '
        "VALUES (%(v0)s, %(v1)s, %(v2)s)")
    assert _sql(RowAction.INSERT, PK, "oracle") == (
        'INSERT INTO "we""ird`schema"."sélect table" (id, "order", "quo""te`s") '
        "VALUES (:v0, :v1, :v2)")


def test_update_and_delete_by_primary_key() -> None:
    pg = _sql(RowAction.UPDATE, PK, "postgresql")
    assert pg.endswith('WHERE "we""ird`schema"."sélect table".id = %(k0)s')
    ora = _sql(RowAction.DELETE, PK, "oracle")
    assert ora == 'DELETE FROM "we""ird`schema"."sélect table" WHERE ' \
        '"we""ird`schema"."sélect table".id = :k0'


def test_no_primary_key_matches_the_whole_before_image_null_safe_one_row() -> None:
    my = _sql(RowAction.DELETE, NO_PK, "mysql")
    assert "`order` <=> %s" in my and my.endswith("LIMIT 1")
    pg = _sql(RowAction.UPDATE, NO_PK, "postgresql")
    assert "IS NOT DISTINCT FROM %(k1)s" in pg and "WHERE ctid = (SELECT ctid" in pg
    assert "LIMIT" in pg
    ora = _sql(RowAction.DELETE, NO_PK, "oracle")
    # Oracle has no IS NOT DISTINCT FROM: SQLAlchemy's DECODE is NULL-safe.
    assert 'DECODE("we""ird`schema"."sélect table"."order", :k1, 0, 1) = 0' in ora
    assert "WHERE ROWID = (SELECT ROWID" in ora and "FETCH FIRST" in ora


def test_bind_rows_uses_the_key_or_the_whole_before_image() -> None:
    after, before = [[1, "a", None]], [[1, "b", "x"]]
    assert bind_rows(RowAction.UPDATE, after, before, PK) == [
        {"v0": 1, "v1": "a", "v2": None, "k0": 1}]
    assert bind_rows(RowAction.DELETE, [], before, NO_PK) == [
        {"k0": 1, "k1": "b", "k2": "x"}]
    assert bind_rows(RowAction.INSERT, after, [], PK) == [{"v0": 1, "v1": "a", "v2": None}]


def test_bind_rows_takes_a_composite_key_in_its_column_order() -> None:
    keys = [ColumnSpec(0, "a", "INT", primary_key=True), ColumnSpec(1, "x", "INT"),
            ColumnSpec(2, "b", "INT", primary_key=True)]
    before: list[list[object]] = [[1, 2, 3], [4, None, 6]]
    after: list[list[object]] = [[1, 20, 3], [4, 50, 6]]
    assert bind_rows(RowAction.DELETE, [], before, keys) == [
        {"k0": 1, "k2": 3}, {"k0": 4, "k2": 6}]
    assert bind_rows(RowAction.UPDATE, after, before, keys) == [
        {"v0": 1, "v1": 20, "v2": 3, "k0": 1, "k2": 3},
        {"v0": 4, "v1": 50, "v2": 6, "k0": 4, "k2": 6}]
    # Rows of another length than the specs' name their own values.
    assert bind_rows(RowAction.INSERT, [[1], [1, 2, 3, 4]], [], keys) == [
        {"v0": 1}, {"v0": 1, "v1": 2, "v2": 3, "v3": 4}]


def test_a_binder_of_a_known_width_binds_as_bind_rows() -> None:
    keys = [ColumnSpec(0, "a", "INT", primary_key=True), ColumnSpec(1, "x", "INT"),
            ColumnSpec(2, "b", "INT", primary_key=True)]
    after: list[list[object]] = [[1, 20, 3], [4, None, 6]]
    before: list[list[object]] = [[1, 2, 3], [4, 5, 6]]
    for action in RowAction:
        for specs in (PK, NO_PK, keys):
            fixed = binder(action, specs, 3)(after, before)
            assert fixed == bind_rows(action, after, before, specs), (action, specs)
