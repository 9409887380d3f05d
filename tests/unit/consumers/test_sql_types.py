"""THL values bend to what the target column is, losing nothing."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from consumers.sql.types import adapt, adapt_row
from thl_topics.event import ColumnSpec


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
