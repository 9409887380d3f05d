"""The filter chain: built-in filters and users' own, applied in their declared order.

Filters never change the objects they receive in place: the extractor shares column specs
between events of one table, and a dry run compares an event before and after. A filter
returns a new event (or the same one, unchanged), or None: at extraction None means "no
data" (the seqno stays, gapless), in a consumer group "nothing to apply".
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from typing import Any

from replicator.filters.specs import (
    Custom,
    DropColumn,
    EnumToString,
    FilterSpec,
    Mask,
    PrimaryKey,
    Rename,
)
from thl_topics.event import ColumnSpec, DataItem, RowChange, Statement, ThlEvent, ThlValue

EventFilter = Callable[[ThlEvent], ThlEvent | None]


class FilterError(RuntimeError):
    """A filter failed on an event: the stage stops at that seqno."""

    def __init__(self, message: str, *, filter_name: str, seqno: int) -> None:
        super().__init__(message)
        self.filter_name = filter_name
        self.seqno = seqno


def _matches(patterns: Sequence[str], schema: str, table: str) -> bool:
    name = f"{schema}.{table}"
    return any(fnmatchcase(name, p if "." in p else f"{p}.*") for p in patterns)


def _map_rows(change: RowChange, fn: Callable[[list[ColumnSpec], list[list[ThlValue]]],
                                              tuple[list[ColumnSpec], list[list[ThlValue]]]]
              ) -> RowChange:
    """The row change with ``fn`` applied to (specs, rows) of both images."""
    columns, after = fn(change.column_specs, change.column_values)
    keys, before = fn(change.key_specs, change.key_values)
    return dataclasses.replace(change, column_specs=columns, key_specs=keys,
                               column_values=after, key_values=before)


def _rows_only(items: list[DataItem], fn: Callable[[RowChange], RowChange]) -> list[DataItem]:
    return [fn(item) if isinstance(item, RowChange) else item for item in items]


class _DropColumn:
    def __init__(self, spec: DropColumn) -> None:
        self.spec = spec

    def __call__(self, event: ThlEvent) -> ThlEvent:
        def change(item: RowChange) -> RowChange:
            if not _matches(self.spec.tables, item.schema, item.table):
                return item

            def drop(specs: list[ColumnSpec], rows: list[list[ThlValue]]
                     ) -> tuple[list[ColumnSpec], list[list[ThlValue]]]:
                gone = [i for i, c in enumerate(specs)
                        if any(fnmatchcase(c.name, p) for p in self.spec.columns)]
                if not gone:
                    return specs, rows
                keys = [specs[i].name for i in gone if specs[i].primary_key]
                if keys:
                    raise ValueError(f"{item.schema}.{item.table}: cannot drop key column(s) "
                                     f"{', '.join(keys)}; declare another key with pkey")
                keep = [i for i in range(len(specs)) if i not in gone]
                return [specs[i] for i in keep], [[row[i] for i in keep] for row in rows]

            return _map_rows(item, drop)

        return dataclasses.replace(event, data=_rows_only(event.data, change))


class _Rename:
    def __init__(self, spec: Rename) -> None:
        self.spec = spec

    def _table(self, schema: str, table: str) -> tuple[str, str]:
        new = self.spec.tables.get(f"{schema}.{table}")
        schema2 = self.spec.schemas.get(schema, schema)
        if new is None:
            return schema2, table
        if "." in new:
            s, _, t = new.partition(".")
            return s, t
        return schema2, new

    def __call__(self, event: ThlEvent) -> ThlEvent:
        data: list[DataItem] = []
        for item in event.data:
            if isinstance(item, Statement):
                if item.default_schema in self.spec.schemas:
                    item = dataclasses.replace(
                        item, default_schema=self.spec.schemas[item.default_schema])
                data.append(item)
                continue
            columns = next((m for p, m in self.spec.columns.items()
                            if _matches([p], item.schema, item.table)), {})

            def rename(specs: list[ColumnSpec], rows: list[list[ThlValue]],
                       columns: dict[str, str] = columns,
                       ) -> tuple[list[ColumnSpec], list[list[ThlValue]]]:
                if not any(c.name in columns for c in specs):
                    return specs, rows
                return [dataclasses.replace(c, name=columns.get(c.name, c.name))
                        for c in specs], rows

            schema, table = self._table(item.schema, item.table)
            data.append(dataclasses.replace(_map_rows(item, rename), schema=schema,
                                            table=table))
        shard = self.spec.schemas.get(event.shard_id, event.shard_id)
        metadata = dict(event.metadata)
        if "shard" in metadata:
            metadata["shard"] = self.spec.schemas.get(metadata["shard"], metadata["shard"])
        return dataclasses.replace(event, data=data, shard_id=shard, metadata=metadata)


class _EnumToString:
    def __init__(self, spec: EnumToString) -> None:
        self.spec = spec

    def __call__(self, event: ThlEvent) -> ThlEvent:
        def text(specs: list[ColumnSpec], rows: list[list[ThlValue]]
                 ) -> tuple[list[ColumnSpec], list[list[ThlValue]]]:
            if not any(c.type.upper() in ("ENUM", "SET") for c in specs):
                return specs, rows
            out = []
            for c in specs:
                kind = c.type.upper()
                if kind == "ENUM":
                    width = max((len(m) for m in c.enum_values), default=1)
                elif kind == "SET":
                    width = max(sum(len(m) for m in c.enum_values) + len(c.enum_values) - 1, 1)
                else:
                    out.append(c)
                    continue
                out.append(dataclasses.replace(c, type="VARCHAR", length=width,
                                               enum_values=[], charset=c.charset or "utf8mb4"))
            return out, rows

        def change(item: RowChange) -> RowChange:
            if not _matches(self.spec.tables, item.schema, item.table):
                return item
            return _map_rows(item, text)

        return dataclasses.replace(event, data=_rows_only(event.data, change))


class _PrimaryKey:
    def __init__(self, spec: PrimaryKey) -> None:
        self.spec = spec

    def __call__(self, event: ThlEvent) -> ThlEvent:
        def change(item: RowChange) -> RowChange:
            key = next((cols for p, cols in self.spec.tables.items()
                        if _matches([p], item.schema, item.table)), None)
            if key is None:
                return item

            def mark(specs: list[ColumnSpec], rows: list[list[ThlValue]]
                     ) -> tuple[list[ColumnSpec], list[list[ThlValue]]]:
                if not specs:
                    return specs, rows
                names = {c.name for c in specs}
                missing = [k for k in key if k not in names]
                if missing:
                    raise ValueError(f"{item.schema}.{item.table} has no column(s) "
                                     f"{', '.join(missing)} for its declared key")
                return [dataclasses.replace(c, primary_key=c.name in key) for c in specs], rows

            return _map_rows(item, mark)

        return dataclasses.replace(event, data=_rows_only(event.data, change))


class _Mask:
    def __init__(self, spec: Mask) -> None:
        self.spec = spec
        self._key = spec.salt.get_secret_value().encode()

    def _value(self, value: ThlValue) -> ThlValue:
        if value is None:
            return None
        if self.spec.method == "mask":
            return self.spec.replacement
        raw = value if isinstance(value, bytes) else str(value).encode()
        return hmac.new(self._key, raw, hashlib.sha256).hexdigest()

    def __call__(self, event: ThlEvent) -> ThlEvent:
        width = 64 if self.spec.method == "hash" else max(len(self.spec.replacement), 1)

        def hide(specs: list[ColumnSpec], rows: list[list[ThlValue]]
                 ) -> tuple[list[ColumnSpec], list[list[ThlValue]]]:
            hit = [i for i, c in enumerate(specs)
                   if any(fnmatchcase(c.name, p) for p in self.spec.columns)]
            if not hit:
                return specs, rows
            if self.spec.method == "mask" and any(specs[i].primary_key for i in hit):
                raise ValueError("masking a key column would make every row the same key; "
                                 "use method: hash")
            out_specs = [dataclasses.replace(c, type="VARCHAR", length=width, scale=0,
                                             unsigned=False, blob=False, charset="utf8mb4",
                                             enum_values=[]) if i in hit else c
                         for i, c in enumerate(specs)]
            return out_specs, [[self._value(v) if i in hit else v for i, v in enumerate(row)]
                               for row in rows]

        def change(item: RowChange) -> RowChange:
            if not _matches(self.spec.tables, item.schema, item.table):
                return item
            return _map_rows(item, hide)

        return dataclasses.replace(event, data=_rows_only(event.data, change))


def _custom(spec: Custom) -> EventFilter:
    module, _, attr = spec.path.partition(":")
    try:
        factory: Any = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"custom filter {spec.path}: {exc}") from exc
    made = factory(**spec.options)
    if not callable(made):
        raise ValueError(f"custom filter {spec.path}: the factory returned {made!r}, "
                         "not a callable that takes a THL event")
    filter_fn: EventFilter = made
    return filter_fn


_BUILTIN: dict[str, Callable[[Any], EventFilter]] = {
    "dropcolumn": _DropColumn, "rename": _Rename, "enumtostring": _EnumToString,
    "pkey": _PrimaryKey, "mask": _Mask, "custom": _custom,
}


class FilterChain:
    """Filters in their declared order; an error names the filter and the seqno."""

    def __init__(self, filters: Sequence[tuple[str, EventFilter]] = ()) -> None:
        self.filters = list(filters)

    def __bool__(self) -> bool:
        return bool(self.filters)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.filters]

    def around(self, schema: str) -> FilterChain:
        """This chain with the rows of ``schema`` (the tracking schema: heartbeats) kept out
        of every filter's reach and put back after it."""
        inner = self

        def protected(event: ThlEvent) -> ThlEvent | None:
            own = [i for i in event.data if isinstance(i, RowChange) and i.schema == schema]
            if not own:
                return inner(event)
            rest = [i for i in event.data if not (isinstance(i, RowChange)
                                                   and i.schema == schema)]
            out = inner(dataclasses.replace(event, data=rest)) if rest else event
            base = out if out is not None else event
            kept = out.data if out is not None and rest else []
            return dataclasses.replace(base, data=[*kept, *own])

        return FilterChain([("chain", protected)]) if self.filters else self

    def __call__(self, event: ThlEvent) -> ThlEvent | None:
        for name, fn in self.filters:
            try:
                result = fn(event)
            except FilterError:
                raise
            except Exception as exc:
                raise FilterError(f"filter {name} failed at seqno {event.seqno} "
                                  f"(event {event.event_id}): {type(exc).__name__}: {exc}",
                                  filter_name=name, seqno=event.seqno) from exc
            if result is None:
                return None
            event = result
        return event


def build_chain(specs: Sequence[FilterSpec]) -> FilterChain:
    """The chain of these filter configurations (ValueError if one cannot be built)."""
    built = []
    for i, spec in enumerate(specs):
        name = spec.name or f"{spec.type}#{i + 1}"
        built.append((name, _BUILTIN[spec.type](spec)))
    return FilterChain(built)
