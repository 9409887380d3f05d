"""The type map of change topics: THL column spec -> Kafka Connect / Avro schema and value.

The types are Debezium's (MySQL connector defaults, ``decimal.handling.mode=precise``,
``bigint.unsigned.handling.mode=precise``, ``time.precision.mode=adaptive_time_microseconds``,
``binary.handling.mode=bytes``), so every tool written for Debezium topics reads them as it
reads Debezium's, and every value is exact:

=======================  ==============================  ================================
MySQL/MariaDB            Connect schema (name)           value
=======================  ==============================  ================================
TINYINT, SMALLINT        int16                           (SMALLINT UNSIGNED: int32)
MEDIUMINT, INT           int32                           (INT UNSIGNED: int64)
BIGINT                   int64
BIGINT UNSIGNED          bytes, o.a.k.connect.data       exact, scale 0, precision 20
                         .Decimal
DECIMAL(p,s)             bytes, ...Decimal               exact; JSON: a plain number
FLOAT / DOUBLE           float32 / float64               FLOAT is exact in 32 bits
BIT(1) / BIT(n)          boolean / bytes,                Bits: little-endian, (n+7)/8
                         io.debezium.data.Bits           bytes, as Debezium writes them
YEAR                     int32, io.debezium.time.Year
DATE                     int32, io.debezium.time.Date    days since 1970-01-01
TIME(p)                  int64, ...time.MicroTime        microseconds, may be negative or
                                                         beyond 24 h
DATETIME(0..3)           int64, ...time.Timestamp        milliseconds since the epoch
DATETIME(4..6)           int64, ...time.MicroTimestamp   microseconds since the epoch
TIMESTAMP(p)             string, ...time.ZonedTimestamp  ISO-8601 in UTC, p fraction digits
ENUM / SET               string, io.debezium.data.Enum   ``allowed`` lists the members
                         / EnumSet
JSON                     string, io.debezium.data.Json
CHAR, VARCHAR, TEXT      string
BINARY, VARBINARY, BLOB  bytes                           BINARY(n) padded to n bytes
=======================  ==============================  ================================

Zero and partial dates ('0000-00-00', '2024-03-00') have no instant: they become null, as in
Debezium. Every column is optional in the schema (a new column is then always a
backward-compatible change), except the key's fields. Avro field names: ``naming.py``.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import incomplete_date

#: A Python value as it goes into Avro (fastavro) or the JSON writer.
Value = int | float | str | bytes | bool | Decimal | None
Convert = Callable[[ThlValue], Value]

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - DATETIME has no zone: counted as UTC
_JSON_TYPE = {"float32": "float", "float64": "double"}

DECIMAL = "org.apache.kafka.connect.data.Decimal"
#: DECIMAL(65,30) needs more than the default 28 digits.
_WIDE = decimal.Context(prec=100)


@dataclass(frozen=True)
class ColumnType:
    """How one column travels: its Connect schema, its Avro schema and its value."""

    #: Kafka Connect schema type: int16, int32, int64, float32, float64, boolean, string,
    #: bytes.
    connect_type: str
    #: Connect logical/semantic name (None for a plain type).
    name: str | None
    #: Connect schema parameters (strings).
    parameters: dict[str, str] = field(default_factory=dict)
    version: int | None = None
    convert: Convert = field(default=lambda v: v, compare=False)

    def connect(self) -> dict[str, Any]:
        """The Connect JSON schema of the type (without ``field`` and ``optional``)."""
        # JsonConverter's names for FLOAT32/FLOAT64 are "float" and "double".
        schema: dict[str, Any] = {"type": _JSON_TYPE.get(self.connect_type, self.connect_type)}
        if self.name is not None:
            schema["name"] = self.name
        if self.version is not None:
            schema["version"] = self.version
        if self.parameters:
            schema["parameters"] = dict(self.parameters)
        return schema

    def avro(self) -> dict[str, Any]:
        """The Avro schema, with the ``connect.*`` properties Confluent's AvroData writes, so
        a Kafka Connect Avro converter rebuilds the same Connect schema."""
        base = {"int16": "int", "int32": "int", "int64": "long", "float32": "float",
                "float64": "double", "boolean": "boolean", "string": "string",
                "bytes": "bytes"}[self.connect_type]
        schema: dict[str, Any] = {"type": base}
        if self.connect_type == "int16":
            schema["connect.type"] = "int16"
        if self.name is not None:
            if self.version is not None:
                schema["connect.version"] = self.version
            if self.parameters:
                schema["connect.parameters"] = dict(self.parameters)
            schema["connect.name"] = self.name
        if self.name == DECIMAL:
            schema["logicalType"] = "decimal"
            schema["scale"] = int(self.parameters["scale"])
            schema["precision"] = int(self.parameters["connect.decimal.precision"])
        return schema


def _int(raw: ThlValue) -> Value:
    return None if raw is None else int(raw)


def _float(raw: ThlValue) -> Value:
    return None if raw is None else float(raw)


def _text(raw: ThlValue) -> Value:
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "surrogateescape")
    return str(raw)


def _bytes(raw: ThlValue) -> Value:
    if raw is None or isinstance(raw, bytes):
        return raw
    return str(raw).encode("utf-8", "surrogateescape")


def _decimal(scale: int) -> Convert:
    quantum = Decimal(1).scaleb(-scale)

    def convert(raw: ThlValue) -> Value:
        if raw is None:
            return None
        value = Decimal(raw)  # type: ignore[arg-type]
        exponent = value.as_tuple().exponent
        if isinstance(exponent, int) and exponent == -scale:
            return value  # THL decimals carry exactly their scale digits
        # Anything else (an integer) gets the column's scale; 65 digits need the context.
        return value.quantize(quantum, context=_WIDE)
    return convert


def _padded(length: int) -> Convert:
    def convert(raw: ThlValue) -> Value:
        value = _bytes(raw)
        return value.ljust(length, b"\x00") if isinstance(value, bytes) else value
    return convert


def _bits(length: int) -> Convert:
    size = max(1, (length + 7) // 8)

    def convert(raw: ThlValue) -> Value:
        if raw is None:
            return None
        return int(raw).to_bytes(size, "little")
    return convert


def _bit1(raw: ThlValue) -> Value:
    return None if raw is None else bool(int(raw))


def _date(raw: ThlValue) -> Value:
    if raw is None or incomplete_date(raw):
        return None
    return (dt.date.fromisoformat(str(raw)) - _EPOCH_DATE).days


def _micros_of_time(raw: ThlValue) -> Value:
    if raw is None:
        return None
    text = str(raw)
    negative = text.startswith("-")
    hms, _, frac = text.lstrip("-").partition(".")
    hours, minutes, seconds = (int(p) for p in hms.split(":"))
    micros = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 \
        + (int((frac + "000000")[:6]) if frac else 0)
    return -micros if negative else micros


def _datetime_micros(raw: ThlValue) -> int | None:
    if raw is None or incomplete_date(raw):
        return None
    delta = dt.datetime.fromisoformat(str(raw)) - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _datetime_millis(raw: ThlValue) -> Value:
    micros = _datetime_micros(raw)
    return None if micros is None else micros // 1000


def _zoned(scale: int) -> Convert:
    def convert(raw: ThlValue) -> Value:
        if raw is None or incomplete_date(raw):
            return None
        value = dt.datetime.fromisoformat(str(raw))
        text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:"
                f"{value.minute:02d}:{value.second:02d}")
        if scale:
            text += "." + f"{value.microsecond:06d}"[:scale]
        return text + "Z"
    return convert


def column_type(spec: ColumnSpec) -> ColumnType:
    """The change-topic type of a THL column (see the table above)."""
    kind = spec.type.upper()
    if kind in ("TINYINT", "SMALLINT"):
        wide = kind == "SMALLINT" and spec.unsigned
        return ColumnType("int32" if wide else "int16", None, convert=_int)
    if kind == "MEDIUMINT" or (kind in ("INT", "INTEGER") and not spec.unsigned):
        return ColumnType("int32", None, convert=_int)
    if kind in ("INT", "INTEGER") or (kind == "BIGINT" and not spec.unsigned):
        return ColumnType("int64", None, convert=_int)
    if kind == "BIGINT":
        return ColumnType("bytes", DECIMAL, {"scale": "0", "connect.decimal.precision": "20"},
                          version=1, convert=_decimal(0))
    if kind in ("DECIMAL", "NUMERIC", "NEWDECIMAL"):
        precision = spec.length or 65
        return ColumnType("bytes", DECIMAL, {"scale": str(spec.scale),
                                             "connect.decimal.precision": str(precision)},
                          version=1, convert=_decimal(spec.scale))
    if kind == "FLOAT":
        return ColumnType("float32", None, convert=_float)
    if kind in ("DOUBLE", "REAL"):
        return ColumnType("float64", None, convert=_float)
    if kind == "BIT":
        if spec.length <= 1:
            return ColumnType("boolean", None, convert=_bit1)
        return ColumnType("bytes", "io.debezium.data.Bits", {"length": str(spec.length)},
                          version=1, convert=_bits(spec.length))
    if kind == "YEAR":
        return ColumnType("int32", "io.debezium.time.Year", version=1, convert=_int)
    if kind == "DATE":
        return ColumnType("int32", "io.debezium.time.Date", version=1, convert=_date)
    if kind == "TIME":
        return ColumnType("int64", "io.debezium.time.MicroTime", version=1,
                          convert=_micros_of_time)
    if kind == "DATETIME":
        if spec.scale <= 3:
            return ColumnType("int64", "io.debezium.time.Timestamp", version=1,
                              convert=_datetime_millis)
        return ColumnType("int64", "io.debezium.time.MicroTimestamp", version=1,
                          convert=_datetime_micros)
    if kind == "TIMESTAMP":
        return ColumnType("string", "io.debezium.time.ZonedTimestamp", version=1,
                          convert=_zoned(spec.scale))
    if kind in ("ENUM", "SET"):
        name = "io.debezium.data.Enum" if kind == "ENUM" else "io.debezium.data.EnumSet"
        return ColumnType("string", name, {"allowed": ",".join(spec.enum_values)},
                          version=1, convert=_text)
    if kind == "JSON":
        return ColumnType("string", "io.debezium.data.Json", version=1, convert=_text)
    if kind == "BINARY":
        return ColumnType("bytes", None, convert=_padded(spec.length))
    if kind in ("VARBINARY", "BLOB", "GEOMETRY") or (spec.blob and spec.charset is None):
        return ColumnType("bytes", None, convert=_bytes)
    return ColumnType("string", None, convert=_text)
