"""Corrections to pymysqlreplication's decoding, installed once at import.

Partial dates: pymysqlreplication reads '2024-00-00' and '2024-03-00 10:00:00' as None
with a zero-date reason, the same as '0000-00-00'. Here they come back as their exact text
(the whole zero date still as None and its reason, which ``row_values`` turns into the zero
date's text), so the tables the compiled decoder leaves to pymysqlreplication (GEOMETRY)
carry them exactly too.

TIME2 (MySQL 5.6+ / MariaDB TIME with or without fractions): pymysqlreplication 1.0.17
decodes the integer and fractional parts separately, which is wrong for negative values with
a fraction ('-00:00:00.000001' comes back as -0.999999 s). MySQL stores the whole value as
one offset-binary packed integer; this decodes it as the server does
(``my_time_packed_from_binary`` in mysys/my_time.c).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pymysqlreplication.row_event import RowsEvent

from thl_topics.values import format_date_parts, format_datetime_parts

_TIMEF_INT_OFS = 0x800000
_TIMEF_OFS = 0x800000000000


def _unpack_time(packed: int) -> dt.timedelta:
    negative = packed < 0
    packed = abs(packed)
    hms, micros = packed >> 24, packed % (1 << 24)
    value = dt.timedelta(hours=(hms >> 12) % (1 << 10), minutes=(hms >> 6) % (1 << 6),
                         seconds=hms % (1 << 6), microseconds=micros)
    return -value if negative else value


def read_time2(data: bytes, fsp: int) -> dt.timedelta:
    """A TIME2 value from its binlog bytes (3 + ceil(fsp / 2) bytes)."""
    if fsp >= 5:
        return _unpack_time(int.from_bytes(data[:6], "big") - _TIMEF_OFS)
    intpart = int.from_bytes(data[:3], "big") - _TIMEF_INT_OFS
    if fsp == 0:
        return _unpack_time(intpart << 24)
    width, scale = (1, 10000) if fsp <= 2 else (2, 100)
    frac = int.from_bytes(data[3:3 + width], "big")
    if intpart < 0 and frac:
        intpart += 1
        frac -= 1 << (8 * width)
    return _unpack_time((intpart << 24) + frac * scale)


def _patched_read_time2(self: Any, column: Any) -> dt.timedelta:
    size = 3 + (column.fsp + 1) // 2
    return read_time2(self.packet.read(size), column.fsp)


def read_date(data: bytes) -> dt.date | str | None:
    """A DATE from its 3 binlog bytes: None for the zero date, text for a partial one."""
    packed = int.from_bytes(data[:3], "little")
    year, month, day = packed >> 9, (packed >> 5) & 0xF, packed & 0x1F
    if year and month and day:
        return dt.date(year, month, day)
    return format_date_parts(year, month, day) if packed else None


def read_datetime2(data: bytes, fsp: int) -> dt.datetime | str | None:
    """A DATETIME2 from its 5 + ceil(fsp / 2) binlog bytes: None for the zero date, text
    for a partial one."""
    packed = int.from_bytes(data[:5], "big")
    width = (fsp + 1) // 2
    micro = int.from_bytes(data[5:5 + width], "big") if width else 0
    if fsp % 2:
        micro //= 10
    micro *= 10 ** (6 - fsp) if width else 0
    year_month = (packed >> 22) & 0x1FFFF
    parts = (year_month // 13, year_month % 13, (packed >> 17) & 0x1F,
             (packed >> 12) & 0x1F, (packed >> 6) & 0x3F, packed & 0x3F)
    if parts[0] and parts[1] and parts[2]:
        return dt.datetime(*parts, micro)  # noqa: DTZ001 - DATETIME has no zone
    return format_datetime_parts(*parts, micro) if any(parts) or micro else None


def _patched_read_date(self: Any) -> dt.date | str | None:
    return read_date(self.packet.read(3))


def _patched_read_datetime2(self: Any, column: Any) -> dt.datetime | str | None:
    return read_datetime2(self.packet.read(5 + (column.fsp + 1) // 2), column.fsp)


def install() -> None:
    """Replace the broken decoders (idempotent)."""
    RowsEvent._RowsEvent__read_time2 = _patched_read_time2
    RowsEvent._RowsEvent__read_date = _patched_read_date
    RowsEvent._RowsEvent__read_datetime2 = _patched_read_datetime2
