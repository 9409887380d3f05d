"""Reading a checked key range back from a SQL target, as THL values (consistency checks).

The range's columns are selected from the target table as it is (reflected), with the key
range pushed into the query: the bounds are adapted to the target's column types the way
row values are (``types.adapt``), and compared as row values (``(k1, k2) > (lo1, lo2)``).
Each value read comes back in its THL form (``thl_topics.checksum.thl_value_of``), so both
sides of a check are digested alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from consumers.check import CheckRange
from consumers.errors import DataError
from consumers.sql.statements import TargetTable
from consumers.sql.types import adapt
from thl_topics.checksum import thl_value_of
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import from_thl


def range_query(target: TargetTable, check: CheckRange, dialect: str, store: str
                ) -> sa.Select[Any]:
    """The query of the checked range of ``target`` (on ``store``, for errors)."""
    t = target.table
    columns = [t.c[c.name] for c in check.specs if c.name in target.types]
    if len(columns) != len(check.specs):
        missing = [c.name for c in check.specs if c.name not in target.types]
        raise DataError(f"{target.qualified} on {store} has no column(s) "
                        f"{', '.join(missing)} to check")
    query = sa.select(*columns)
    if check.key:
        keys = [t.c[k] for k in check.key]
        typed = {k: adapt(from_thl(check.spec(k), v), target.types[k], dialect,
                          check.spec(k)) for k, v in zip(check.key, check.lo or [],
                                                         strict=False)}
        if check.lo is not None:
            query = query.where(sa.tuple_(*keys) > sa.tuple_(
                *(sa.literal(typed[k]) for k in check.key)))
        if check.hi is not None:
            hi = [adapt(from_thl(check.spec(k), v), target.types[k], dialect,
                        check.spec(k)) for k, v in zip(check.key, check.hi, strict=True)]
            query = query.where(sa.tuple_(*keys) <= sa.tuple_(*map(sa.literal, hi)))
    return query


def thl_rows(check: CheckRange, rows: Sequence[Sequence[Any]]) -> Iterator[list[ThlValue]]:
    """The rows read for ``check``, as THL values."""
    return rows_of(check.specs, rows)


def rows_of(specs: Sequence[ColumnSpec], rows: Sequence[Sequence[Any]]
            ) -> Iterator[list[ThlValue]]:
    """Rows read for ``specs``, as THL values."""
    for row in rows:
        yield [thl_value_of(spec, value) for spec, value in zip(specs, row, strict=True)]


#: Values per IN list (Oracle takes at most 1000).
MATCH_CHUNK = 1000


def matching_queries(target: TargetTable, specs: Sequence[ColumnSpec], columns: Sequence[str],
                     values: Sequence[Sequence[ThlValue]], dialect: str
                     ) -> Iterator[sa.Select[Any]]:
    """Queries of the rows of ``target`` whose ``columns`` hold one of ``values`` (the child
    rows of a cascade), ``specs`` selected (NULL where the table lacks a column)."""
    t = target.table
    selected = [t.c[c.name] if c.name in target.types else sa.null() for c in specs]
    if any(c not in target.types for c in columns):
        return  # the table lacks a key column: no row can match
    by_name = {c.name: c for c in specs}
    keys = [t.c[c] for c in columns]
    typed = [tuple(adapt(from_thl(by_name[c], v), target.types[c], dialect, by_name[c])
                   for c, v in zip(columns, row, strict=True)) for row in values]
    for start in range(0, len(typed), MATCH_CHUNK):
        chunk = typed[start:start + MATCH_CHUNK]
        where = keys[0].in_([r[0] for r in chunk]) if len(keys) == 1 else \
            sa.tuple_(*keys).in_(chunk)
        yield sa.select(*selected).where(where)
