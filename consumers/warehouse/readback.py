"""Consistency checks on Delta tables: a checked key range read back as THL values.

``trepctl check`` hands every group the source's digest of a key range at one seqno
(``consumers.check``). The warehouse reads the same range from the Delta table the range's
table is merged into and turns each Delta value back into the form the THL carries
(``types.py`` in reverse), so ``thl_topics.checksum`` digests both sides alike:

- TIMESTAMP columns are Spark ``TIMESTAMP`` (an instant): read as ``unix_micros`` so that
  the session time zone cannot shift them; TIMESTAMP_NTZ, DATE, DECIMAL, BINARY and the
  integers come back as the Python values the THL form is made of.
- The key range is pushed into Spark when every key column is an integer or a DECIMAL
  (the comparison is exact there); otherwise, and always as the last word, rows are kept by
  ``CheckRange.contains``, which compares keys the way the source ordered them.
- ``keyless: history`` tables hold row changes, not rows: they are replayed in (``_seqno``,
  ``_row``) order into the multiset of live rows (I/UI add a row, D/UD remove one equal
  row), which is what the source's whole-table range counts.

The results go (``positions.py``) to a Delta ``consistency`` table beside
``trep_commit_seqno``: Tungsten's ``consistency`` columns (seeds/003) plus the group, the
seqno and the whole result as JSON.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from consumers.cascades import chunks, integer_lookup
from consumers.check import CheckRange
from consumers.warehouse.merge import OP, ROW, SEQNO
from consumers.warehouse.naming import TableRef, quote_name
from consumers.warehouse.types import spark_type
from thl_topics.checksum import thl_value_of
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import to_thl

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_EXACT_KEY = re.compile(r"(tinyint|smallint|int|bigint|decimal\(\d+,\d+\))")
_EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - the THL's TIMESTAMPs are UTC wall time


def read_range(spark: SparkSession, ref: TableRef, columns: dict[str, str],
               check: CheckRange, history: bool) -> Iterator[list[ThlValue]]:
    """The rows of ``check``'s range in the Delta table ``ref``, as THL values in
    ``check.specs`` order. ``columns``: the table's Delta columns (lower-cased name ->
    type); a source column the table does not have reads as NULL."""
    selected = [_select(spec, columns.get(spec.name.lower())) for spec in check.specs]
    if history:
        order = f"{quote_name(SEQNO)}, {quote_name(ROW)}"
        sql = (f"SELECT {quote_name(OP)}, {', '.join(selected)} FROM {ref.sql} "
               f"ORDER BY {order}")
        yield from _replay(spark.sql(sql).toLocalIterator(), check.specs)
        return
    sql = f"SELECT {', '.join(selected)} FROM {ref.sql}"
    where = _pushed_range(check, columns)
    if where:
        sql += f" WHERE {where}"
    names = [spec.name for spec in check.specs]
    key_at = [names.index(k) for k in check.key]
    for row in spark.sql(sql).toLocalIterator():
        values = [_thl(spec, value) for spec, value in zip(check.specs, row, strict=True)]
        if key_at and not check.contains([values[i] for i in key_at]):
            continue
        yield values


def rows_matching(spark: SparkSession, ref: TableRef, columns: dict[str, str],
                  specs: list[ColumnSpec], keys: Sequence[str],
                  values: Sequence[tuple[ThlValue, ...]], history: bool
                  ) -> Iterator[list[ThlValue]]:
    """The rows whose ``keys`` columns hold one of ``values`` (a cascade's child rows), as
    THL values in ``specs`` order: matched by Spark where the key columns are integers of
    the type the source's map to, else every row (the caller keeps exact matches)."""
    selected = [_select(spec, columns.get(spec.name.lower())) for spec in specs]
    if history:
        order = f"{quote_name(SEQNO)}, {quote_name(ROW)}"
        yield from _replay(spark.sql(
            f"SELECT {quote_name(OP)}, {', '.join(selected)} FROM {ref.sql} "
            f"ORDER BY {order}").toLocalIterator(), specs)
        return
    by_name = {spec.name: spec for spec in specs}
    types = [columns.get(k.lower(), "") for k in keys]
    wheres = [""]
    if integer_lookup(specs, keys, values) and all(
            _EXACT_KEY.fullmatch(t) and t == spark_type(by_name[k])
            for k, t in zip(keys, types, strict=True)):
        wheres = [" OR ".join("(" + " AND ".join(
            f"{quote_name(k)} = {_literal(v, t)}" for k, t, v in zip(keys, types, row,
                                                                      strict=True)) + ")"
            for row in chunk) for chunk in chunks(values)]
    for where in wheres:
        sql = f"SELECT {', '.join(selected)} FROM {ref.sql}" + (f" WHERE {where}"
                                                                 if where else "")
        for row in spark.sql(sql).toLocalIterator():
            yield [_thl(spec, value) for spec, value in zip(specs, row, strict=True)]


def _select(spec: ColumnSpec, delta_type: str | None) -> str:
    if delta_type is None:
        return "NULL"
    name = quote_name(spec.name)
    if delta_type == "timestamp":
        return f"unix_micros({name})"
    return name


def _thl(spec: ColumnSpec, value: Any) -> ThlValue:
    if value is not None and spec.type.upper() == "TIMESTAMP" and isinstance(value, int):
        return to_thl(_EPOCH + dt.timedelta(microseconds=value))
    return thl_value_of(spec, value)


def _replay(rows: Iterator[Any], specs: Sequence[ColumnSpec]) -> Iterator[list[ThlValue]]:
    """The live rows of a history table's row changes (a multiset, in no order)."""
    live: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        values = tuple(_thl(spec, value) for spec, value in zip(specs, row[1:], strict=True))
        if row[0] in ("I", "UI"):
            live[values] += 1
        elif live[values] > 0:
            live[values] -= 1
    for values, count in live.items():
        for _ in range(count):
            yield list(values)


def _pushed_range(check: CheckRange, columns: dict[str, str]) -> str:
    """A Spark predicate for ``lo < key <= hi`` (lexicographic), or "" when a key column's
    Delta type does not compare exactly like the source's."""
    if not check.key:
        return ""
    types = [columns.get(k.lower(), "") for k in check.key]
    if not all(_EXACT_KEY.fullmatch(t) and t == spark_type(check.spec(k))
               for k, t in zip(check.key, types, strict=True)):
        return ""
    parts = []
    if check.lo is not None:
        parts.append(_after(check.key, types, check.lo))
    if check.hi is not None:
        parts.append(f"NOT ({_after(check.key, types, check.hi)})")
    return " AND ".join(parts)


def _after(key: list[str], types: list[str], bound: list[ThlValue]) -> str:
    """``key > bound``, lexicographically."""
    options = []
    for i in range(len(key)):
        equal = [f"{quote_name(key[j])} = {_literal(bound[j], types[j])}" for j in range(i)]
        options.append(" AND ".join(
            [*equal, f"{quote_name(key[i])} > {_literal(bound[i], types[i])}"]))
    return " OR ".join(f"({o})" for o in options)


def _literal(value: ThlValue, delta_type: str) -> str:
    text = str(value)
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        raise ValueError(f"not a number: {text!r}")
    return f"CAST('{text}' AS {delta_type.upper()})"

