"""Tables made and evolved from THL column specs: the DDL for PostgreSQL (run for real in
tests/integration/consumers/test_create_tables.py) and Oracle (compiled only: no Oracle
server here), and how a column's source type may move."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle, postgresql

from consumers.sql.ddl import (
    Change,
    SourceType,
    add_column,
    change_primary_key,
    compare,
    create_statements,
    ddl_text,
    new_column,
    new_table,
    widen_column,
)
from thl_topics.event import ColumnSpec

PG = postgresql.dialect()  # type: ignore[no-untyped-call]
ORA = oracle.dialect()  # type: ignore[no-untyped-call]

#: A hostile table: the key columns come after a non-key one, names need quoting.
HOSTILE = [
    ColumnSpec(1, "b", "VARCHAR", 40, charset="utf8", primary_key=True),
    ColumnSpec(2, 'we"ird', "DECIMAL", 65, 30),
    ColumnSpec(3, "from", "INT", primary_key=True),
    ColumnSpec(4, "ünï é", "TEXT", charset="utf8"),
]


def test_create_table_postgresql_quotes_everything_and_keeps_the_key() -> None:
    table = new_table('sch"ema', "sel`ect t", HOSTILE, PG)
    assert ddl_text(create_statements(table, PG), PG) == [
        'CREATE SCHEMA IF NOT EXISTS "sch""ema"',
        '\nCREATE TABLE "sch""ema"."sel`ect t" (\n\tb VARCHAR(13) NOT NULL, \n'
        '\t"we""ird" NUMERIC(65, 30), \n\t"from" INTEGER NOT NULL, \n\t"ünï é" TEXT, \n'
        '\tPRIMARY KEY (b, "from")\n)\n\n',
        """COMMENT ON COLUMN "sch""ema"."sel`ect t".b IS """
        "'tungsten source type: VARCHAR(40 bytes)'",
        """COMMENT ON COLUMN "sch""ema"."sel`ect t"."we""ird" IS """
        "'tungsten source type: DECIMAL(65,30)'",
        """COMMENT ON COLUMN "sch""ema"."sel`ect t"."from" IS 'tungsten source type: INT'""",
        """COMMENT ON COLUMN "sch""ema"."sel`ect t"."ünï é" IS 'tungsten source type: TEXT'""",
    ]


def test_create_table_oracle_compiles_without_a_schema_statement() -> None:
    specs = [s for s in HOSTILE if s.name != 'we"ird'] + [
        ColumnSpec(5, "t", "TIME", 0, 6), ColumnSpec(6, "u", "BIGINT", unsigned=True)]
    table = new_table("SHOP", "orders", specs, ORA)
    text = ddl_text(create_statements(table, ORA), ORA)
    assert text[0] == (
        '\nCREATE TABLE "SHOP"."orders" (\n\tb VARCHAR2(13 CHAR) NOT NULL, \n'
        '\t"from" NUMBER(10, 0) NOT NULL, \n\t"ünï é" CLOB, \n\tt INTERVAL DAY(2) TO SECOND(6), \n'
        '\tu NUMBER(20, 0), \n\tPRIMARY KEY (b, "from")\n)\n\n')
    assert text[1:] == [
        f'COMMENT ON COLUMN "SHOP"."orders".{c} IS \'tungsten source type: {t}\''
        for c, t in (("b", "VARCHAR(40 bytes)"), ('"from"', "INT"), ('"ünï é"', "TEXT"),
                     ("t", "TIME(6)"), ("u", "BIGINT UNSIGNED"))]


def test_int_primary_key_on_oracle_is_a_number() -> None:
    # sa.Integer compiles to INTEGER on Oracle: the map gives NUMBER(10) for a plain INT.
    column = new_column(ColumnSpec(1, "n", "INT"), ORA)
    assert column.type.compile(dialect=ORA) == "NUMBER(10, 0)"


def test_a_table_without_a_key_gets_none() -> None:
    table = new_table("s", "nopk", [ColumnSpec(1, "a", "INT"), ColumnSpec(2, "b", "TEXT")], PG)
    create = ddl_text(create_statements(table, PG), PG)[1]
    assert "PRIMARY KEY" not in create and "NOT NULL" not in create


def test_columns_take_their_target_names() -> None:
    long = "c" * 64
    table = new_table("s", "t", [ColumnSpec(1, long, "INT", primary_key=True)], PG,
                      {long: "c" * 54 + "_12345678"})
    create = ddl_text(create_statements(table, PG), PG)[1]
    assert '"' not in create.split("(", 1)[1].split()[0]  # an unquoted plain identifier
    assert "c" * 54 + "_12345678 INTEGER NOT NULL" in create
    assert "PRIMARY KEY (" + "c" * 54 + "_12345678)" in create


def test_a_changed_primary_key_drops_the_old_constraint_and_adds_the_new() -> None:
    table = new_table('sch"ema', "t", [], PG)
    assert ddl_text(change_primary_key(table, "t_pkey", ["co de", "id"], PG), PG) == [
        'ALTER TABLE "sch""ema"."t" DROP CONSTRAINT t_pkey',
        'ALTER TABLE "sch""ema"."t" ADD PRIMARY KEY ("co de", id)']
    assert ddl_text(change_primary_key(new_table("S", "t", [], ORA), None, ["c"], ORA),
                    ORA) == ['ALTER TABLE "S"."t" ADD PRIMARY KEY (c)']
    mariadb = mysql.dialect()
    mariadb.name = "mariadb"
    assert ddl_text(change_primary_key(new_table("s", "t", [], mariadb), "PRIMARY", ["c"],
                                       mariadb), mariadb) == [
        "ALTER TABLE `s`.`t` DROP PRIMARY KEY, ADD PRIMARY KEY (c)"]


def test_add_and_widen_columns() -> None:
    table = new_table('sch"ema', "t", [], PG)
    column = new_column(ColumnSpec(7, "new col", "DATETIME", 0, 3), PG)
    table.append_column(column)
    assert ddl_text(add_column(table, column, PG), PG) == [
        'ALTER TABLE "sch""ema"."t" ADD COLUMN "new col" TIMESTAMP(3) WITHOUT TIME ZONE',
        """COMMENT ON COLUMN "sch""ema"."t"."new col" IS 'tungsten source type: DATETIME(3)'"""]
    ora_table = new_table("S", "t", [], ORA)
    ora_column = new_column(ColumnSpec(7, "c", "VARCHAR", 90, charset="utf8"), ORA)
    ora_table.append_column(ora_column)
    assert ddl_text(add_column(ora_table, ora_column, ORA), ORA)[0] == \
        'ALTER TABLE "S"."t" ADD (c VARCHAR2(30 CHAR))'
    assert ddl_text(widen_column(ora_table, ora_column, oracle.VARCHAR2(10), ORA), ORA)[0] == \
        'ALTER TABLE "S"."t" MODIFY (c VARCHAR2(30 CHAR))'

    wide = new_table("s", "t", [], PG)
    bits = new_column(ColumnSpec(1, "b", "BIT", 16), PG)
    wide.append_column(bits)
    assert ddl_text(widen_column(wide, bits, postgresql.BIT(9), PG), PG)[0] == (
        'ALTER TABLE "s"."t" ALTER COLUMN b TYPE BIT(16) USING CAST(CAST(b AS BIGINT) AS BIT(16))')
    same = new_column(ColumnSpec(2, "n", "SMALLINT"), PG)
    wide.append_column(same)
    # TINYINT -> SMALLINT is SMALLINT on PostgreSQL either way: only the comment changes.
    assert ddl_text(widen_column(wide, same, sa.SmallInteger(), PG), PG) == [
        'COMMENT ON COLUMN "s"."t".n IS \'tungsten source type: SMALLINT\'']


@pytest.mark.parametrize("spec", [
    ColumnSpec(1, "a", "DECIMAL", 65, 30), ColumnSpec(1, "a", "BIGINT", unsigned=True),
    ColumnSpec(1, "a", "TIMESTAMP", 0, 6), ColumnSpec(1, "a", "VARCHAR", 400, charset="utf8"),
    ColumnSpec(1, "a", "BIT", 9), ColumnSpec(1, "a", "ENUM", enum_values=["x"]),
    ColumnSpec(1, "a", "INTEGER"), ColumnSpec(1, "a", "YEAR", unsigned=True),
])
def test_source_types_round_trip_through_the_comment(spec: ColumnSpec) -> None:
    source = SourceType.of(spec)
    assert SourceType.from_comment(source.comment()) == source


def test_other_comments_are_not_source_types() -> None:
    assert SourceType.from_comment(None) is None
    assert SourceType.from_comment("customer name") is None
    assert SourceType.from_comment("tungsten source type: not a type!") is None


def _t(type_: str, length: int = 0, scale: int = 0, *, unsigned: bool = False) -> SourceType:
    return SourceType.of(ColumnSpec(1, "c", type_, length, scale, unsigned))


@pytest.mark.parametrize(("old", "new", "change"), [
    (_t("VARCHAR", 400), _t("VARCHAR", 400), Change.SAME),
    (_t("VARCHAR", 40), _t("VARCHAR", 400), Change.WIDER),
    (_t("VARCHAR", 400), _t("VARCHAR", 40), Change.NARROWER),
    (_t("CHAR", 20), _t("VARCHAR", 20), Change.WIDER),
    (_t("VARCHAR", 400), _t("TEXT"), Change.WIDER),
    (_t("TEXT"), _t("VARCHAR", 400), Change.NARROWER),
    (_t("DECIMAL", 10, 2), _t("DECIMAL", 12, 4), Change.WIDER),
    (_t("DECIMAL", 10, 2), _t("DECIMAL", 10, 4), Change.NARROWER),  # fewer integer digits
    (_t("DECIMAL", 10, 4), _t("DECIMAL", 8, 4), Change.NARROWER),
    (_t("INT"), _t("BIGINT"), Change.WIDER),
    (_t("INT"), _t("INT", unsigned=True), Change.NARROWER),  # negatives gone
    (_t("INT", unsigned=True), _t("BIGINT"), Change.WIDER),
    (_t("BIGINT"), _t("SMALLINT"), Change.NARROWER),
    (_t("FLOAT"), _t("DOUBLE"), Change.WIDER),
    (_t("DOUBLE"), _t("FLOAT"), Change.NARROWER),
    (_t("DATETIME", 0, 0), _t("DATETIME", 0, 6), Change.WIDER),
    (_t("DATETIME", 0, 6), _t("DATETIME", 0, 3), Change.NARROWER),
    (_t("BIT", 9), _t("BIT", 16), Change.WIDER),
    (_t("ENUM"), _t("ENUM"), Change.SAME),
    (_t("DATETIME", 0, 6), _t("TIMESTAMP", 0, 6), Change.OTHER),
    (_t("INT"), _t("VARCHAR", 40), Change.OTHER),
    (_t("ENUM"), _t("SET"), Change.OTHER),
])
def test_how_a_source_type_moved(old: SourceType, new: SourceType, change: Change) -> None:
    assert compare(old, new) is change
