"""How the rows of a table become documents: its namespace, fields, converters and ``_id``.

A table's documents: ``_id`` = the primary key (a sub-document in key order for a composite
key; the THL carries the key's columns in table order, and that is the order used), then
``_seqno``, then one field per column (``naming.field_name``), each value through the type
map (``types``). A layout is made once per table and column layout, and checked then: names
the server refuses and two columns on one field are data errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from consumers.mongodb.context import TargetContext
from consumers.mongodb.errors import data_error
from consumers.mongodb.naming import (
    Namespace,
    collection_problem,
    field_name,
    namespace,
    refused_field,
)
from consumers.mongodb.types import (
    ID,
    SEQNO,
    Converter,
    RowConverter,
    TypeOptions,
    converter,
    key_converter,
)
from consumers.naming import NameOwners, UnfitName
from thl_topics.event import ColumnSpec, RowChange, ThlEvent, ThlValue

#: What a data error about a table's names suggests.
_ELSEWHERE = ("map the table elsewhere with the target's `database` and `collection` "
              "templates, or filter it out")


@dataclass(frozen=True)
class Layout:
    """How the rows of one table (with one column layout) become documents."""

    ns: Namespace
    #: ``schema.table`` of the source.
    table: str
    columns: tuple[str, ...]
    fields: tuple[str, ...]
    #: ``_id``, ``_seqno``, then the fields: the keys of a row's document, in order.
    doc_keys: tuple[str, ...]
    convert: RowConverter
    #: Positions of the primary key columns (empty: the table has no key), in key order.
    key: tuple[int, ...]
    key_converters: tuple[Converter, ...]

    def ident(self, row: Sequence[ThlValue]) -> Any:
        """The ``_id`` of a row: the key's value, or a sub-document of a composite key."""
        if len(self.key) == 1:
            i = self.key[0]
            return self.key_converters[0](row[i])
        return {self.fields[i]: conv(row[i])
                for i, conv in zip(self.key, self.key_converters, strict=True)}


class Layouts:
    """The layouts of the tables written to one server (known once connected)."""

    def __init__(self, ctx: TargetContext, service: str, owners: NameOwners) -> None:
        self.ctx = ctx
        self.service = service
        #: Which table each collection holds (``trep_names``).
        self.owners = owners
        #: What the server stores (set on connecting).
        self.types = TypeOptions()
        self._layouts: dict[tuple[object, ...], Layout] = {}
        self._namespaces: dict[tuple[str, str], Namespace] = {}

    def clear(self) -> None:
        """Forget every layout (a new session: the server may be another one)."""
        self._layouts.clear()
        self._namespaces.clear()
        self.owners.clear()

    def namespace(self, schema: str, table: str, event: ThlEvent) -> Namespace:
        """Where a table's documents go; a data error if the server cannot take the names
        or another table holds the collection (the first table claims it)."""
        found = self._namespaces.get((schema, table))
        if found is not None:
            return found
        found = self.locate(schema, table, event)
        source = f"{schema}.{table}"
        try:
            self.owners.claim(str(found), source)
        except UnfitName as exc:
            raise data_error(self.ctx.target, event, source, None,
                             f"{exc}; {_ELSEWHERE}") from exc
        self._namespaces[(schema, table)] = found
        return found

    def locate(self, schema: str, table: str, event: ThlEvent) -> Namespace:
        """Where a table's documents go by the naming rule, claiming nothing (a renamed or
        dropped table's old collection); a data error if the server cannot take the names."""
        source = f"{schema}.{table}"
        how = _ELSEWHERE
        try:
            found = namespace(self.ctx.cfg, self.service, schema, table,
                              self.ctx.server.ferretdb)
        except UnfitName as exc:
            raise data_error(self.ctx.target, event, source, None,
                             f"{exc} on {self.ctx.server.name}; {how}") from exc
        problem = collection_problem(found.database, found.collection)
        if problem is not None:
            raise data_error(self.ctx.target, event, source, None,
                             f"collection {found.collection!r} cannot be used on "
                             f"{self.ctx.server.name}: {problem}; {how}")
        return found

    def forget(self, schema: str, table: str) -> None:
        """Forget a table's namespace and layouts (it was renamed or dropped): its next row
        finds its collection and claims it again."""
        self._namespaces.pop((schema, table), None)
        for signature in [s for s in self._layouts if s[:2] == (schema, table)]:
            del self._layouts[signature]

    def field(self, table: str, column: str, event: ThlEvent) -> str:
        """A column's document field, as ``layout`` makes it (a data error where the server
        cannot take the verbatim name)."""
        name = field_name(column, self.ctx.cfg.escape_names)
        problem = None if self.ctx.cfg.escape_names \
            else refused_field(name, self.ctx.server.ferretdb)
        if problem is not None:
            raise data_error(self.ctx.target, event, table, column,
                             f"the column name cannot be a field name: {problem};"
                             " set escape_names: true or rename the column")
        return name

    def layout(self, change: RowChange, specs: list[ColumnSpec], event: ThlEvent) -> Layout:
        """How rows of this table and column layout become documents (made once)."""
        signature = (change.schema, change.table, *[
            (c.name, c.type, c.length, c.scale, c.unsigned, c.primary_key, c.blob,
             c.charset is None)
            for c in specs])
        found = self._layouts.get(signature)
        if found is not None:
            return found
        table = f"{change.schema}.{change.table}"
        ns = self.namespace(change.schema, change.table, event)
        fields = tuple(field_name(c.name, self.ctx.cfg.escape_names) for c in specs)
        if not self.ctx.cfg.escape_names:
            for spec, name in zip(specs, fields, strict=True):
                problem = refused_field(name, self.ctx.server.ferretdb)
                if problem is not None:
                    raise data_error(self.ctx.target, event, table, spec.name,
                                     f"the column name cannot be a field name: {problem};"
                                     " set escape_names: true or rename the column")
        if len(set(fields)) != len(fields):
            raise data_error(self.ctx.target, event, table, None,
                             "two columns map to the same field")
        key = tuple(i for i, c in enumerate(specs) if c.primary_key)
        found = Layout(ns, table, tuple(c.name for c in specs), fields, (ID, SEQNO, *fields),
                       RowConverter([converter(c, self.types, self.ctx.cfg.is_json(
                           change.schema, change.table, c.name)) for c in specs]), key,
                       tuple(key_converter(specs[i], self.types) for i in key))
        self._layouts[signature] = found
        return found

    def convert(self, layout: Layout, row: Sequence[ThlValue], event: ThlEvent
                ) -> list[Any]:
        """A row's field values; a data error naming the column that cannot be stored."""
        try:
            return layout.convert(row)
        except (ValueError, TypeError) as exc:
            failed = layout.convert.failed(row)
            column, why = (layout.columns[failed[0]], failed[1]) if failed else (None, str(exc))
            raise data_error(self.ctx.target, event, layout.table, column,
                             f"the value cannot be stored: {why}") from exc

    def ident(self, layout: Layout, row: Sequence[ThlValue], event: ThlEvent) -> Any:
        """A row's ``_id``; a data error if its key cannot be one."""
        try:
            return layout.ident(row)
        except (ValueError, TypeError) as exc:
            raise data_error(self.ctx.target, event, layout.table, None,
                             f"the primary key cannot be an _id: {exc}") from exc
