"""The source's cascading foreign keys, read from its catalog and attached to the THL.

InnoDB's cascades leave no trace in the binlog (``thl_topics.foreign_keys``), so the
extractor keeps the foreign keys whose ON DELETE or ON UPDATE action is CASCADE or SET NULL,
read from ``information_schema`` when it starts and again after every table DDL it reads, and
marks each fragment that deletes or updates rows of a referenced table with the rules that
change may set off.

The catalog is the source's as it is now, not as it was when an old binlog event was
written: an extractor far behind may attach a foreign key added after the change. That is
harmless where it matters: MariaDB refuses to add a foreign key while orphan rows exist
(unless ``foreign_key_checks=0``), so rows the rule reaches at a target were deleted or
re-pointed on the source before the key was added, and later binlog events say so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import pymysql

from extractor.snapshot import describe
from thl_topics.event import ColumnSpec, DataItem, RowAction, RowChange
from thl_topics.foreign_keys import CascadeRules, ForeignKey, Referential, TableName

log = logging.getLogger(__name__)

Connect = Callable[[], "pymysql.connections.Connection[Any]"]

_CATALOG = (
    "SELECT rc.CONSTRAINT_SCHEMA, rc.CONSTRAINT_NAME, rc.TABLE_NAME, "
    "rc.UNIQUE_CONSTRAINT_SCHEMA, rc.REFERENCED_TABLE_NAME, rc.DELETE_RULE, rc.UPDATE_RULE, "
    "k.COLUMN_NAME, k.REFERENCED_COLUMN_NAME "
    "FROM information_schema.REFERENTIAL_CONSTRAINTS rc "
    "JOIN information_schema.KEY_COLUMN_USAGE k "
    "ON k.CONSTRAINT_SCHEMA = rc.CONSTRAINT_SCHEMA AND k.CONSTRAINT_NAME = rc.CONSTRAINT_NAME "
    "AND k.TABLE_NAME = rc.TABLE_NAME AND k.REFERENCED_TABLE_NAME IS NOT NULL "
    "WHERE rc.DELETE_RULE IN ('CASCADE', 'SET NULL') OR rc.UPDATE_RULE IN ('CASCADE', "
    "'SET NULL') "
    "ORDER BY rc.CONSTRAINT_SCHEMA, rc.TABLE_NAME, rc.CONSTRAINT_NAME, k.ORDINAL_POSITION")


def read_foreign_keys(conn: pymysql.connections.Connection[Any]) -> list[ForeignKey]:
    """Every foreign key of the source whose action changes child rows."""
    with conn.cursor() as cur:
        cur.execute(_CATALOG)
        rows = cur.fetchall()
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for schema, name, table, ref_schema, ref_table, on_delete, on_update, col, ref_col in rows:
        fk = found.setdefault((schema, table, name), {
            "name": name, "parent": (ref_schema, ref_table), "child": (schema, table),
            "on_delete": Referential(on_delete), "on_update": Referential(on_update),
            "child_columns": [], "parent_columns": []})
        fk["child_columns"].append(col)
        fk["parent_columns"].append(ref_col)
    return [ForeignKey(name=f["name"], parent=f["parent"],
                       parent_columns=tuple(f["parent_columns"]), child=f["child"],
                       child_columns=tuple(f["child_columns"]), on_delete=f["on_delete"],
                       on_update=f["on_update"]) for f in found.values()]


class ForeignKeyCatalog:
    """The source's cascading foreign keys, read lazily through ``connect`` and read again
    after a table DDL (``changed``)."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._by_parent: dict[TableName, list[ForeignKey]] | None = None
        self._specs: dict[TableName, list[ColumnSpec]] = {}
        #: Catalog reads so far (tests, logs).
        self.reads = 0

    def changed(self) -> None:
        """A table DDL was read: foreign keys and column specs may differ from now on."""
        self._by_parent = None
        self._specs.clear()

    def _rules(self) -> dict[TableName, list[ForeignKey]]:
        if self._by_parent is None:
            conn = self._connect()
            try:
                keys = read_foreign_keys(conn)
            finally:
                conn.close()
            self.reads += 1
            by_parent: dict[TableName, list[ForeignKey]] = {}
            for fk in keys:
                by_parent.setdefault(fk.parent, []).append(fk)
            self._by_parent = by_parent
            if keys:
                log.info("source foreign keys that cascade: %d, on %d referenced table(s)",
                         len(keys), len(by_parent))
        return self._by_parent

    def rules_for(self, items: Iterable[DataItem], unchecked: set[int] | None = None
                  ) -> CascadeRules | None:
        """The rules the DELETEs and UPDATEs among ``items`` may set off (transitively),
        with the specs of the child tables they reach; None if none. Items whose ``id`` is
        in ``unchecked`` ran with ``foreign_key_checks=0``, which InnoDB does not cascade."""
        changed = [(i.schema, i.table) for i in items
                   if isinstance(i, RowChange) and i.action is not RowAction.INSERT
                   and id(i) not in (unchecked or ())]
        if not changed:
            return None  # inserts cascade nothing: no catalog read after a DDL for them
        rules = self._rules()
        todo = [t for t in changed if t in rules]
        if not todo:
            return None
        found = CascadeRules()
        seen: set[TableName] = set()
        while todo:
            parent = todo.pop()
            if parent in seen:
                continue
            seen.add(parent)
            for fk in rules.get(parent, ()):
                found.rules.append(fk)
                if fk.child not in found.tables:
                    found.tables[fk.child] = self._specs_of(fk.child)
                todo.append(fk.child)
        return found

    def _specs_of(self, table: TableName) -> list[ColumnSpec]:
        specs = self._specs.get(table)
        if specs is None:
            conn = self._connect()
            try:
                specs = self._specs[table] = describe(conn, *table).specs
            finally:
                conn.close()
        return specs
