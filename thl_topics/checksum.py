"""Row-range checksums that a source and every kind of target compute alike.

Both sides hand over rows as THL values (what the THL would carry for those rows: an
applier's type map turns what its store holds back into that form). Each value is then put
in one canonical text per column type, so that representations that mean the same value
compare equal (``1.5`` and ``1.50`` in a DECIMAL(10,2), a DATETIME with or without trailing
zero microseconds, a TIME as text or as microseconds). A row's digest is SHA-256 of its
canonical values; a range's digest is the sum of its rows' digests modulo 2^256, so row
order does not matter and duplicate rows (tables without a key) count twice.

Two differences are not seen, on purpose: a zero date counts as NULL and U+0000 is left out
of text, because targets that cannot hold them store NULL or strip them (the PostgreSQL
policies), and such a target is correct.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import struct
from collections.abc import Iterable, Sequence
from decimal import Context, Decimal

from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import DECIMAL_TYPES, INTEGER_TYPES, from_thl, to_thl

_MOD = 1 << 256
# DECIMAL(65,30) holds 65 digits: the default context's 28 would make quantize() raise.
_DECIMALS = Context(prec=200)
#: How a digest is computed (the ``method`` column of Tungsten's consistency table).
METHOD = "sha256-sum/v1"


def canonical(spec: ColumnSpec, value: ThlValue) -> str | None:
    """One text per value of a column type (None stays None)."""
    if value is None:
        return None
    kind = spec.type.upper()
    if kind in INTEGER_TYPES:
        return str(int(value))
    if kind in DECIMAL_TYPES:
        number = Decimal(str(value))
        if spec.scale:
            number = number.quantize(Decimal(1).scaleb(-spec.scale), context=_DECIMALS)
        else:
            number = number.to_integral_value(context=_DECIMALS)
        return format(number, "f")
    if kind == "FLOAT":
        return repr(struct.unpack("<f", struct.pack("<f", float(value)))[0])
    if kind in ("DOUBLE", "REAL"):
        return repr(float(value))
    if kind in ("DATETIME", "TIMESTAMP", "DATE", "TIME"):
        if isinstance(value, str) and value.startswith("0000-00-00"):
            return None
        typed = from_thl(spec, value)
        if isinstance(typed, dt.datetime):
            if typed.tzinfo is not None:
                typed = typed.astimezone(dt.UTC).replace(tzinfo=None)
            return typed.isoformat(sep=" ", timespec="microseconds")
        if isinstance(typed, dt.timedelta):
            return str(typed // dt.timedelta(microseconds=1))
        if isinstance(typed, dt.date):
            return typed.isoformat()
        return str(typed)  # a zero date keeps its text
    if isinstance(value, bytes):
        typed = from_thl(spec, value)  # BINARY(n) padded back to n bytes
        return bytes(typed).hex() if isinstance(typed, bytes) else value.hex()
    return str(value).replace("\x00", "")


def thl_value_of(spec: ColumnSpec, value: object) -> ThlValue:
    """A value read back from a database driver, in the form the THL carries for ``spec``
    (for targets that compare what they hold with the source)."""
    if value is None:
        return None
    if spec.type.upper() == "BIT":
        if isinstance(value, (bytes, bytearray, memoryview)):
            return to_thl(int.from_bytes(bytes(value), "big"))
        if isinstance(value, str):
            return to_thl(int(value, 2))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str | bytes | float | int):
        return value
    return to_thl(value)


def row_digest(specs: Sequence[ColumnSpec], row: Sequence[ThlValue]) -> int:
    """The digest of one row, as an integer."""
    text = json.dumps([canonical(s, v) for s, v in zip(specs, row, strict=True)],
                      ensure_ascii=False, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


def range_digest(specs: Sequence[ColumnSpec], rows: Iterable[Sequence[ThlValue]]
                 ) -> tuple[int, str]:
    """(row count, digest as 64 hex digits) of a range of rows, in any order."""
    count = 0
    total = 0
    for row in rows:
        count += 1
        total = (total + row_digest(specs, row)) % _MOD
    return count, f"{total:064x}"
