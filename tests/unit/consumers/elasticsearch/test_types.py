"""The Elasticsearch type map: mappings per source type, and exact values through JSON."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from consumers.elasticsearch.types import (
    DATETIME_FORMAT,
    Features,
    RowEncoder,
    decode,
    encoder,
    field_mapping,
    source_type,
)
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import from_thl

FULL = Features(unsigned_long=True, scaled_float=True)
MINIMAL = Features(unsigned_long=False, scaled_float=False)


def spec(type_: str, **kw: Any) -> ColumnSpec:
    return ColumnSpec(index=1, name="c", type=type_, **kw)


@pytest.mark.parametrize(("column", "full", "minimal"), [
    # Every integer a long holds is a long: a column widened on the source still fits.
    (spec("TINYINT"), "long", "long"),
    (spec("TINYINT", unsigned=True), "long", "long"),
    (spec("SMALLINT"), "long", "long"),
    (spec("SMALLINT", unsigned=True), "long", "long"),
    (spec("MEDIUMINT", unsigned=True), "long", "long"),
    (spec("INT"), "long", "long"),
    (spec("INT", unsigned=True), "long", "long"),
    (spec("BIGINT"), "long", "long"),
    (spec("BIGINT", unsigned=True), "unsigned_long", "double"),
    (spec("YEAR"), "short", "short"),
    (spec("BIT", length=1), "long", "long"),
    (spec("BIT", length=63), "long", "long"),
    (spec("BIT", length=64), "unsigned_long", "double"),
    (spec("DECIMAL", length=18, scale=0), "long", "long"),
    (spec("DECIMAL", length=12, scale=2), "scaled_float", "double"),
    (spec("DECIMAL", length=20, scale=4), "double", "double"),
    (spec("DECIMAL", length=65, scale=30), "double", "double"),
    (spec("FLOAT"), "float", "float"),
    (spec("DOUBLE"), "double", "double"),
    (spec("DATE"), "date", "date"),
    (spec("DATETIME", scale=6), "date", "date"),
    (spec("TIMESTAMP"), "date", "date"),
    (spec("TIME", scale=6), "keyword", "keyword"),
    (spec("ENUM", charset="utf8mb4"), "keyword", "keyword"),
    (spec("SET", charset="utf8mb4"), "keyword", "keyword"),
    (spec("VARCHAR", charset="utf8mb4", length=200), "text", "text"),
    (spec("TEXT", charset="utf8mb4", blob=True), "text", "text"),
    (spec("JSON"), "text", "text"),
    (spec("VARBINARY", length=20), "binary", "binary"),
    (spec("BINARY", length=4), "binary", "binary"),
    (spec("BLOB", blob=True), "binary", "binary"),
    (spec("GEOMETRY", blob=True), "binary", "binary"),
    (spec("TYPE255"), "object", "object"),
])
def test_mapping_of_each_source_type(column: ColumnSpec, full: str, minimal: str) -> None:
    assert field_mapping(column, FULL)["type"] == full
    assert field_mapping(column, MINIMAL)["type"] == minimal


def test_mapping_details() -> None:
    assert field_mapping(spec("DECIMAL", length=12, scale=2), FULL)["scaling_factor"] == 100
    assert field_mapping(spec("DATETIME", scale=6), FULL)["format"] == DATETIME_FORMAT
    text = field_mapping(spec("VARCHAR", charset="utf8mb4"), FULL)
    assert text["fields"] == {"keyword": {"type": "keyword", "ignore_above": 256}}
    assert field_mapping(spec("TYPE255"), FULL) == {"type": "object", "enabled": False}
    assert field_mapping(spec("DECIMAL", length=65, scale=30), FULL)["meta"] == {
        "source_type": "DECIMAL(65,30)"}


@pytest.mark.parametrize(("column", "text"), [
    (spec("DECIMAL", length=65, scale=30), "DECIMAL(65,30)"),
    (spec("BIGINT", unsigned=True), "BIGINT UNSIGNED"),
    (spec("BIT", length=9), "BIT(9)"),
    (spec("DATETIME", scale=6), "DATETIME(6)"),
    (spec("VARCHAR", unsigned=True), "VARCHAR"),
])
def test_source_type(column: ColumnSpec, text: str) -> None:
    assert source_type(column) == text


#: (column, THL value, what goes into the JSON document)
CASES: list[tuple[ColumnSpec, ThlValue, Any]] = [
    (spec("BIGINT", unsigned=True), "18446744073709551615", 18446744073709551615),
    (spec("BIGINT"), -9223372036854775808, -9223372036854775808),
    (spec("BIT", length=64), "18446744073709551615", 18446744073709551615),
    (spec("BIT", length=9), 511, 511),
    (spec("YEAR"), 0, 0),
    (spec("DECIMAL", length=65, scale=30),
     "99999999999999999999999999999999999.999999999999999999999999999999",
     "99999999999999999999999999999999999.999999999999999999999999999999"),
    (spec("DECIMAL", length=65, scale=30), "-0.000000000000000000000000000001",
     "-0.000000000000000000000000000001"),
    (spec("DECIMAL", length=10, scale=4), "-0.5000", "-0.5000"),
    (spec("FLOAT"), 3.4028200183756568e38, 3.4028200183756568e38),
    (spec("DOUBLE"), 1.7976931348623157e308, 1.7976931348623157e308),
    (spec("DOUBLE"), -2.2250738585072014e-308, -2.2250738585072014e-308),
    (spec("DOUBLE"), -0.0, -0.0),
    (spec("DATE"), "9999-12-31", "9999-12-31"),
    (spec("DATETIME", scale=6), "0001-01-01 00:00:00.000001", "0001-01-01 00:00:00.000001"),
    (spec("TIMESTAMP"), "2038-01-19 03:14:07", "2038-01-19 03:14:07"),
    (spec("TIME", scale=6), "-838:59:59.000000", "-838:59:59.000000"),
    (spec("ENUM", charset="utf8mb4"), "ç😀", "ç😀"),
    (spec("SET", charset="utf8mb4"), "x,z", ["x", "z"]),
    (spec("SET", charset="utf8mb4"), "", []),
    (spec("VARCHAR", charset="utf8mb4"), "héllo 'q' \\ \x00 😀", "héllo 'q' \\ \x00 😀"),
    (spec("TEXT", charset="utf8mb4", blob=True), "", ""),
    (spec("VARBINARY", length=20), b"\x00\x01\x00\xff", "AAEA/w=="),
    (spec("VARBINARY", length=20), b"", ""),
    # The binlog strips BINARY(n)'s trailing zero bytes: the document has all n.
    (spec("BINARY", length=4), b"\x00\x01", "AAEAAA=="),
    (spec("BLOB", blob=True), b"\x00\x00\x00\xfe\x00", "AAAA/gA="),
]


@pytest.mark.parametrize(("column", "raw", "document"), CASES)
def test_values_round_trip_exactly_through_json(column: ColumnSpec, raw: ThlValue,
                                                document: Any) -> None:
    enc = encoder(column)
    value = raw if enc is None else enc(raw)
    assert value == document and type(value) is type(document)
    # What Elasticsearch keeps in _source and gives back.
    stored = json.loads(json.dumps(value, ensure_ascii=False))
    expected = from_thl(column, raw)
    assert decode(column, stored) == expected
    if isinstance(expected, float):
        assert repr(decode(column, stored)) == repr(expected)  # -0.0 stays -0.0


def test_decode_gives_typed_values() -> None:
    assert decode(spec("DECIMAL", length=65, scale=30), "-0.500") == Decimal("-0.500")
    assert str(decode(spec("DECIMAL", length=65, scale=30), "-0.500")) == "-0.500"
    assert decode(spec("TIME", scale=6), "-838:59:59.000000") == -dt.timedelta(
        hours=838, minutes=59, seconds=59)
    assert decode(spec("TIMESTAMP"), "2038-01-19 03:14:07") == dt.datetime(
        2038, 1, 19, 3, 14, 7, tzinfo=dt.UTC)
    assert decode(spec("DATE"), "0001-01-01") == dt.date(1, 1, 1)
    assert decode(spec("SET"), ["x", "z"]) == "x,z"
    assert decode(spec("INT"), None) is None
    with pytest.raises(ValueError, match="not base64"):
        decode(spec("VARBINARY"), "***")


def test_row_encoder_converts_only_what_needs_it() -> None:
    specs = [ColumnSpec(1, "id", "INT", primary_key=True),
             ColumnSpec(2, "b", "VARBINARY", length=4),
             ColumnSpec(3, "u", "BIGINT", unsigned=True),
             ColumnSpec(4, "s", "VARCHAR", charset="utf8mb4")]
    enc = RowEncoder(specs)
    assert enc.names == ["id", "b", "u", "s"]
    assert [i for i, _ in enc.convert] == [0, 1, 2]
    row: list[ThlValue] = [1, b"\xff", "18446744073709551615", "x"]
    assert enc.values(row) == [1, "/w==", 18446744073709551615, "x"]
    assert row == [1, b"\xff", "18446744073709551615", "x"]  # the THL row is untouched
    assert enc.values([None, None, None, None]) == [None, None, None, None]
