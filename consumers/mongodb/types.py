"""The MongoDB type map: THL column values into BSON values, exactly.

Every value keeps its exact meaning; where BSON has no exact type, the value is the text
MySQL itself prints, never a rounded one.

==========================  ==============================================================
source column               BSON value
==========================  ==============================================================
TINYINT .. BIGINT, YEAR,    int32 / int64 by magnitude. Beyond signed 64 bits (BIGINT
BIT(n)                      UNSIGNED, BIT(64) above 2^63-1): Decimal128 of the integer, or
                            its decimal string with ``decimal: string`` (FerretDB)
DECIMAL(p,s), p <= 34       Decimal128 with all s scale digits ("12.50" stays 12.50), or
                            the decimal string with ``decimal: string`` (FerretDB)
DECIMAL(p,s), p > 34        the decimal string (Decimal128 holds 34 digits)
FLOAT, DOUBLE               double (a FLOAT is the double its 32 bits widen to)
DATE                        date at 00:00 UTC
DATETIME(0..3),             date (milliseconds: exact); DATETIME is taken as UTC wall time,
TIMESTAMP(0..3)             TIMESTAMP is UTC
DATETIME(4..6),             string as MySQL prints it with the column's digits,
TIMESTAMP(4..6)             "2024-05-01 12:00:00.000001" (a BSON date has milliseconds)
zero and partial dates      BSON dates cannot hold them ("0000-00-00", "2024-03-00", year
                            0): as ``zero_dates`` says, null (default, counted), the
                            string MySQL prints (``text``), or a data error
TIME(n)                     string as MySQL prints it, "-838:59:59.000000" (durations, may be
                            negative or beyond 24 h)
CHAR, VARCHAR, TEXT, ENUM   string (U+0000 included)
SET                         array of the members, in definition order ("" is [])
JSON                        the embedded document, array or scalar; JSON numbers: integers
                            as int32/int64 (beyond: like BIGINT UNSIGNED), others as double
BINARY, VARBINARY, BLOB,    binary (subtype 0), byte for byte; BINARY(n) with its trailing
GEOMETRY                    0x00 padding
NULL                        null
==========================  ==============================================================

Keys inside a JSON value are data and are never changed: a key MongoDB refuses (``$`` first,
a ``.``, U+0000) is a data error. Collection and field names: ``naming.py``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bson.decimal128 import Decimal128

from consumers.zero_dates import ZeroDateRefused, ZeroDates, zero_or_value
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import DECIMAL_TYPES, FLOAT_TYPES, INTEGER_TYPES
from thl_topics.values import format_datetime as thl_datetime

#: Fields the applier writes into every document; a column may not take these names.
ID, SEQNO, DELETED, OP = "_id", "_seqno", "_deleted", "_op"
RESERVED = frozenset({ID, SEQNO, DELETED, OP})
#: Column types that may be declared to hold JSON (MariaDB's JSON is a LONGTEXT).
TEXT_TYPES = frozenset({"CHAR", "VARCHAR", "TEXT", "JSON"})
#: Digits a Decimal128 holds exactly.
DECIMAL128_DIGITS = 34
#: BSON nesting MongoDB accepts (documents inside documents).
MAX_DEPTH = 100
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class ValueRefused(ValueError):
    """A value the target cannot store as it is; the message says why and where inside."""


Converter = Callable[[ThlValue], Any]


@dataclass(frozen=True)
class TypeOptions:
    """What the server can store, as the type map needs to know it."""

    #: Decimal128 for DECIMALs (<= 34 digits) and big integers; else exact strings.
    decimal128: bool = True
    #: What a zero or partial date becomes (``consumers.zero_dates``).
    zero_dates: ZeroDates = "null"


# -- keys ----------------------------------------------------------------------------------

def refused_key(key: str) -> str | None:
    """Why a document key cannot be stored on MongoDB, or None if it can."""
    if "\x00" in key:
        return "it contains U+0000 (BSON keys cannot)"
    if key.startswith("$"):
        return "it starts with '$' (MongoDB reserves it for operators)"
    if "." in key:
        return "it contains '.' (MongoDB reads it as a path)"
    return None


# -- values --------------------------------------------------------------------------------

def _big_int(value: int, opts: TypeOptions) -> Any:
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    # 2^64 - 1 has 20 digits: well within Decimal128's 34.
    return Decimal128(str(value)) if opts.decimal128 else str(value)


def _integer(opts: TypeOptions) -> Converter:
    def convert(raw: ThlValue) -> Any:
        if raw is None or isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            return _big_int(int(raw), opts)
        raise ValueRefused(f"an integer column holds {type(raw).__name__} {raw!r}")
    return convert


def _decimal(spec: ColumnSpec, opts: TypeOptions) -> Converter:
    exact = opts.decimal128 and 0 < spec.length <= DECIMAL128_DIGITS

    def convert(raw: ThlValue) -> Any:
        if raw is None:
            return None
        # The THL text is plain notation with every scale digit; Decimal128 keeps them too.
        text = raw if isinstance(raw, str) else str(raw)
        return Decimal128(text) if exact else text
    return convert


def _float(raw: ThlValue) -> Any:
    return float(raw) if isinstance(raw, int) else raw


def _zero_date(raw: str, spec: ColumnSpec, opts: TypeOptions) -> Any:
    """A text no BSON date holds: a zero or partial date (``zero_dates``), else as it is."""
    try:
        return zero_or_value(raw, spec.name, opts.zero_dates)[0]
    except ZeroDateRefused as exc:
        raise ValueRefused(str(exc)) from exc


def _temporal(spec: ColumnSpec, opts: TypeOptions, parse: Callable[[str], Any],
              store: Callable[[Any], Any]) -> Converter:
    """A DATE or DATETIME text: ``parse``d and ``store``d, or a zero date (``_zero_date``:
    with ``text``, already printed with the column's digits)."""
    def convert(raw: ThlValue) -> Any:
        if not isinstance(raw, str):
            return raw
        try:
            value = parse(raw)
        except ValueError:
            return _zero_date(raw, spec, opts)
        return store(value)
    return convert


def _date(spec: ColumnSpec, opts: TypeOptions) -> Converter:
    return _temporal(spec, opts, dt.date.fromisoformat,
                     lambda day: dt.datetime(day.year, day.month, day.day))  # noqa: DTZ001


def _datetime(spec: ColumnSpec, opts: TypeOptions) -> Converter:
    digits = max(0, min(6, spec.scale))
    if digits <= 3:
        # Naive, UTC: milliseconds are exact in a BSON date.
        return _temporal(spec, opts, dt.datetime.fromisoformat, lambda value: value)
    return _temporal(spec, opts, dt.datetime.fromisoformat,
                     lambda value: format_datetime(value, digits))


def format_datetime(value: dt.datetime, digits: int) -> str:
    """A DATETIME as MySQL prints it in a column with ``digits`` fractional digits."""
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    return f"{text}.{value.microsecond:06d}"[:20 + digits] if digits else text


def _time(spec: ColumnSpec) -> Converter:
    digits = max(0, min(6, spec.scale))

    def convert(raw: ThlValue) -> Any:
        if not isinstance(raw, str):
            return raw
        return format_time_text(raw, digits)
    return convert


def format_time_text(text: str, digits: int) -> str:
    """THL TIME text ("[-]H:MM:SS[.ffffff]") as MySQL prints it with ``digits`` digits."""
    sign = "-" if text.startswith("-") else ""
    hms, _, frac = text.lstrip("-").partition(".")
    hours, minutes, seconds = hms.split(":")
    out = f"{sign}{int(hours):02d}:{minutes}:{seconds}"
    return f"{out}.{(frac + '000000')[:digits]}" if digits else out


def format_timedelta(value: dt.timedelta, digits: int) -> str:
    """A TIME value (a Python timedelta) as MySQL prints it with ``digits`` digits."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    secs, frac = divmod(abs(micros), 1_000_000)
    hours, rest = divmod(secs, 3600)
    return format_time_text(f"{sign}{hours}:{rest // 60:02d}:{rest % 60:02d}.{frac:06d}",
                            digits)


def _set(raw: ThlValue) -> Any:
    if not isinstance(raw, str):
        return raw
    return raw.split(",") if raw else []


def _binary(spec: ColumnSpec) -> Converter:
    pad = spec.type.upper() == "BINARY" and spec.length > 0

    def convert(raw: ThlValue) -> Any:
        if isinstance(raw, str):
            # A binary column whose value arrived as text (see extractor.row_values).
            raw = raw.encode("utf-8", "surrogateescape")
        if pad and isinstance(raw, bytes) and len(raw) < spec.length:
            # The binlog strips BINARY(n)'s trailing 0x00 padding; the column holds n bytes.
            return raw.ljust(spec.length, b"\x00")
        return raw
    return convert


def _json(opts: TypeOptions) -> Converter:
    def number(text: str) -> Any:
        return _big_int(int(text), opts)

    def convert(raw: ThlValue) -> Any:
        if raw is None:
            return None
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        try:
            value = json.loads(text, parse_int=number)
        except ValueError as exc:
            raise ValueRefused(f"not valid JSON: {exc}") from exc
        check_keys(value)
        return value
    return convert


def check_keys(value: Any, path: str = "", depth: int = 0) -> None:
    """Refuse (ValueRefused) a document key MongoDB cannot store, naming its path."""
    if depth > MAX_DEPTH:
        raise ValueRefused(f"nested deeper than {MAX_DEPTH} levels at {path or '(top)'}")
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            problem = refused_key(key)
            if problem is not None:
                raise ValueRefused(f"JSON key {key!r} at {where!r} cannot be stored: {problem}")
            check_keys(item, where, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_keys(item, f"{path}[{i}]", depth + 1)


def converter(spec: ColumnSpec, opts: TypeOptions, json_text: bool = False) -> Converter:
    """The function from a column's THL values to its BSON values; ``json_text``: a text
    column declared to hold JSON (``json_columns``). ``identity`` where the THL value is
    already the BSON value."""
    kind = spec.type.upper()
    if json_text and kind in TEXT_TYPES:
        return _json(opts)
    if kind in INTEGER_TYPES:
        # Only BIGINT UNSIGNED and BIT(64) can leave signed 64 bits (the THL has them as
        # text then); every other integer column is a plain int already.
        wide = (kind == "BIGINT" and spec.unsigned) or (kind == "BIT" and spec.length > 63)
        return _integer(opts) if wide else identity
    if kind in DECIMAL_TYPES:
        return _decimal(spec, opts)
    if kind in FLOAT_TYPES:
        return _float
    if kind == "DATE":
        return _date(spec, opts)
    if kind in ("DATETIME", "TIMESTAMP"):
        return _datetime(spec, opts)
    if kind == "TIME":
        return _time(spec)
    if kind == "SET":
        return _set
    if kind == "JSON":
        return _json(opts)
    if kind in ("BINARY", "VARBINARY", "BLOB", "GEOMETRY") or (spec.blob and spec.charset
                                                               is None):
        return _binary(spec)
    return identity


def key_converter(spec: ColumnSpec, opts: TypeOptions) -> Converter:
    """Like ``converter``, for a primary key column: a SET key is its text (``_id`` parts
    cannot be arrays)."""
    return identity if spec.type.upper() == "SET" else converter(spec, opts)


def identity(raw: ThlValue) -> Any:
    """The converter of a column whose THL values are BSON values as they are."""
    return raw


def thl_value(spec: ColumnSpec, value: Any, json_text: bool = False) -> ThlValue:
    """A stored (BSON) value back in the form the THL carries for ``spec``: the type map
    backwards, for consistency checks (``thl_topics.checksum`` compares canonical texts, so
    a DATETIME(6) string and a BSON date of the same instant agree). A JSON document comes
    back as compact JSON text; the source's text may be spelled differently (spaces, number
    notation), which a check then reports as different."""
    if value is None:
        return None
    kind = spec.type.upper()
    if isinstance(value, Decimal128):
        number = value.to_decimal()
        if kind in INTEGER_TYPES:
            integer = int(number)
            return integer if _INT64_MIN <= integer <= _INT64_MAX else str(integer)
        return format(number, "f")
    if isinstance(value, dt.datetime):
        if kind == "DATE":
            return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        return thl_datetime(value)
    if kind == "SET" and isinstance(value, list):
        return ",".join(str(m) for m in value)
    if (kind == "JSON" or json_text) and not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (str, bytes, int, float)):
        return value
    raise ValueRefused(f"no THL form for a stored {type(value).__name__}")


class RowConverter:
    """A row's converters, calling only those that change something (the hot path)."""

    def __init__(self, converters: Sequence[Converter]) -> None:
        self.converters = tuple(converters)
        self._special = tuple((i, c) for i, c in enumerate(self.converters)
                              if c is not identity)

    def __call__(self, row: Sequence[ThlValue]) -> list[Any]:
        """The BSON values of one THL row (ValueRefused, ValueError or TypeError if a value
        cannot be stored: ``failed`` says which column)."""
        if len(row) != len(self.converters):
            raise ValueRefused(f"the row has {len(row)} values for "
                               f"{len(self.converters)} columns")
        values = list(row)
        for i, conv in self._special:
            values[i] = conv(values[i])
        return values

    def failed(self, row: Sequence[ThlValue]) -> tuple[int, str] | None:
        """The first column whose value is refused, and why (slow path, for errors only)."""
        for i, (conv, value) in enumerate(zip(self.converters, row, strict=False)):
            try:
                conv(value)
            except (ValueRefused, ValueError, TypeError) as exc:
                return i, str(exc)
        return None
