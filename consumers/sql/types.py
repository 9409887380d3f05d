"""THL values adapted to a SQL target column, so the driver stores them exactly.

``thl_topics.values.from_thl`` gives the typed Python value of the source column; this
module bends it to what the target column is (its reflected type), where the two differ:
a PostgreSQL BIT(n) wants a bit string, a BOOLEAN a bool, a timestamp without time zone a
naive UTC datetime, a JSON column text it parses itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import format_time, from_thl


def adapt(value: object, target: sa.types.TypeEngine[Any], dialect: str,
          spec: ColumnSpec) -> object:
    """``value`` (from ``from_thl``) in the form the target column's driver wants."""
    if value is None:
        return None
    type_name = type(target).__name__.upper()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        # Sessions run in UTC; a zone-less column gets the UTC wall time.
        if dialect != "postgresql" or not getattr(target, "timezone", False):
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if dialect == "postgresql":
        if type_name in ("BIT", "VARBIT") and isinstance(value, int):
            width = getattr(target, "length", None) or max(spec.length, value.bit_length(), 1)
            return format(value, f"0{width}b")
        if type_name == "BOOLEAN" and isinstance(value, int):
            return bool(value)
        if type_name in ("TEXT", "VARCHAR", "CHAR") and isinstance(value, dt.timedelta):
            return spec_text(value)
    if isinstance(value, dt.timedelta) and (dialect in ("mysql", "mariadb") or type_name in (
            "TEXT", "VARCHAR", "CHAR", "STRING")):
        # PyMySQL renders a negative timedelta wrongly ('-839:00:01' for -838:59:59).
        return spec_text(value)
    return value


def spec_text(value: dt.timedelta) -> str:
    """A TIME value as MySQL prints it, for a text column."""
    return format_time(value)


def adapt_row(row: Sequence[ThlValue], specs: Sequence[ColumnSpec],
              targets: Sequence[sa.types.TypeEngine[Any]], dialect: str) -> list[object]:
    """One THL row, column by column."""
    return [adapt(from_thl(spec, raw), target, dialect, spec)
            for raw, spec, target in zip(row, specs, targets, strict=True)]
