"""The change-topic type map: Debezium's types, exact values, legal Avro names."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from consumers.changes.naming import avro_name, avro_namespace
from consumers.changes.types import column_type
from thl_topics.event import ColumnSpec


def _spec(kind: str, **kw: Any) -> ColumnSpec:
    return ColumnSpec(index=1, name="c", type=kind, **kw)


def _avro_round_trip(spec: ColumnSpec, value: object) -> object:
    schema = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "c", "type": ["null", column_type(spec).avro()]}]})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, {"c": value})
    out.seek(0)
    return fastavro.schemaless_reader(out, schema, schema)["c"]  # type: ignore[call-overload,index]


@pytest.mark.parametrize(("spec", "raw", "value", "connect"), [
    (_spec("TINYINT"), -128, -128, ("int16", None)),
    (_spec("SMALLINT", unsigned=True), 65535, 65535, ("int32", None)),
    (_spec("INT", unsigned=True), 4294967295, 4294967295, ("int64", None)),
    (_spec("BIGINT"), -(2**63), -(2**63), ("int64", None)),
    (_spec("BIGINT", unsigned=True), "18446744073709551615", Decimal("18446744073709551615"),
     ("bytes", "org.apache.kafka.connect.data.Decimal")),
    (_spec("DECIMAL", length=65, scale=30),
     "-99999999999999999999999999999999999.999999999999999999999999999999",
     Decimal("-99999999999999999999999999999999999.999999999999999999999999999999"),
     ("bytes", "org.apache.kafka.connect.data.Decimal")),
    (_spec("DECIMAL", length=10, scale=4), "0.0000", Decimal("0.0000"),
     ("bytes", "org.apache.kafka.connect.data.Decimal")),
    (_spec("FLOAT"), 3.4028200183756560e38, 3.4028200183756560e38, ("float32", None)),
    (_spec("DOUBLE"), -2.2250738585072014e-308, -2.2250738585072014e-308, ("float64", None)),
    (_spec("BIT", length=1), 1, True, ("boolean", None)),
    (_spec("BIT", length=9), 0x1FF, b"\xff\x01", ("bytes", "io.debezium.data.Bits")),
    (_spec("BIT", length=64), "18446744073709551615", b"\xff" * 8,
     ("bytes", "io.debezium.data.Bits")),
    (_spec("YEAR"), 2155, 2155, ("int32", "io.debezium.time.Year")),
    (_spec("DATE"), "9999-12-31", (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days,
     ("int32", "io.debezium.time.Date")),
    (_spec("DATE"), "0000-00-00", None, ("int32", "io.debezium.time.Date")),
    (_spec("TIME", scale=6), "-838:59:59.000000", -(838 * 3600 + 59 * 60 + 59) * 10**6,
     ("int64", "io.debezium.time.MicroTime")),
    (_spec("TIME", scale=6), "-00:00:00.000001", -1, ("int64", "io.debezium.time.MicroTime")),
    (_spec("DATETIME", scale=6), "0001-01-01 00:00:00.000001", -62135596799999999,
     ("int64", "io.debezium.time.MicroTimestamp")),
    (_spec("DATETIME", scale=0), "2024-02-29 12:34:56", 1709210096000,
     ("int64", "io.debezium.time.Timestamp")),
    (_spec("DATETIME", scale=0), "0000-00-00 00:00:00", None,
     ("int64", "io.debezium.time.Timestamp")),
    (_spec("DATETIME", scale=0), "2024-03-00 10:00:00", None,  # partial: no instant either
     ("int64", "io.debezium.time.Timestamp")),
    (_spec("DATE"), "2024-00-00", None, ("int32", "io.debezium.time.Date")),
    (_spec("TIMESTAMP", scale=0), "2024-03-00 10:00:00", None,
     ("string", "io.debezium.time.ZonedTimestamp")),
    (_spec("TIMESTAMP", scale=6), "2038-01-19 03:14:07.999999", "2038-01-19T03:14:07.999999Z",
     ("string", "io.debezium.time.ZonedTimestamp")),
    (_spec("TIMESTAMP", scale=0), "1970-01-01 00:00:01", "1970-01-01T00:00:01Z",
     ("string", "io.debezium.time.ZonedTimestamp")),
    (_spec("ENUM", enum_values=["a", "ç😀"]), "ç😀", "ç😀", ("string", "io.debezium.data.Enum")),
    (_spec("SET", enum_values=["x", "y"]), "x,y", "x,y", ("string", "io.debezium.data.EnumSet")),
    (_spec("JSON"), '{"k": 1}', '{"k": 1}', ("string", "io.debezium.data.Json")),
    (_spec("VARCHAR", charset="utf8mb4"), "héllo 😀", "héllo 😀", ("string", None)),
    (_spec("BINARY", length=4, blob=True), b"\x00\x01", b"\x00\x01\x00\x00", ("bytes", None)),
    (_spec("VARBINARY", blob=True), b"", b"", ("bytes", None)),
    (_spec("BLOB", blob=True), b"\x00\xfe", b"\x00\xfe", ("bytes", None)),
    (_spec("INT"), None, None, ("int32", None)),
])
def test_debezium_types_and_exact_values(spec: ColumnSpec, raw: Any, value: Any,
                                         connect: tuple[str, str | None]) -> None:
    kind = column_type(spec)
    assert (kind.connect_type, kind.name) == connect
    converted = kind.convert(raw)
    assert converted == value and type(converted) is type(value)
    # What Avro carries back is the same value (FLOAT exactly in 32 bits, 65-digit decimals).
    assert _avro_round_trip(spec, converted) == value


def test_decimal_keeps_its_scale_and_precision_in_both_schemas() -> None:
    kind = column_type(_spec("DECIMAL", length=12, scale=2))
    assert kind.connect()["parameters"] == {"scale": "2", "connect.decimal.precision": "12"}
    avro = kind.avro()
    assert (avro["logicalType"], avro["precision"], avro["scale"]) == ("decimal", 12, 2)
    assert avro["connect.name"] == "org.apache.kafka.connect.data.Decimal"
    assert kind.convert(5) == Decimal("5.00")  # an integer gets the column's scale


def test_enum_members_travel_as_the_allowed_parameter() -> None:
    kind = column_type(_spec("ENUM", enum_values=["a", "b"]))
    assert kind.connect()["parameters"] == {"allowed": "a,b"}
    assert column_type(_spec("SMALLINT")).avro() == {"type": "int", "connect.type": "int16"}


@pytest.mark.parametrize(("name", "avro"), [
    ("plain_name", "plain_name"),
    ("we\"ird", "we_u0022ird"),
    ("ünï é", "_u00fcn_u00ef_u0020_u00e9"),
    ("9lives", "_u0039lives"),
    ("😀", "_ud83d_ude00"),
    ("", "_"),
])
def test_avro_names_escape_what_avro_forbids(name: str, avro: str) -> None:
    assert avro_name(name) == avro


def test_topic_namespaces_are_legal_avro() -> None:
    assert avro_namespace("demo.shop-1.2items") == "demo.shop_u002d1._u0032items"
