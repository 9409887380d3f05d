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
from thl_topics.event import ThlValue
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
    for row in rows:
        yield [thl_value_of(spec, value) for spec, value in zip(check.specs, row,
                                                                strict=True)]
