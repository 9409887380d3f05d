"""The type map (PostgreSQL real, Oracle compiled) and THL values bent to the target column,
losing nothing, or changed by the target's value policy and counted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import oracle, postgresql

from consumers.sql.types import (
    UnmappedType,
    ValuePolicy,
    ValueRefused,
    adapt,
    adapt_row,
    char_length,
    column_type,
    policy_for,
    row_adapter,
    rows_adapter,
    type_map_markdown,
)
from thl_topics.event import ColumnSpec, ThlValue


def test_postgresql_bit_boolean_and_timestamps() -> None:
    bit = ColumnSpec(0, "b", "BIT", length=9)
    assert adapt(0x1FF, postgresql.BIT(9), "postgresql", bit) == "111111111"
    assert adapt(1, postgresql.BIT(64), "postgresql", bit) == "0" * 63 + "1"
    assert adapt(1, sa.Boolean(), "postgresql", ColumnSpec(0, "t", "TINYINT")) is True
    aware = dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=dt.UTC)
    naive = adapt(aware, postgresql.TIMESTAMP(), "postgresql", ColumnSpec(0, "t", "TIMESTAMP"))
    assert naive == dt.datetime(2038, 1, 19, 3, 14, 7, 999999)
    keep = adapt(aware, postgresql.TIMESTAMP(timezone=True), "postgresql",
                 ColumnSpec(0, "t", "TIMESTAMP"))
    assert keep == aware


def test_negative_time_goes_to_mysql_as_text() -> None:
    spec = ColumnSpec(0, "t", "TIME")
    row = adapt_row(["-838:59:59", "-00:00:00.000001"], [spec, spec],
                    [sa.types.NullType(), sa.types.NullType()], "mysql")
    assert row == ["-838:59:59", "-00:00:00.000001"]


def test_unsigned_bigint_max_and_binary_padding_survive() -> None:
    big = ColumnSpec(0, "u", "BIGINT", unsigned=True)
    binary = ColumnSpec(1, "b", "BINARY", length=4)
    row = adapt_row(["18446744073709551615", b"\x00\x01"], [big, binary],
                    [sa.Numeric(20), postgresql.BYTEA()], "postgresql")
    assert row == [18446744073709551615, b"\x00\x01\x00\x00"]


# -- the type map ---------------------------------------------------------------------------

def _spec(name: str, type_: str, length: int = 0, scale: int = 0, *, unsigned: bool = False,
          charset: str | None = None, members: tuple[str, ...] = ()) -> ColumnSpec:
    return ColumnSpec(0, name, type_, length, scale, unsigned, charset=charset,
                      enum_values=list(members))


#: The type matrix's columns as the extractor writes their specs (MariaDB 10.11, utf8mb4),
#: with the PostgreSQL and Oracle columns made for them.
MATRIX = [
    (_spec("u_big", "BIGINT", unsigned=True), "NUMERIC(20, 0)", "NUMBER(20, 0)"),
    (_spec("s_big", "BIGINT"), "BIGINT", "NUMBER(19, 0)"),
    (_spec("tiny", "TINYINT"), "SMALLINT", "NUMBER(3, 0)"),
    (_spec("u_tiny", "TINYINT", unsigned=True), "SMALLINT", "NUMBER(3, 0)"),
    (_spec("small", "SMALLINT"), "SMALLINT", "NUMBER(5, 0)"),
    (_spec("u_small", "SMALLINT", unsigned=True), "INTEGER", "NUMBER(5, 0)"),
    (_spec("u_med", "MEDIUMINT", unsigned=True), "INTEGER", "NUMBER(8, 0)"),
    (_spec("i", "INT"), "INTEGER", "NUMBER(10, 0)"),
    (_spec("u_i", "INT", unsigned=True), "BIGINT", "NUMBER(10, 0)"),
    (_spec("dec_small", "DECIMAL", 10, 4), "NUMERIC(10, 4)", "NUMBER(10, 4)"),
    (_spec("f", "FLOAT"), "REAL", "BINARY_FLOAT"),
    (_spec("d", "DOUBLE"), "DOUBLE PRECISION", "BINARY_DOUBLE"),
    (_spec("b64", "BIT", 64), "BIT(64)", "NUMBER(20, 0)"),
    (_spec("b9", "BIT", 9), "BIT(9)", "NUMBER(3, 0)"),
    (_spec("y", "YEAR", unsigned=True), "SMALLINT", "NUMBER(4, 0)"),
    (_spec("t6", "TIME", 0, 6), "INTERVAL (6)", "INTERVAL DAY(2) TO SECOND(6)"),
    (_spec("t0", "TIME"), "INTERVAL (0)", "INTERVAL DAY(2) TO SECOND(0)"),
    (_spec("dt6", "DATETIME", 0, 6), "TIMESTAMP(6) WITHOUT TIME ZONE", "TIMESTAMP"),
    (_spec("ts0", "TIMESTAMP"), "TIMESTAMP(0) WITH TIME ZONE", "TIMESTAMP WITH TIME ZONE"),
    (_spec("dte", "DATE"), "DATE", "DATE"),
    (_spec("e", "ENUM", charset="utf8", members=("a", "b", "ç😀")), "TEXT",
     "VARCHAR2(2 CHAR)"),
    (_spec("st", "SET", charset="utf8", members=("x", "y", "z")), "TEXT", "VARCHAR2(5 CHAR)"),
    (_spec("vc", "VARCHAR", 200, charset="utf8"), "VARCHAR(66)", "VARCHAR2(66 CHAR)"),
    (_spec("latin", "VARCHAR", 10, charset="cp1252"), "VARCHAR(10)", "VARCHAR2(10 CHAR)"),
    (_spec("ch", "CHAR", 20, charset="utf8"), "VARCHAR(6)", "VARCHAR2(6 CHAR)"),
    (_spec("long", "VARCHAR", 65532, charset="utf8"), "VARCHAR(21844)", "CLOB"),
    (_spec("txt", "TEXT", charset="utf8"), "TEXT", "CLOB"),
    (_spec("j", "JSON"), "JSONB", "CLOB"),
    (_spec("vb", "VARBINARY", 20), "BYTEA", "RAW(20)"),
    (_spec("bn", "BINARY", 4), "BYTEA", "RAW(4)"),
    (_spec("bl", "BLOB"), "BYTEA", "BLOB"),
]


def test_every_matrix_type_has_its_postgresql_and_oracle_column() -> None:
    pg, ora = postgresql.dialect(), oracle.dialect()  # type: ignore[no-untyped-call]
    for spec, on_pg, on_oracle in MATRIX:
        assert column_type(spec, "postgresql").compile(dialect=pg) == on_pg, spec.name
        assert column_type(spec, "oracle").compile(dialect=ora) == on_oracle, spec.name
    assert column_type(_spec("dec65", "DECIMAL", 65, 30), "postgresql").compile(
        dialect=pg) == "NUMERIC(65, 30)"


def test_a_type_without_an_exact_column_is_refused() -> None:
    with pytest.raises(UnmappedType, match=r"DECIMAL\(65,30\) does not fit Oracle NUMBER"):
        column_type(_spec("dec65", "DECIMAL", 65, 30), "oracle")
    with pytest.raises(UnmappedType, match="THL type TYPE245 has no column type"):
        column_type(_spec("x", "TYPE245"), "postgresql")
    with pytest.raises(UnmappedType, match="PostgreSQL and Oracle only, not mysql"):
        column_type(_spec("x", "INT"), "mysql")


def test_char_lengths_come_from_bytes_never_too_narrow() -> None:
    # utf8 may be utf8mb3 (3 bytes a character) or utf8mb4 (4): divide by the smaller.
    assert char_length(_spec("a", "VARCHAR", 21, charset="utf8")) == 7  # utf8mb3 VARCHAR(7)
    assert char_length(_spec("a", "VARCHAR", 28, charset="utf8")) == 9  # utf8mb4 VARCHAR(7)
    assert char_length(_spec("a", "VARCHAR", 14, charset="ucs2")) == 7
    assert char_length(_spec("a", "VARCHAR", 7, charset="cp1252")) == 7
    assert char_length(_spec("a", "VARCHAR", 7, charset="unheard-of")) == 7
    assert char_length(_spec("a", "CHAR", 0, charset="utf8")) == 1


def test_the_sql_targets_page_shows_the_type_map() -> None:
    page = (Path(__file__).resolve().parents[4] / "docs" / "targets" / "sql.md").read_text()
    assert type_map_markdown() in page


# -- value policies -------------------------------------------------------------------------

DATE = _spec("d", "DATE")
DATETIME = _spec("dt", "DATETIME", 0, 6)
TEXT = _spec("t", "TEXT", charset="utf8")
JSON = _spec("j", "JSON")


def test_zero_dates_become_null_and_are_counted() -> None:
    policy = ValuePolicy("postgresql", "null", "error")
    row = adapt_row(["0000-00-00", "0000-00-00 00:00:00.000000", "2024-01-02"],
                    [DATE, DATETIME, _spec("ok", "DATE")], [sa.Date()] * 3, "postgresql", policy)
    assert row == [None, None, dt.date(2024, 1, 2)]
    assert policy.collect() == {("zero_date", "d"): 1, ("zero_date", "dt"): 1}
    # Partial dates ('2024-00-00') are zero dates to a target that has none.
    row = adapt_row(["2024-00-00", "2024-03-00 10:00:00"], [DATE, DATETIME],
                    [sa.Date()] * 2, "postgresql", policy)
    assert row == [None, None]
    assert policy.collect() == {("zero_date", "d"): 1, ("zero_date", "dt"): 1}
    assert policy.collect() == {}


def test_zero_dates_stop_with_error() -> None:
    policy = ValuePolicy("postgresql", "error", "error")
    with pytest.raises(ValueRefused, match="zero date '0000-00-00' cannot be stored") as err:
        adapt_row(["0000-00-00"], [DATE], [sa.Date()], "postgresql", policy)
    assert err.value.column == "d"


def test_nul_characters_stop_or_are_stripped_and_counted() -> None:
    strict = ValuePolicy("postgresql", "null", "error")
    with pytest.raises(ValueRefused, match=r"cannot hold U\+0000"):
        adapt_row(["a\x00b"], [TEXT], [sa.Text()], "postgresql", strict)
    strip = ValuePolicy("postgresql", "null", "strip")
    assert adapt_row(["a\x00b\x00", "plain"], [TEXT, _spec("u", "VARCHAR", 9)],
                     [sa.Text(), sa.Text()], "postgresql", strip) == ["ab", "plain"]
    # JSONB refuses the \\u0000 escape too; an escaped backslash before 'u0000' is text.
    assert adapt_row(['{"k\\u0000": "a\\u0000b", "x": "\\\\u0000"}'], [JSON], [sa.Text()],
                     "postgresql", strip) == ['{"k": "ab", "x": "\\\\u0000"}']
    assert strip.collect() == {("nul_character", "t"): 1, ("nul_character", "j"): 1}


def test_only_postgresql_checks_nul_and_mysql_keeps_everything() -> None:
    oracle_policy = policy_for("oracle", "null", "error")
    assert oracle_policy is not None
    assert adapt_row(["a\x00b"], [TEXT], [sa.Text()], "oracle", oracle_policy) == ["a\x00b"]
    assert policy_for("mariadb", "error", "error") is None
    assert adapt_row(["0000-00-00", "a\x00"], [DATE, TEXT], [sa.Date(), sa.Text()],
                     "mariadb", None) == ["0000-00-00", "a\x00"]


# -- the adapter of a layout ----------------------------------------------------------------

#: (spec, PostgreSQL column, MariaDB column, THL values): every kind of column, with the
#: values that pass as they are and those that take adapt_row's way.
_LAYOUT: list[tuple[ColumnSpec, Any, Any, list[ThlValue]]] = [
    (_spec("i", "INT"), sa.Integer(), sa.Integer(), [None, 0, -5, "17", 2**70]),
    (_spec("u", "BIGINT", unsigned=True), sa.Numeric(20), sa.BigInteger(),
     ["18446744073709551615", 18446744073709551615]),
    (_spec("flag", "TINYINT"), sa.Boolean(), sa.SmallInteger(), [0, 1, None]),
    (_spec("b", "BIT", 9), postgresql.BIT(9), sa.Integer(), [0x1FF, 0, None]),
    (_spec("y", "YEAR"), sa.SmallInteger(), sa.SmallInteger(), [1901, 2155, None]),
    (_spec("dec", "DECIMAL", 65, 30), sa.Numeric(65, 30), sa.Numeric(65, 30),
     ["-0.000000000000000000000000000001", "99999999999999999999999999999999999.5", None]),
    (_spec("num", "NEWDECIMAL", 10, 2), sa.Numeric(10, 2), sa.Numeric(10, 2), ["-1.50", "0.00"]),
    (_spec("f", "DOUBLE"), postgresql.DOUBLE_PRECISION(), sa.Float(), [1.5, -0.0, None]),
    (DATE, sa.Date(), sa.Date(), ["2024-02-29", "0000-00-00", None, "2024-03-00", "0001-01-01"]),
    (DATETIME, sa.DateTime(), sa.DateTime(), ["9999-12-31 23:59:59.999999", None,
                                              "0000-00-00 00:00:00", "2024-00-10 10:00:00",
                                              "2024-01-02 03:04:05"]),
    (_spec("ts", "TIMESTAMP", 0, 6), postgresql.TIMESTAMP(timezone=True), sa.DateTime(),
     ["2038-01-19 03:14:07.999999", None]),
    (_spec("tm", "TIME", 0, 6), postgresql.INTERVAL(), sa.Time(),
     ["-838:59:59.000000", "00:00:00.000001", None]),
    (_spec("tm_text", "TIME"), sa.Text(), sa.Text(), ["-00:00:01"]),
    (TEXT, sa.Text(), sa.Text(), ["é😀 'q' \\ end", "", "a\x00b", None]),
    (_spec("vc", "VARCHAR", 80, charset="utf8mb4"), sa.String(20), sa.String(20),
     ["x", "nul\x00"]),
    (JSON, postgresql.JSONB(), sa.JSON(), ['{"k": "a\\u0000b"}', '{"k": 1}', None]),
    (_spec("e", "ENUM", members=("a", "b")), sa.Text(), sa.Text(), ["a", None]),
    (_spec("s", "SET", members=("x", "y")), sa.Text(), sa.Text(), ["x,y", ""]),
    (_spec("bn", "BINARY", 4), postgresql.BYTEA(), sa.LargeBinary(), [b"\x00\x01", b""]),
    (_spec("bl", "BLOB"), postgresql.BYTEA(), sa.LargeBinary(), [b"\xff", b""]),
]


@pytest.mark.parametrize("dialect", ["postgresql", "mariadb", "oracle"])
def test_row_adapter_gives_what_adapt_row_gives(dialect: str) -> None:
    specs = [s for s, *_ in _LAYOUT]
    targets = [pg if dialect != "mariadb" else my for _, pg, my, _ in _LAYOUT]
    adapted = row_adapter(specs, targets, dialect,
                          policy_for(dialect, "null", "strip"))
    longest = max(len(values) for *_, values in _LAYOUT)
    for r in range(longest):
        row = [values[r % len(values)] for *_, values in _LAYOUT]
        by_row = adapt_row(row, specs, targets, dialect, policy_for(dialect, "null", "strip"))
        got = adapted(row)
        assert got == by_row, (dialect, row)
        # The same types too: an int is no bool, a str no bytes.
        assert [type(v) for v in got] == [type(v) for v in by_row], (dialect, row)


def test_row_adapter_refuses_as_adapt_row_does() -> None:
    strict = policy_for("postgresql", "error", "error")
    adapted = row_adapter([TEXT, DATE], [sa.Text(), sa.Date()], "postgresql", strict)
    with pytest.raises(ValueRefused, match=r"cannot hold U\+0000") as err:
        adapted(["a\x00b", None])
    assert err.value.column == "t"
    with pytest.raises(ValueRefused, match="zero date"):
        adapted(["ok", "0000-00-00"])
    with pytest.raises(ValueError, match="zip"):
        adapted(["one value"])


@pytest.mark.parametrize("dialect", ["postgresql", "mariadb"])
def test_row_adapter_of_integer_and_text_columns_passes_rows_by_their_types(
        dialect: str) -> None:
    # Every column passes ints or strs as they are: such rows skip the per-value loop.
    specs = [_spec("i", "INT"), TEXT, _spec("big", "BIGINT", unsigned=True)]
    targets: list[Any] = [sa.Integer(), sa.Text(), sa.Numeric(20)]
    adapted = row_adapter(specs, targets, dialect, None)
    rows: list[list[ThlValue]] = [
        [1, "a", 2], [None, "b", 3], [True, "c", 4], ["17", "d", 5], [6, 7, 8],
        [2**70, "e\x00", 2**64 - 1], [9, "f", "18446744073709551615"]]
    for row in rows:
        by_row = adapt_row(row, specs, targets, dialect, None)
        got = adapted(row)
        assert got == by_row, (dialect, row)
        assert [type(v) for v in got] == [type(v) for v in by_row], (dialect, row)
    with pytest.raises(ValueError, match="zip"):
        adapted([1, "a"])


def test_row_adapter_looks_for_nul_in_the_strings_of_a_plain_row() -> None:
    # PostgreSQL's text holds no U+0000: a plain row with one goes the policy's way.
    specs = [_spec("i", "INT"), TEXT]
    targets: list[Any] = [sa.Integer(), sa.Text()]
    for nul in ("strip", "error"):
        policy = policy_for("postgresql", "null", nul)
        adapted = row_adapter(specs, targets, "postgresql", policy)
        assert adapted([1, "plain"]) == [1, "plain"]
        if nul == "strip":
            assert adapted([1, "a\x00b"]) == adapt_row([1, "a\x00b"], specs, targets,
                                                       "postgresql", policy)
        else:
            with pytest.raises(ValueRefused):
                adapted([1, "a\x00b"])


@pytest.mark.parametrize(("dialect", "nul"), [("postgresql", "strip"), ("postgresql", "error"),
                                              ("mariadb", "strip")])
def test_rows_adapter_gives_what_row_adapter_gives_row_by_row(dialect: str, nul: str) -> None:
    """The compiled check of plain rows: the same values of the same types as the
    adapter's, each row a new list; a row it does not pass (NULL, bool, a str of an int
    column, U+0000 where the target refuses it, a tuple, another width) is the adapter's,
    errors included."""
    policy = policy_for(dialect, "null", "strip" if nul == "strip" else "error")
    specs = [_spec("i", "INT"), TEXT, _spec("big", "BIGINT", unsigned=True)]
    targets: list[Any] = [sa.Integer(), sa.Text(), sa.Numeric(20)]
    one = row_adapter(specs, targets, dialect, policy)
    every = rows_adapter(specs, targets, dialect, policy)
    rows: list[Sequence[ThlValue]] = [
        [1, "a", 2], [None, "b", 3], [True, "c", 4], ["17", "d", 5], (6, "g", 8),
        [2**70, "e", 2**64 - 1], [9, "f", "18446744073709551615"], [1, "", 0]]
    if nul == "strip":
        rows.append([3, "a\x00b", 4])
    got = every(rows)
    assert got == [one(row) for row in rows]
    assert [[type(v) for v in r] for r in got] == [[type(v) for v in one(r)] for r in rows]
    assert not any(a is b for a, b in zip(got, rows, strict=True))
    with pytest.raises(ValueError, match="zip"):
        every([[1, "a", 2], [1, "a"]])
    if nul == "error":
        with pytest.raises(ValueRefused):
            every([[1, "a", 2], [1, "a\x00b", 2]])
    # A layout whose rows never pass by their types alone: the adapter's, row by row.
    layout = [s for s, *_ in _LAYOUT]
    kinds = [pg if dialect != "mariadb" else my for _, pg, my, _ in _LAYOUT]
    full = [[values[r % len(values)] for *_, values in _LAYOUT] for r in range(6)]
    lenient = policy_for(dialect, "null", "strip")  # the layout holds U+0000 and zero dates
    assert rows_adapter(layout, kinds, dialect, lenient)(full) == \
        [row_adapter(layout, kinds, dialect, lenient)(r) for r in full]
