"""Canonical THL value forms: every MariaDB edge value survives the trip exactly."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from thl_topics.event import ColumnSpec
from thl_topics.values import from_thl, set_to_thl, to_thl


@pytest.mark.parametrize(("type_", "value", "thl"), [
    ("BIGINT", 18446744073709551615, "18446744073709551615"),
    ("BIGINT", -9223372036854775808, -9223372036854775808),
    ("BIT", (1 << 64) - 1, "18446744073709551615"),
    ("TINYINT", 0, 0),
    ("YEAR", 2155, 2155),
    ("DECIMAL", Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
     "-12345678901234567890123456789012345.123456789012345678901234567890"),
    ("DECIMAL", Decimal("0.000"), "0.000"),
    ("DOUBLE", 1.7976931348623157e308, 1.7976931348623157e308),
    ("FLOAT", 3.4028234663852886e38, 3.4028234663852886e38),
    ("DATETIME", dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "9999-12-31 23:59:59.999999"),
    ("DATETIME", dt.datetime(1, 1, 1), "0001-01-01 00:00:00"),
    ("DATE", dt.date(1000, 1, 1), "1000-01-01"),
    ("TIME", -dt.timedelta(hours=838, minutes=59, seconds=59), "-838:59:59"),
    ("TIME", -dt.timedelta(microseconds=1), "-00:00:00.000001"),
    ("TIME", dt.timedelta(hours=1, microseconds=500000), "01:00:00.500000"),
    ("VARCHAR", "héllo 😀", "héllo 😀"),
    ("BLOB", b"\x00\xff\x00", b"\x00\xff\x00"),
    ("JSON", '{"a": [1, null]}', '{"a": [1, null]}'),
])
def test_round_trip(type_: str, value: object, thl: object) -> None:
    spec = ColumnSpec(1, "c", type_)
    assert to_thl(value) == thl
    assert from_thl(spec, to_thl(value)) == value


def test_timestamp_is_utc() -> None:
    aware = dt.datetime(2024, 3, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert to_thl(aware) == "2024-03-01 10:00:00"
    assert from_thl(ColumnSpec(1, "t", "TIMESTAMP"), "2024-03-01 10:00:00") == aware


def test_zero_dates_stay_text() -> None:
    assert from_thl(ColumnSpec(1, "d", "DATETIME"), "0000-00-00 00:00:00") == \
        "0000-00-00 00:00:00"
    assert from_thl(ColumnSpec(1, "d", "DATE"), "0000-00-00") == "0000-00-00"


def test_null_is_null_for_every_type() -> None:
    for type_ in ("INT", "DECIMAL", "DATETIME", "TIME", "BLOB"):
        assert from_thl(ColumnSpec(1, "c", type_), to_thl(None)) is None


def test_set_follows_definition_order() -> None:
    spec = ColumnSpec(1, "s", "SET", enum_values=["x", "b", "a"])
    assert set_to_thl({"a", "x"}, spec) == "x,a"
    assert set_to_thl(set(), spec) == ""


def test_unknown_python_type_is_refused() -> None:
    with pytest.raises(TypeError, match="no THL form for object"):
        to_thl(object())
