"""TIME2 decoding against byte images computed the way the server packs them."""

from __future__ import annotations

import datetime as dt

import pytest

from extractor.binlog_fixes import read_time2


def _pack(value: dt.timedelta, fsp: int) -> bytes:
    """The server's my_time_packed_to_binary, for the test's expected bytes."""
    micros_total = abs(value) // dt.timedelta(microseconds=1)
    secs, micros = divmod(micros_total, 1_000_000)
    hours, rest = divmod(secs, 3600)
    hms = (hours << 12) | ((rest // 60) << 6) | (rest % 60)
    micros = micros - micros % (10 ** (6 - fsp)) if fsp else 0
    packed = (hms << 24) + micros
    if value < dt.timedelta(0):
        packed = -packed
    if fsp >= 5:
        return (packed + 0x800000000000).to_bytes(6, "big")
    # C semantics: the integer part is an arithmetic shift (floor), the fraction a
    # remainder with the sign of the dividend, stored as an unsigned byte/short.
    intpart = packed >> 24
    frac = abs(packed) % (1 << 24) * (-1 if packed < 0 else 1)
    if fsp == 0:
        return (intpart + 0x800000).to_bytes(3, "big")
    width, scale = (1, 10000) if fsp <= 2 else (2, 100)
    stored = int(frac / scale) % (1 << (8 * width))
    return (intpart + 0x800000).to_bytes(3, "big") + stored.to_bytes(width, "big")

@pytest.mark.parametrize(("text", "fsp"), [
    ("-00:00:00.000001", 6), ("-838:59:59.000000", 6), ("838:59:59.999999", 6),
    ("-01:02:03.5", 1), ("-00:00:00.01", 2), ("12:34:56.789", 3), ("-12:34:56.7891", 4),
    ("-10:00:00", 0), ("00:00:00", 0), ("-00:00:00.00001", 5),
])
def test_time2_round_trip(text: str, fsp: int) -> None:
    negative = text.startswith("-")
    h, m, s = text.lstrip("-").split(":")
    sec, _, frac = s.partition(".")
    value = dt.timedelta(hours=int(h), minutes=int(m), seconds=int(sec),
                         microseconds=int((frac + "000000")[:6]) if frac else 0)
    value = -value if negative else value
    assert read_time2(_pack(value, fsp), fsp) == value
