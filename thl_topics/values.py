"""Canonical THL forms of column values, and their way back to typed Python values.

The Avro union carries null | long | double | string | bytes. Whatever a long cannot hold
exactly travels as a canonical string, and the column spec's type says how to read it:

=====================  =========================================================
type                   THL form
=====================  =========================================================
integers, YEAR, BIT    long; beyond signed 64 bits (BIGINT UNSIGNED, BIT(64)) the
                       decimal digits as a string
DECIMAL / NUMERIC      string, plain notation, all scale digits ("-0.500")
FLOAT / DOUBLE         double (a FLOAT widens to double exactly)
DATE                   "YYYY-MM-DD" (zero date "0000-00-00"; a partial one such as
                       "2024-00-00" exactly as stored)
DATETIME, TIMESTAMP    "YYYY-MM-DD HH:MM:SS[.ffffff]"; TIMESTAMP in UTC; zero and partial
                       dates as stored ("2024-03-00 10:00:00")
TIME                   "[-]H:MM:SS[.ffffff]", hours may exceed 24
ENUM                   string; SET: members joined by ","
JSON, text types       string
binary types           bytes (BINARY(n) without its trailing 0x00 padding, as the
                       binlog has it; ``from_thl`` pads it back)
=====================  =========================================================
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal

from thl_topics.event import ColumnSpec, ThlValue

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "INTEGER", "BIGINT",
                           "YEAR", "BIT"})
DECIMAL_TYPES = frozenset({"DECIMAL", "NUMERIC", "NEWDECIMAL"})
FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE", "REAL"})


def format_time(delta: dt.timedelta) -> str:
    """MySQL TIME text of a (possibly negative, possibly > 24 h) duration."""
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    secs, frac = divmod(micros, 1_000_000)
    hours, rest = divmod(secs, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{text}.{frac:06d}" if frac else text


def format_datetime(value: dt.datetime) -> str:
    """DATETIME text, microseconds only when present."""
    # Not strftime: it does not zero-pad years below 1000 on every platform.
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    return f"{text}.{value.microsecond:06d}" if value.microsecond else text


def format_date_parts(year: int, month: int, day: int) -> str:
    """DATE text from its parts, also for the zero and partial dates no ``date`` holds."""
    return f"{year:04d}-{month:02d}-{day:02d}"


def format_datetime_parts(year: int, month: int, day: int, hour: int, minute: int,
                          second: int, micro: int = 0) -> str:
    """DATETIME text from its parts (as ``format_datetime``), also for partial dates."""
    text = f"{format_date_parts(year, month, day)} {hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micro:06d}" if micro else text


def incomplete_date(value: ThlValue) -> bool:
    """True for a DATE/DATETIME text with a zero year, month or day: the zero date
    ('0000-00-00') and the partial ones MySQL accepts ('2024-00-00', '2024-03-00 10:00').

    No calendar type outside the MySQL family holds these; each target's zero-date policy
    decides what they become there.
    """
    if not isinstance(value, str) or len(value) < 10 or value[4] != "-" or value[7] != "-":
        return False
    return value[0:4] == "0000" or value[5:7] == "00" or value[8:10] == "00"


def to_thl(value: object) -> ThlValue:
    """The canonical THL form of a Python value read from the source."""
    if value is None or isinstance(value, (str, bytes, float)):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if _LONG_MIN <= value <= _LONG_MAX else str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return format_datetime(value)
    if isinstance(value, dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, dt.timedelta):
        return format_time(value)
    if isinstance(value, (set, frozenset)):
        return ",".join(sorted(str(v) for v in value))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"no THL form for {type(value).__name__}: {value!r}")


def set_to_thl(members: Iterable[str], spec: ColumnSpec) -> str:
    """A SET value in the column's definition order, as MySQL itself prints it."""
    chosen = set(members)
    order = spec.enum_values or sorted(chosen)
    return ",".join(m for m in order if m in chosen)


def _parse_time(text: str) -> dt.timedelta:
    negative = text.startswith("-")
    hms, _, frac = text.lstrip("-").partition(".")
    hours, minutes, seconds = (int(p) for p in hms.split(":"))
    micros = int((frac + "000000")[:6]) if frac else 0
    delta = dt.timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)
    return -delta if negative else delta


def from_thl(spec: ColumnSpec, raw: ThlValue) -> object:
    """The typed Python value of a THL value, for an applier.

    Zero and partial dates have no Python form and stay strings ("0000-00-00 00:00:00",
    "2024-03-00"): a target that can store them takes the text, one that cannot applies its
    zero-date policy.
    """
    if raw is None:
        return None
    kind = spec.type.upper()
    if isinstance(raw, str):
        if kind in INTEGER_TYPES:
            return int(raw)
        if kind in DECIMAL_TYPES:
            return Decimal(raw)
        if kind == "DATE" and not incomplete_date(raw):
            return dt.date.fromisoformat(raw)
        if kind in ("DATETIME", "TIMESTAMP") and not incomplete_date(raw):
            value = dt.datetime.fromisoformat(raw)
            return value.replace(tzinfo=dt.UTC) if kind == "TIMESTAMP" else value
        if kind == "TIME":
            return _parse_time(raw)
    elif isinstance(raw, bytes) and kind == "BINARY" and len(raw) < spec.length:
        # The binlog strips BINARY(n)'s trailing 0x00 padding; the column holds all n bytes.
        return raw.ljust(spec.length, b"\x00")
    return raw
