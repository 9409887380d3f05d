"""The type map: THL column specs into Elasticsearch field mappings and JSON values, and back.

Every value is stored exactly in ``_source``; the mapping decides how it is searched. Where
Elasticsearch has no exact type, the JSON value keeps the exact text and the field indexes
an approximation of it (stated below); reading ``_source`` back with ``decode`` gives the
source's value again.

===========================  ================================  ============================
source column                mapping                           value in ``_source``
===========================  ================================  ============================
TINYINT/SMALLINT/MEDIUMINT/  long (one type, so a column      JSON number
INT/BIGINT, BIT(n<64)        widened on the source still fits)
YEAR                         short                             JSON number
BIGINT UNSIGNED, BIT(64)     ``unsigned_long`` (module          JSON number, all 20 digits
                             x-pack-unsigned-long), else
                             ``double`` (approximate above 2^53)
DECIMAL(p<=18, 0)            long                              JSON string, plain notation
DECIMAL(p<=15, s)            ``scaled_float`` (factor 10^s,    JSON string, plain notation,
                             module mapper-extras), else       every scale digit ("-0.500")
                             ``double``
DECIMAL(65,30) and the rest  ``double``: searches are
                             approximate (15-17 digits); the
                             exact digits are in ``_source``
FLOAT, DOUBLE                float, double                     JSON number (the double the
                                                               THL carries, shortest form)
DATE                         date ``yyyy-MM-dd``               "YYYY-MM-DD"
DATETIME, TIMESTAMP          date ``yyyy-MM-dd HH:mm:ss[.S6]`` "YYYY-MM-DD HH:MM:SS[.ffffff]";
                             (indexed to the millisecond)      TIMESTAMP in UTC
TIME                         keyword                           "[-]HH:MM:SS[.ffffff]", as
                                                               MySQL prints it
ENUM                         keyword                           the member
SET                          keyword (an array of members)     ["x", "z"] (``[]``: empty set)
CHAR, VARCHAR, TEXT, JSON    text + ``.keyword`` (first 256    the string
                             characters)
BINARY, VARBINARY, BLOB,     binary                            base64 (BINARY(n) with its
GEOMETRY                                                       n bytes)
===========================  ================================  ============================

Zero and partial dates ("0000-00-00", "2024-03-00") have no date in Elasticsearch: the
target's ``zero_dates`` says what they become (``consumers.zero_dates``: NULL and counted by
default, or a data error naming the table and the column).

Besides the columns, a document holds the fields the applier adds (``INTERNAL_FIELDS``, and
the chosen ``DOCUMENT_FIELDS``); a source column of one of those names is refused.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from consumers.zero_dates import ZeroDates, date_column, zero_or_value
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import DECIMAL_TYPES, FLOAT_TYPES, from_thl

#: A value as it goes into a JSON document.
JsonValue = Any
Encoder = Callable[[ThlValue], JsonValue]

DATE_FORMAT = "yyyy-MM-dd"
DATETIME_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS||yyyy-MM-dd HH:mm:ss"
#: keyword subfields index this many characters at most (longer values stay searchable as
#: text; Lucene refuses terms above 32766 bytes).
KEYWORD_IGNORE_ABOVE = 256

#: Fields the applier itself puts in documents (a source column of that name is refused).
DELETED = "_deleted"
ROWS = "_rows"
APPLIED_SEQNO = "_applied_seqno"
APPLIED_FRAGNO = "_applied_fragno"
INTERNAL_FIELDS: dict[str, dict[str, Any]] = {
    DELETED: {"type": "boolean"}, ROWS: {"type": "long"},
    APPLIED_SEQNO: {"type": "long"}, APPLIED_FRAGNO: {"type": "integer"},
}
DOCUMENT_FIELDS: dict[str, dict[str, Any]] = {
    "source_schema": {"type": "keyword"}, "source_table": {"type": "keyword"},
    "committime": {"type": "date"}, "seqno": {"type": "long"},
}
#: One encoder for every document (``json.dumps`` with options builds one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> bytes:
    """A document (or a bulk action) as the JSON bytes of one line of a bulk request."""
    return _ENCODER.encode(value).encode()


def iso(moment: dt.datetime) -> str:
    """A moment as a date field's value: ISO-8601 in UTC, microseconds."""
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")


#: (signed, unsigned) mapping of each integer type: ``long`` for every one a long holds, so
#: a column widened on the source (``MODIFY a BIGINT``, was INT) still fits its field, which
#: Elasticsearch can never change (issue 28). Only BIGINT UNSIGNED needs more.
_INTEGERS: dict[str, tuple[str, str]] = {
    "TINYINT": ("long", "long"), "SMALLINT": ("long", "long"),
    "MEDIUMINT": ("long", "long"), "INT": ("long", "long"),
    "INTEGER": ("long", "long"), "BIGINT": ("long", "unsigned_long"),
}
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "BLOB", "TINYBLOB", "MEDIUMBLOB", "LONGBLOB",
                           "GEOMETRY"})
_TEXT_TYPES = frozenset({"CHAR", "VARCHAR", "TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT",
                         "JSON"})


@dataclass(frozen=True)
class Features:
    """Mapping types the cluster offers beyond the core ones (modules of the distribution)."""

    unsigned_long: bool = True
    scaled_float: bool = True


def source_type(spec: ColumnSpec) -> str:
    """The source column's type as SQL prints it (``DECIMAL(65,30)``, ``INT UNSIGNED``)."""
    kind = spec.type.upper()
    if kind in DECIMAL_TYPES and spec.length:
        text = f"DECIMAL({spec.length},{spec.scale})"
    elif kind == "BIT":
        text = f"BIT({spec.length})" if spec.length else "BIT"
    elif kind in ("DATETIME", "TIMESTAMP", "TIME") and spec.scale:
        text = f"{kind}({spec.scale})"
    else:
        text = kind
    return f"{text} UNSIGNED" if spec.unsigned and kind in (*_INTEGERS, *DECIMAL_TYPES,
                                                           *FLOAT_TYPES) else text


def is_binary(spec: ColumnSpec) -> bool:
    """True for byte strings (stored base64 in a ``binary`` field)."""
    kind = spec.type.upper()
    return kind in ("BINARY", "VARBINARY", "GEOMETRY") or (
        spec.blob and spec.charset is None and kind not in _TEXT_TYPES) or (
        kind in _BINARY_TYPES and spec.charset is None)


def field_mapping(spec: ColumnSpec, features: Features) -> dict[str, Any]:
    """The Elasticsearch mapping of one source column."""
    kind = spec.type.upper()
    meta = {"meta": {"source_type": source_type(spec)[:50]}}
    if kind in _INTEGERS:
        es_type = _INTEGERS[kind][1 if spec.unsigned else 0]
        if es_type == "unsigned_long" and not features.unsigned_long:
            es_type = "double"
        return {"type": es_type, **meta}
    if kind == "YEAR":
        return {"type": "short", **meta}
    if kind == "BIT":
        if 0 < spec.length < 64:
            return {"type": "long", **meta}
        return {"type": "unsigned_long" if features.unsigned_long else "double", **meta}
    if kind in DECIMAL_TYPES:
        if spec.scale == 0 and 0 < spec.length <= 18:
            return {"type": "long", **meta}
        if features.scaled_float and 0 < spec.length <= 15:
            return {"type": "scaled_float", "scaling_factor": 10 ** spec.scale, **meta}
        return {"type": "double", **meta}
    if kind == "FLOAT":
        return {"type": "float", **meta}
    if kind in FLOAT_TYPES:
        return {"type": "double", **meta}
    if kind == "DATE":
        return {"type": "date", "format": DATE_FORMAT, **meta}
    if kind in ("DATETIME", "TIMESTAMP"):
        return {"type": "date", "format": DATETIME_FORMAT, **meta}
    if kind in ("TIME", "ENUM", "SET"):
        return {"type": "keyword", **meta}
    if is_binary(spec):
        return {"type": "binary", **meta}
    if kind in _TEXT_TYPES or spec.charset is not None:
        return {"type": "text", **meta, "fields": {
            "keyword": {"type": "keyword", "ignore_above": KEYWORD_IGNORE_ABOVE}}}
    # A type this map does not know: kept in _source as it came, not indexed.
    return {"type": "object", "enabled": False}


# -- values --------------------------------------------------------------------------------

def _integer(raw: ThlValue) -> JsonValue:
    # Beyond signed 64 bits the THL carries the digits as a string.
    return int(raw) if isinstance(raw, str) else raw


def _set(raw: ThlValue) -> JsonValue:
    return raw.split(",") if isinstance(raw, str) and raw else [] if raw == "" else raw


def _bytes_of(raw: ThlValue) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogateescape")
    raise TypeError(f"a binary column holds {type(raw).__name__} {raw!r}")


def _binary(length: int, padded: bool) -> Encoder:
    def encode(raw: ThlValue) -> JsonValue:
        data = _bytes_of(raw)
        if padded and len(data) < length:
            # The binlog strips BINARY(n)'s trailing 0x00 bytes; the column holds all n.
            data = data.ljust(length, b"\x00")
        return base64.b64encode(data).decode("ascii")
    return encode


def _generic(raw: ThlValue) -> JsonValue:
    return base64.b64encode(raw).decode("ascii") if isinstance(raw, bytes) else raw


def encoder(spec: ColumnSpec) -> Encoder | None:
    """How a THL value of this column becomes its JSON value (None: unchanged)."""
    kind = spec.type.upper()
    if kind in _INTEGERS or kind in ("BIT", "YEAR"):
        return _integer
    if kind == "SET":
        return _set
    if is_binary(spec):
        return _binary(spec.length, kind == "BINARY")
    if kind in DECIMAL_TYPES or kind in FLOAT_TYPES or kind in _TEXT_TYPES or kind in (
            "DATE", "DATETIME", "TIMESTAMP", "TIME", "ENUM"):
        return None
    return _generic


def _zero_dates(column: str, policy: ZeroDates) -> Encoder:
    def encode(raw: ThlValue) -> JsonValue:
        return zero_or_value(raw, column, policy)[0]
    return encode


class RowEncoder:
    """Encodes rows of one column layout: names and the few columns that need converting
    (date columns too: a zero date is no date here, ``consumers.zero_dates``)."""

    __slots__ = ("convert", "names")

    def __init__(self, specs: Sequence[ColumnSpec], zero_dates: ZeroDates = "null") -> None:
        self.names = [s.name for s in specs]
        self.convert = [(i, enc) for i, s in enumerate(specs)
                        if (enc := encoder(s)) is not None]
        self.convert += [(i, _zero_dates(s.name, zero_dates)) for i, s in enumerate(specs)
                         if date_column(s)]

    def values(self, row: Sequence[ThlValue]) -> list[JsonValue]:
        """The row's JSON values in column order."""
        out = list(row)
        for i, enc in self.convert:
            value = out[i]
            if value is not None:
                out[i] = enc(value)
        return out


def decode(spec: ColumnSpec, value: JsonValue) -> object:
    """The typed Python value of a ``_source`` value (``thl_topics.values.from_thl``'s forms).

    Integers, Decimal, float, date/datetime (TIMESTAMP aware, in UTC), timedelta, str, bytes;
    a SET as its members joined by ",".
    """
    if value is None:
        return None
    kind = spec.type.upper()
    if is_binary(spec):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError) as exc:
            raise ValueError(f"column {spec.name}: not base64: {value!r}") from exc
    if kind == "SET" and isinstance(value, list):
        return ",".join(value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return from_thl(spec, value)
    return value
