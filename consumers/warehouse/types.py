"""THL column specs as Spark/Delta types, and values in their CSV staging form.

How each MySQL/MariaDB type lands in Delta (Spark SQL type names):

=====================================  ======================================================
source type                            Delta column (staged text)
=====================================  ======================================================
TINYINT / SMALLINT / MEDIUMINT, INT    TINYINT / SMALLINT / INT / INT; UNSIGNED: the next
                                       wider integer (TINYINT UNSIGNED -> SMALLINT ...)
BIGINT                                 BIGINT; UNSIGNED: DECIMAL(20,0) (max 18446744073709551615)
BIT(n)                                 BIGINT for n <= 63, DECIMAL(20,0) for BIT(64)
YEAR                                   SMALLINT
DECIMAL(p,s)                           DECIMAL(p,s) up to p = 38, Delta's (and Spark's) limit;
                                       wider ones (DECIMAL(65,30)) as STRING holding the exact
                                       plain-notation text ("-0.000...001"), never rounded
FLOAT / DOUBLE                         FLOAT / DOUBLE (shortest round-trip text)
DATE / DATETIME / TIMESTAMP            DATE / TIMESTAMP_NTZ / TIMESTAMP (UTC instant); zero
                                       dates have no Spark form: NULL or an error
                                       (``zero_dates``)
TIME                                   STRING, MySQL's text ("-838:59:59.000001")
CHAR, VARCHAR, TEXT, ENUM, SET, JSON   STRING (JSON as its exact text)
BINARY, VARBINARY, BLOB, GEOMETRY      BINARY (base64 in the staging file)
=====================================  ======================================================
"""

from __future__ import annotations

import base64
import datetime as dt
import re

from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import DECIMAL_TYPES, from_thl, incomplete_date

#: Widest DECIMAL Delta holds.
MAX_DECIMAL_PRECISION = 38
BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "BLOB", "GEOMETRY"})
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
#: Decimal digits each integer type needs (its widest value, sign aside).
_INT_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
_INT_ORDER = ("tinyint", "smallint", "int", "bigint")


class ZeroDate(ValueError):
    """A MySQL zero date, which no Spark type can hold."""


def spark_type(spec: ColumnSpec) -> str:
    """The Delta column type of a THL column, as Spark's ``simpleString`` spells it."""
    kind = spec.type.upper()
    unsigned = spec.unsigned
    if kind == "TINYINT":
        return "smallint" if unsigned else "tinyint"
    if kind == "SMALLINT":
        return "int" if unsigned else "smallint"
    if kind in ("MEDIUMINT", "INT", "INTEGER"):
        return "bigint" if unsigned else "int"
    if kind == "BIGINT":
        return "decimal(20,0)" if unsigned else "bigint"
    if kind == "BIT":
        return "bigint" if 0 < spec.length <= 63 else "decimal(20,0)"
    if kind == "YEAR":
        return "smallint"
    if kind in DECIMAL_TYPES:
        precision = spec.length or 10
        if precision > MAX_DECIMAL_PRECISION:
            return "string"
        return f"decimal({precision},{spec.scale})"
    if kind == "FLOAT":
        return "float"
    if kind in ("DOUBLE", "REAL"):
        return "double"
    if kind == "DATE":
        return "date"
    if kind == "DATETIME":
        return "timestamp_ntz"
    if kind == "TIMESTAMP":
        return "timestamp"
    if kind in BINARY_TYPES:
        return "binary"
    return "string"


def cast_expression(column: str, delta_type: str) -> str:
    """Spark SQL turning staged text in ``column`` (already quoted) into ``delta_type``.

    Spark runs with ANSI casts, so text that does not parse fails the batch instead of
    turning into NULL.
    """
    if delta_type == "string":
        return column
    if delta_type == "binary":
        return f"unbase64({column})"
    if delta_type == "timestamp":
        # The THL holds TIMESTAMP as UTC wall time: say so, whatever the session's zone.
        return f"CAST(concat({column}, 'Z') AS TIMESTAMP)"
    return f"CAST({column} AS {delta_type.upper()})"


def staged_text(spec: ColumnSpec, raw: ThlValue, zero_dates: str = "null") -> str | None:
    """The staging file's text of one THL value (None: SQL NULL).

    Raises ZeroDate for a zero date when ``zero_dates`` is ``error``.
    """
    if raw is None:
        return None
    kind = spec.type.upper()
    if kind in BINARY_TYPES or isinstance(raw, bytes):
        value = from_thl(spec, raw)  # BINARY(n): its 0x00 padding back
        data = value if isinstance(value, bytes) else str(value).encode()
        return base64.b64encode(data).decode("ascii")
    if kind in ("DATE", "DATETIME", "TIMESTAMP") and incomplete_date(raw):
        if zero_dates == "error":
            raise ZeroDate(f"zero date {raw!r}")
        return None
    if isinstance(raw, float):
        return repr(raw)
    if isinstance(raw, int):
        return str(raw)
    return raw


def holds(existing: str, incoming: str) -> bool:
    """True when a Delta column of type ``existing`` holds every value of ``incoming``."""
    if existing == incoming:
        return True
    if existing == "string":
        return incoming != "binary"
    if existing == "double":
        return incoming == "float" or incoming in ("tinyint", "smallint", "int")
    if incoming in _INT_ORDER and existing in _INT_ORDER:
        return _INT_ORDER.index(incoming) <= _INT_ORDER.index(existing)
    wide = _DECIMAL.fullmatch(existing)
    if wide is None:
        return existing == "timestamp_ntz" and incoming == "date"
    precision, scale = int(wide.group(1)), int(wide.group(2))
    if incoming in _INT_DIGITS:
        return _INT_DIGITS[incoming] <= precision - scale
    narrow = _DECIMAL.fullmatch(incoming)
    if narrow is None:
        return False
    p, s = int(narrow.group(1)), int(narrow.group(2))
    return s <= scale and p - s <= precision - scale


def widens(existing: str, incoming: str) -> bool:
    """True when Delta's type widening (a Delta 4.0 table feature) can change a column of
    type ``existing`` to ``incoming``, which holds every value it held: a wider integer,
    FLOAT to DOUBLE, a small integer to DOUBLE or DECIMAL, a wider DECIMAL, DATE to
    TIMESTAMP_NTZ."""
    if existing == incoming or not holds(incoming, existing):
        return False
    if existing in _INT_ORDER:
        return incoming in _INT_ORDER or incoming == "double" \
            or _DECIMAL.fullmatch(incoming) is not None
    if existing == "float":
        return incoming == "double"
    if existing == "date":
        return incoming == "timestamp_ntz"
    return _DECIMAL.fullmatch(existing) is not None and _DECIMAL.fullmatch(incoming) is not None


def commit_time_text(tstamp_micros: int) -> str:
    """A THL commit time (microseconds since the epoch, UTC) as staged text."""
    when = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=tstamp_micros)  # noqa: DTZ001
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")
