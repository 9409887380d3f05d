"""Corrections to pymysqlreplication's decoding, installed once at import.

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


def install() -> None:
    """Replace the broken decoder (idempotent)."""
    RowsEvent._RowsEvent__read_time2 = _patched_read_time2
