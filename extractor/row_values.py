"""Column specs and THL values from pymysqlreplication's table maps and rows.

pymysqlreplication's values need a few corrections to be exact (seen with 1.0.17 on
MariaDB 10.11, see STACK.md): a zero date arrives as None and only ``none_sources`` tells it
from NULL; BIT(n) arrives as a string of bits; an empty binary value may arrive as ``str``;
SET arrives as a Python set (and an empty SET as None); YEAR 0000 arrives as 1900; TIMESTAMP
arrives as a naive UTC datetime, and its zero value as the Unix epoch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import format_datetime, format_time, set_to_thl, to_thl

K = TypeVar("K")
V = TypeVar("V")

Converter = Callable[[Any, str | None], ThlValue]
"""(value, none_source) -> THL value; none_source is set only when value is None."""

_TYPE_NAMES = {
    FIELD_TYPE.TINY: "TINYINT", FIELD_TYPE.SHORT: "SMALLINT", FIELD_TYPE.INT24: "MEDIUMINT",
    FIELD_TYPE.LONG: "INT", FIELD_TYPE.LONGLONG: "BIGINT", FIELD_TYPE.FLOAT: "FLOAT",
    FIELD_TYPE.DOUBLE: "DOUBLE", FIELD_TYPE.NEWDECIMAL: "DECIMAL", FIELD_TYPE.DECIMAL: "DECIMAL",
    FIELD_TYPE.DATE: "DATE", FIELD_TYPE.NEWDATE: "DATE", FIELD_TYPE.TIME: "TIME",
    FIELD_TYPE.TIME2: "TIME", FIELD_TYPE.DATETIME: "DATETIME", FIELD_TYPE.DATETIME2: "DATETIME",
    FIELD_TYPE.TIMESTAMP: "TIMESTAMP", FIELD_TYPE.TIMESTAMP2: "TIMESTAMP",
    FIELD_TYPE.YEAR: "YEAR", FIELD_TYPE.BIT: "BIT", FIELD_TYPE.ENUM: "ENUM",
    FIELD_TYPE.SET: "SET", FIELD_TYPE.JSON: "JSON", FIELD_TYPE.GEOMETRY: "GEOMETRY",
}
_INTEGERS = (FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG,
             FIELD_TYPE.LONGLONG)
_STRINGS = (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING)
_BLOBS = (FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB)
_ZERO_SOURCES = (NONE_SOURCE.OUT_OF_DATE_RANGE, NONE_SOURCE.OUT_OF_DATETIME_RANGE,
                 NONE_SOURCE.OUT_OF_DATETIME2_RANGE)
_EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - pymysqlreplication's naive UTC


def _is_binary(column: Any) -> bool:
    return getattr(column, "character_set_name", None) in ("binary", None) and \
        column.type in _STRINGS + _BLOBS + (FIELD_TYPE.GEOMETRY,)


def _type_name(column: Any, binary: bool) -> str:
    t = column.type
    if t in _STRINGS:
        if t == FIELD_TYPE.STRING:
            return "BINARY" if binary else "CHAR"
        return "VARBINARY" if binary else "VARCHAR"
    if t in _BLOBS:
        return "BLOB" if binary else "TEXT"
    return _TYPE_NAMES.get(t, f"TYPE{t}")


def column_spec(index: int, column: Any) -> ColumnSpec:
    """The THL column spec of a pymysqlreplication column (1-based ``index``)."""
    t = column.type
    binary = _is_binary(column)
    length = scale = 0
    if t in (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL):
        length, scale = column.precision, column.decimals
    elif t in (FIELD_TYPE.TIME2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2):
        scale = column.fsp
    elif t == FIELD_TYPE.BIT:
        length = column.bits
    elif t in _STRINGS:
        length = column.max_length
    # pymysqlreplication puts ENUM's error value '' (index 0) first; the column has no such member.
    enum_values = list(column.enum_values[1:] if column.enum_values
                       else column.set_values or [])
    return ColumnSpec(
        index=index, name=column.name or f"col{index}", type=_type_name(column, binary),
        length=length, scale=scale, unsigned=bool(column.unsigned),
        blob=binary or t in _BLOBS, charset=None if binary else column.character_set_name,
        primary_key=bool(column.is_primary), enum_values=enum_values,
    )


def converter(column: Any, spec: ColumnSpec) -> Converter:
    """The function that turns one column's values into THL values."""
    t = column.type
    if t in _INTEGERS or t in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return _plain
    if t == FIELD_TYPE.BIT:
        return _bit
    if t == FIELD_TYPE.YEAR:
        return _year
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return _date
    # A zero date is printed with the column's fractional digits, as the server prints it.
    zero = "0000-00-00 00:00:00" + ("." + "0" * spec.scale if spec.scale else "")
    if t in (FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2):
        # binlog_fixes reads a partial date ('2024-03-00 10:00:00') as its exact text.
        return lambda v, src: (zero if src in _ZERO_SOURCES else None) if v is None \
            else v if isinstance(v, str) else format_datetime(v)
    if t in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2):
        # TIMESTAMP's zero value is stored as second 0 of the Unix epoch.
        return lambda v, _src: None if v is None else zero if v == _EPOCH \
            else format_datetime(v)
    if t in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2):
        return _time
    if t == FIELD_TYPE.SET:
        return lambda v, src: ("" if src == NONE_SOURCE.EMPTY_SET else None) if v is None \
            else set_to_thl(v, spec)
    if spec.blob and spec.charset is None:
        return _binary
    return _plain


def _plain(value: Any, _src: str | None) -> ThlValue:
    return to_thl(value)


def _bit(value: Any, _src: str | None) -> ThlValue:
    return None if value is None else to_thl(int(value, 2) if isinstance(value, str) else value)


def _year(value: Any, _src: str | None) -> ThlValue:
    # The binlog stores YEAR as an offset from 1900; offset 0 is the year 0000.
    return None if value is None else (0 if value == 1900 else int(value))


def _date(value: Any, src: str | None) -> ThlValue:
    if value is None:
        return "0000-00-00" if src in _ZERO_SOURCES else None
    return to_thl(value)


def _time(value: Any, _src: str | None) -> ThlValue:
    return None if value is None else format_time(value)


def _binary(value: Any, _src: str | None) -> ThlValue:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return to_thl(value)


class TableShape:
    """Column specs and converters of one table map, built once per table id."""

    __slots__ = ("converters", "names", "specs")

    def __init__(self, columns: Sequence[Any]) -> None:
        self.specs = [column_spec(i + 1, c) for i, c in enumerate(columns)]
        self.names = [s.name for s in self.specs]
        self.converters = [converter(c, s) for c, s in zip(columns, self.specs, strict=True)]

    def values(self, row: dict[str, Any], none_sources: dict[str, str] | None) -> list[ThlValue]:
        """One row image (name -> value) as THL values in column order."""
        sources = none_sources or {}
        out: list[ThlValue] = []
        for name, conv in zip(self.names, self.converters, strict=True):
            value = row[name]
            out.append(conv(value, sources.get(name) if value is None else None))
        return out


class IdentityCache(Generic[K, V]):
    """Values built once per object (by identity, for objects that cannot be hashed, such
    as pymysqlreplication's tables), each kept with its object so that an id is never
    reused while cached. Bounded: past ``MAX_ENTRIES`` it starts over, which only costs a
    rebuild."""

    MAX_ENTRIES = 4096

    def __init__(self, build: Callable[[K], V]) -> None:
        self._build = build
        self._by_id: dict[int, tuple[K, V]] = {}

    def get(self, key: K) -> V:
        """The value built for this very object (built now if there is none)."""
        hit = self._by_id.get(id(key))
        if hit is not None and hit[0] is key:
            return hit[1]
        value = self._build(key)
        if len(self._by_id) >= self.MAX_ENTRIES:
            self._by_id.clear()
        self._by_id[id(key)] = (key, value)
        return value


# One shape per columns list: the table-map cache hands out one table, so one list, per
# distinct table map.
_shapes: IdentityCache[Sequence[Any], TableShape] = IdentityCache(TableShape)


def shape_of(columns: Sequence[Any]) -> TableShape:
    """The shape of a table's columns, built once per columns list: the rows decoder and
    the assembler share it, so consecutive changes of one table merge whichever path
    decoded them."""
    return _shapes.get(columns)
