"""Row changes as SQLAlchemy Core statements, for any dialect (pure: no connection needed).

Identifiers are always quoted by the dialect; values are always bound (``v<i>`` for after
images, ``k<i>`` for keys). A table with a primary key is addressed by it; a table without
one by its whole before image, NULL-safe, touching one row only (MySQL ``LIMIT 1``,
PostgreSQL ``ctid``, Oracle ``ROWID``), because duplicate rows are legal there and the
source changed exactly one of them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa

from consumers.sql.ddl import SourceType
from thl_topics.event import ColumnSpec, RowAction

_S = TypeVar("_S", sa.Update, sa.Delete)


@dataclass
class TargetTable:
    """A target table as the applier binds to it: quoted names, no type processing.

    Columns are typeless (``NullType``) on purpose: values are adapted to the target's
    reflected types by ``consumers.sql.types`` and reach the driver unchanged.
    """

    schema: str | None
    name: str
    #: Reflected type of each target column, by name.
    types: dict[str, sa.types.TypeEngine[Any]]
    #: Generated columns of the target, by name: True if stored, False if virtual. The
    #: target computes them: they are never written, and a virtual one never matched.
    generated: dict[str, bool] = field(default_factory=dict)
    #: Source types recorded in the comments of columns made from the THL, by name.
    sources: dict[str, SourceType] = field(default_factory=dict)
    #: Column layouts of row images already checked against this table.
    checked: set[tuple[object, ...]] = field(default_factory=set)
    #: Columns whose target name is not their source name (``consumers.sql.naming``):
    #: source name -> target name. Every other mapping here is keyed by source name.
    aliases: dict[str, str] = field(default_factory=dict)
    #: What set-based apply needs to know of the table (read when first needed).
    shape: SetShape | None = None
    #: By column layout of row images: the primary key by which their changes may be
    #: collapsed, or None (``TargetTables.collapsible``).
    collapsible: dict[tuple[object, ...], tuple[str, ...] | None] = field(
        default_factory=dict)
    #: MariaDB/MySQL text columns in UTF-8, by name: 4 (utf8mb4) or 3 (utf8mb3). Their
    #: strings may go as hexadecimal literals of their UTF-8 bytes (``consumers.sql.
    #: _render_rows``).
    utf8_text: dict[str, int] = field(default_factory=dict)
    table: sa.Table = field(init=False)
    #: ``schema.name`` (``name`` without a schema).
    qualified: str = field(init=False)

    def __post_init__(self) -> None:
        self.qualified = f"{self.schema}.{self.name}" if self.schema else self.name
        meta = sa.MetaData()
        self.table = sa.Table(self.name, meta,
                              *(sa.Column(self.aliases.get(c, c), sa.types.NullType(), key=c)
                                for c in self.types),
                              schema=self.schema, quote=True, quote_schema=True)


@dataclass(frozen=True)
class SetShape:
    """The keys and triggers of a target table (source column names)."""

    #: Primary key columns, in key order (empty: none).
    primary_key: tuple[str, ...]
    #: Unique keys (indexes, constraints) other than the primary key, by columns.
    other_unique: tuple[tuple[str, ...], ...]
    #: The table has triggers.
    triggers: bool


class RowStatements:
    """Builds the statement for one (table, action, column layout) of a row change."""

    def __init__(self, dialect: str) -> None:
        #: ``mysql``, ``mariadb``, ``postgresql``, ``oracle`` ...
        self.dialect = dialect

    def insert(self, target: TargetTable, columns: Sequence[ColumnSpec]) -> sa.Insert:
        t = target.table
        return sa.insert(t).values({t.c[c.name]: sa.bindparam(f"v{i}")
                                    for i, c in enumerate(columns)
                                    if c.name not in target.generated})

    def update(self, target: TargetTable, columns: Sequence[ColumnSpec],
               keys: Sequence[ColumnSpec]) -> sa.Update:
        t = target.table
        stmt = sa.update(t).values({t.c[c.name]: sa.bindparam(f"v{i}")
                                    for i, c in enumerate(columns)
                                    if c.name not in target.generated})
        return self._one_row(target, stmt, keys)

    def delete(self, target: TargetTable, keys: Sequence[ColumnSpec]) -> sa.Delete:
        return self._one_row(target, sa.delete(target.table), keys)

    def _one_row(self, target: TargetTable, stmt: _S, keys: Sequence[ColumnSpec]) -> _S:
        t = target.table
        pk = [(i, c) for i, c in enumerate(keys) if c.primary_key]
        if pk:
            return stmt.where(*(t.c[c.name] == sa.bindparam(f"k{i}") for i, c in pk))
        # No primary key: match the whole before image, NULL-safe, and touch one row only.
        # A virtual column's value is the target's to compute: matching on it adds nothing.
        match = sa.and_(*(t.c[c.name].is_not_distinct_from(sa.bindparam(f"k{i}"))
                          for i, c in enumerate(keys) if target.generated.get(c.name, True)))
        if self.dialect in ("mysql", "mariadb"):
            return stmt.where(match).with_dialect_options(mysql_limit=1)
        rowid = {"postgresql": "ctid", "oracle": "ROWID"}.get(self.dialect)
        if rowid is None:
            raise NotImplementedError(f"no single-row address for dialect {self.dialect}")
        # LIMIT as literal text, not a bound parameter: the statement is also rendered by
        # the driver with the row's parameters only (consumers.sql.batches' queued path).
        one = (sa.select(sa.literal_column(rowid)).select_from(t).where(match)
               .limit(sa.literal_column("1", sa.Integer)).scalar_subquery())
        return stmt.where(sa.literal_column(rowid) == one)


def statement_for(builder: RowStatements, target: TargetTable, action: RowAction,
                  columns: Sequence[ColumnSpec], keys: Sequence[ColumnSpec],
                  ) -> sa.Insert | sa.Update | sa.Delete:
    """The statement of one row-change layout."""
    if action is RowAction.INSERT:
        return builder.insert(target, columns)
    if action is RowAction.UPDATE:
        return builder.update(target, columns, keys)
    return builder.delete(target, keys)


Binder = Callable[[Sequence[Sequence[object]], Sequence[Sequence[object]]],
                  list[dict[str, object]]]
"""Adapted rows (after images, before images) to executemany parameters."""

#: Parameter names by column position, made once, not per value (MySQL allows 4096
#: columns a table).
_AFTER_NAMES = tuple(f"v{i}" for i in range(4096))
_KEY_NAMES = tuple(f"k{i}" for i in range(4096))


def _param_names(names: tuple[str, ...], prefix: str, count: int) -> Sequence[str]:
    """At least ``count`` parameter names (zipped with a row, the row's own count)."""
    return names if count <= len(names) else [f"{prefix}{i}" for i in range(count)]


def binder(action: RowAction, keys: Sequence[ColumnSpec], width: int | None = None
           ) -> Binder:
    """``bind_rows`` for one action and key layout, its choices made once; ``width``: the
    after images' column count, where every row has it (adapted rows do: ``row_adapter``
    refuses another count), else each call takes the longest row's."""
    has_pk = any(c.primary_key for c in keys)
    key_index = [i for i, c in enumerate(keys) if c.primary_key or not has_pk]
    key_names = [_param_names(_KEY_NAMES, "k", len(keys))[i] for i in key_index]
    pick = operator.itemgetter(*key_index) if len(key_index) > 1 else None
    fixed = None if width is None else tuple(_param_names(_AFTER_NAMES, "v", width)[:width])

    def after_names(after: Sequence[Sequence[object]]) -> Sequence[str]:
        if fixed is not None:
            return fixed
        return _param_names(_AFTER_NAMES, "v", max(map(len, after), default=0))

    def key_params(row: Sequence[object]) -> Iterable[tuple[str, object]]:
        if pick is not None:
            return zip(key_names, pick(row), strict=True)
        # The usual key, one column: one pair, no iterator over two lists.
        return ((key_names[0], row[key_index[0]]),) if key_index else ()

    if action is RowAction.INSERT:
        def bind(after: Sequence[Sequence[object]], before: Sequence[Sequence[object]]
                 ) -> list[dict[str, object]]:
            names = after_names(after)
            return [dict(zip(names, row, strict=False)) for row in after]
    elif action is RowAction.DELETE:
        def bind(after: Sequence[Sequence[object]], before: Sequence[Sequence[object]]
                 ) -> list[dict[str, object]]:
            return [dict(key_params(row)) for row in before]
    else:
        def bind(after: Sequence[Sequence[object]], before: Sequence[Sequence[object]]
                 ) -> list[dict[str, object]]:
            names = after_names(after)
            out = []
            for new, old in zip(after, before, strict=True):
                params = dict(zip(names, new, strict=False))
                params.update(key_params(old))
                out.append(params)
            return out
    return bind


def bind_rows(action: RowAction, after: Sequence[Sequence[object]],
              before: Sequence[Sequence[object]], keys: Sequence[ColumnSpec],
              ) -> list[dict[str, object]]:
    """executemany parameters for adapted rows (``v<i>`` after, ``k<i>`` before)."""
    return binder(action, keys)(after, before)
