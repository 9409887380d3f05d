"""The MongoDB type map (``consumers/mongodb/types.py``): THL values into exact BSON values."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import unquote

import bson
import pytest
from bson.decimal128 import Decimal128

from consumers.mongodb.naming import (
    DATABASE,
    FERRETDB_DATABASE,
    collection_problem,
    escape_name,
    field_name,
    refused_field,
)
from consumers.mongodb.types import (
    TypeOptions,
    ValueRefused,
    converter,
    format_timedelta,
    key_converter,
    thl_value,
)
from thl_topics.checksum import canonical
from thl_topics.event import ColumnSpec, ThlValue

DEC128 = TypeOptions(decimal128=True)
STRINGS = TypeOptions(decimal128=False)


def spec(type_: str, length: int = 0, scale: int = 0, **kw: Any) -> ColumnSpec:
    return ColumnSpec(index=1, name="c", type=type_, length=length, scale=scale, **kw)


def conv(s: ColumnSpec, raw: ThlValue, opts: TypeOptions = DEC128, json: bool = False) -> Any:
    value = converter(s, opts, json)(raw)
    # Whatever the map returns must encode to BSON and come back as itself.
    if value is not None:
        back = bson.decode(bson.encode({"v": value}))["v"]
        assert (back == value and type(back) is type(value)) or isinstance(value, int)
    return value


def test_integers_beyond_int64_are_decimal128_or_exact_strings() -> None:
    big = spec("BIGINT", unsigned=True)
    assert conv(big, 9223372036854775807) == 9223372036854775807
    assert conv(big, "18446744073709551615") == Decimal128("18446744073709551615")
    assert str(conv(big, "18446744073709551615").to_decimal()) == "18446744073709551615"
    assert conv(big, "18446744073709551615", STRINGS) == "18446744073709551615"
    assert conv(spec("BIT", 64), "18446744073709551615", STRINGS) == "18446744073709551615"
    assert conv(spec("BIT", 9), 511) == 511
    assert conv(spec("TINYINT"), -128) == -128 and conv(spec("YEAR"), 2155) == 2155
    assert conv(spec("INT"), None) is None


def test_decimals_keep_every_digit() -> None:
    small = spec("DECIMAL", 12, 2)
    assert conv(small, "12.50") == Decimal128("12.50")
    assert str(conv(small, "12.50").to_decimal()) == "12.50"  # the scale survives
    assert str(conv(small, "-0.00").to_decimal()) == "-0.00"
    assert conv(small, "12.50", STRINGS) == "12.50"
    edge = spec("DECIMAL", 34, 0)
    assert str(conv(edge, "9" * 34).to_decimal()) == "9" * 34
    # DECIMAL(65,30) holds more than Decimal128's 34 digits: always its exact text.
    wide = "99999999999999999999999999999999999.999999999999999999999999999999"
    assert conv(spec("DECIMAL", 65, 30), wide) == wide
    assert conv(spec("DECIMAL", 65, 30), "-0.000000000000000000000000000001") \
        == "-0.000000000000000000000000000001"


def test_floats_are_doubles() -> None:
    assert conv(spec("DOUBLE"), 1.7976931348623157e308) == 1.7976931348623157e308
    assert conv(spec("FLOAT"), 3.4028234663852886e38) == 3.4028234663852886e38
    assert type(conv(spec("DOUBLE"), 5)) is float


def test_dates_and_datetimes_up_to_milliseconds_are_bson_dates() -> None:
    assert conv(spec("DATE"), "2024-02-29") == dt.datetime(2024, 2, 29)
    assert conv(spec("DATETIME", scale=3), "2024-02-29 12:34:56.789") == \
        dt.datetime(2024, 2, 29, 12, 34, 56, 789000)
    assert conv(spec("TIMESTAMP"), "2038-01-19 03:14:07") == \
        dt.datetime(2038, 1, 19, 3, 14, 7)
    assert conv(spec("DATETIME"), "0001-01-01 00:00:00") == \
        dt.datetime(1, 1, 1)


def test_microsecond_datetimes_are_the_text_mysql_prints() -> None:
    dt6 = spec("DATETIME", scale=6)
    assert conv(dt6, "2001-02-03 04:05:06.000007") == "2001-02-03 04:05:06.000007"
    # The THL leaves out a zero fraction; the column prints all six digits.
    assert conv(dt6, "2001-02-03 04:05:06") == "2001-02-03 04:05:06.000000"
    assert conv(spec("TIMESTAMP", scale=4), "2001-02-03 04:05:06.123400") == \
        "2001-02-03 04:05:06.1234"
    assert conv(dt6, "0001-01-01 00:00:00.000001") == "0001-01-01 00:00:00.000001"


def test_zero_dates_are_null_by_default_the_text_mysql_prints_or_refused() -> None:
    text = TypeOptions(zero_dates="text")
    zeros = [(spec("DATE"), "0000-00-00"), (spec("DATE"), "0000-01-01"),  # year 0
             (spec("DATETIME"), "0000-00-00 00:00:00"),
             (spec("DATETIME", scale=6), "0000-00-00 00:00:00.000000"),
             (spec("TIMESTAMP"), "0000-00-00 00:00:00"),
             (spec("DATE"), "2024-00-00"), (spec("DATETIME"), "2024-03-00 10:00:00")]
    for column, raw in zeros:
        assert conv(column, raw) is None
        assert conv(column, raw, text) == raw  # as stored, with the column's digits
        with pytest.raises(ValueRefused, match="zero date"):
            conv(column, raw, TypeOptions(zero_dates="error"))
    assert conv(spec("DATE"), "2024-03-05", TypeOptions(zero_dates="error")) == \
        dt.datetime(2024, 3, 5)


def test_time_is_the_text_mysql_prints_with_the_column_digits() -> None:
    assert conv(spec("TIME", scale=6), "-838:59:59") == "-838:59:59.000000"
    assert conv(spec("TIME", scale=6), "-00:00:00.000001") == "-00:00:00.000001"
    assert conv(spec("TIME"), "838:59:59") == "838:59:59"
    assert conv(spec("TIME"), "1:02:03") == "01:02:03"
    assert conv(spec("TIME", scale=3), "10:00:00.5") == "10:00:00.500"
    assert format_timedelta(-dt.timedelta(microseconds=1), 6) == "-00:00:00.000001"
    assert format_timedelta(dt.timedelta(hours=838, minutes=59, seconds=59), 0) == "838:59:59"


def test_set_enum_and_strings() -> None:
    assert conv(spec("SET"), "x,z") == ["x", "z"]
    assert conv(spec("SET"), "") == []
    assert conv(spec("ENUM"), "ç😀") == "ç😀"
    assert conv(spec("VARCHAR"), "a\x00b") == "a\x00b"
    # A SET in a primary key cannot be an array inside _id: its text instead.
    assert key_converter(spec("SET"), DEC128)("x,z") == "x,z"


def test_binary_is_byte_exact_and_binary_n_keeps_its_padding() -> None:
    assert conv(spec("BINARY", 4), b"\x00\x01") == b"\x00\x01\x00\x00"
    assert conv(spec("BLOB", blob=True), b"\x00" * 3 + b"\xfe\x00") == b"\x00\x00\x00\xfe\x00"
    assert conv(spec("VARBINARY", 20, blob=True), "") == b""
    assert conv(spec("VARBINARY", 20), b"") == b""


def test_json_is_an_embedded_document_with_exact_numbers() -> None:
    j = spec("JSON")
    value = conv(j, '{"k": [1, "é", null, 1.5e300], "b": {"z": 1, "a": 2}}')
    assert value == {"k": [1, "é", None, 1.5e300], "b": {"z": 1, "a": 2}}
    assert list(value["b"]) == ["z", "a"]  # key order kept
    assert conv(j, "[]") == [] and conv(j, '"text"') == "text"
    assert conv(j, '{"n": 18446744073709551615}') == {"n": Decimal128("18446744073709551615")}
    assert conv(j, '{"n": 18446744073709551615}', STRINGS) == {"n": "18446744073709551615"}
    # A text column named in json_columns is parsed; without, it stays text.
    assert conv(spec("TEXT"), '{"a": 1}', json=True) == {"a": 1}
    assert conv(spec("TEXT"), '{"a": 1}') == '{"a": 1}'


@pytest.mark.parametrize(("text", "message"), [
    ('{"$set": 1}', "JSON key '$set' at '$set' cannot be stored: it starts with '$'"),
    ('{"a": [{"x.y": 1}]}', "JSON key 'x.y' at 'a[0].x.y' cannot be stored: it contains '.'"),
    ('{"a\\u0000b": 1}', "contains U+0000"),
    ("{not json", "not valid JSON"),
    ("[" * 102 + "]" * 102, "nested deeper than 100 levels"),
])
def test_json_keys_mongodb_refuses_are_errors_never_changed(text: str, message: str) -> None:
    with pytest.raises(ValueRefused, match=re.escape(message)):
        converter(spec("JSON"), DEC128)(text)


def test_names_are_escaped_reversibly() -> None:
    for name in ("a.b", "$x", 'we"ird', "back\\slash", "tab\there", "50%", "ünï é", "plain"):
        escaped = escape_name(name)
        assert unquote(escaped) == name
        assert not any(ch in escaped for ch in '$."\\\t')
    assert escape_name("plain") == "plain" and escape_name("back`tick") == "back`tick"
    assert escape_name("a.b") == "a%2Eb" and escape_name("a%2Eb") == "a%252Eb"  # injective
    assert field_name("_id", True) == "%5Fid" and field_name("_seqno", True) == "%5Fseqno"
    assert field_name("_other", True) == "_other"
    assert field_name("a.b", False) == "a.b"


def test_verbatim_names_are_checked_against_the_server() -> None:
    assert refused_field("$x", ferretdb=False) is not None
    assert refused_field("a.b", ferretdb=False) is not None
    assert refused_field("_id", ferretdb=False) is not None
    assert refused_field('we"ird', ferretdb=False) is None
    assert refused_field('we"ird', ferretdb=True) is not None
    assert refused_field("tab\tx", ferretdb=True) is not None
    assert refused_field("ünï é", ferretdb=True) is None
    assert DATABASE.problem("src_1") is None and FERRETDB_DATABASE.problem("src_1") is None
    assert DATABASE.problem("shop ü") is not None  # the space
    assert DATABASE.problem("shopü") is None
    assert FERRETDB_DATABASE.problem("shopü") is not None
    assert DATABASE.problem("a.b") is not None
    assert DATABASE.problem("x" * 64) is not None
    assert collection_problem("db", "sel`ect %22tbl%22 ü") is None
    assert collection_problem("db", "a$b") is not None
    assert collection_problem("db", "system.users") is not None


@pytest.mark.parametrize(("column", "raw"), [
    (spec("BIGINT", unsigned=True), "18446744073709551615"),
    (spec("BIGINT", unsigned=True), 5),
    (spec("INT"), -7),
    (spec("DECIMAL", 12, 2), "-12.50"),
    # Wider than Decimal128 (a string); within the 28 digits checksum.canonical quantizes.
    (spec("DECIMAL", 40, 2), "12345678901234567890.50"),
    (spec("DOUBLE"), 1.5e300),
    (spec("FLOAT"), 3.4028234663852886e38),
    (spec("DATE"), "2024-02-29"),
    (spec("DATE"), "0000-00-00"),
    (spec("DATETIME", scale=6), "2001-02-03 04:05:06.000007"),
    (spec("DATETIME", scale=6), "2001-02-03 04:05:06"),
    (spec("DATETIME", scale=3), "2001-02-03 04:05:06.123"),
    (spec("TIMESTAMP"), "2038-01-19 03:14:07"),
    (spec("TIME", scale=6), "-838:59:59"),
    (spec("TIME"), "1:02:03"),
    (spec("SET"), "x,z"),
    (spec("SET"), ""),
    (spec("ENUM"), "ç😀"),
    (spec("BIT", 64), "18446744073709551615"),
    (spec("BINARY", 4), b"\x00\x01"),
    (spec("BLOB", blob=True), b"\x00\xff"),
    (spec("JSON"), '{"k": [1, "é", null, 2.5]}'),  # as MySQL prints JSON
    (spec("VARCHAR"), None),
])
@pytest.mark.parametrize("opts", [DEC128, STRINGS])
def test_stored_values_read_back_as_the_thl_values_checks_compare(
        column: ColumnSpec, raw: ThlValue, opts: TypeOptions) -> None:
    stored = converter(column, opts)(raw)
    back = thl_value(column, bson.decode(bson.encode({"v": stored}))["v"])
    assert canonical(column, back) == canonical(column, raw)
