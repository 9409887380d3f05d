"""Renamed and dropped tables and renamed columns on a SQL target that does not replay the
source's DDL (PostgreSQL, Oracle; issue 28, ``consumers.applier.Restructures``).

Each change is made by the applier in the DDL's own block: on PostgreSQL the DDL and the
copy of a renamed column run in the block's transaction, committed with its position, so a
crash leaves all of it or none; on Oracle the DDL commits by itself (``run_ddl``) and the
copy runs in the block's transaction. Every change first reads what the target has, so a
replay of the block (or a table no row ever reached) is left alone:

- rename table: ``ALTER TABLE old RENAME TO new`` (PostgreSQL: ``SET SCHEMA`` first for
  another schema, made if missing); nothing if the old table is not there.
- rename column, ``evolve`` (or a key column): ``ALTER TABLE t RENAME COLUMN old TO new``.
- rename column, ``lenient``: the new column is added with the old one's target type and
  comment, filled from it (``UPDATE t SET new = old``), and the old one is kept nullable,
  as a column dropped in lenient mode is: NULL in the rows inserted from then on.
- drop table (``evolve``): ``DROP TABLE``; nothing if it is not there.

Target names come from the row path's naming rule (``TargetTables``), and the tables it
reflected are forgotten, so the next row of the new name binds to the table as it now is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine.interfaces import ReflectedColumn

from consumers.errors import DataError, TransientError
from consumers.sql import ddl
from consumers.sql.context import TargetContext
from consumers.sql.naming import exact
from consumers.sql.tables import RunDdl, TargetTables
from thl_topics.schema_change import SchemaChange

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.sql.applier")

#: A driver error as the consumer's, naming what was being done and the seqno.
Classify = Callable[[sa_exc.DBAPIError, str, int], TransientError | DataError]


class Restructurer:
    """Carries out renames and drops of the source's tables and columns on one target."""

    def __init__(self, ctx: TargetContext, tables: TargetTables, run_ddl: RunDdl,
                 classify: Classify) -> None:
        self.ctx = ctx
        self._tables = tables
        self._run_ddl = run_ddl
        self._classify = classify

    # -- the three changes ------------------------------------------------------------------

    def rename_table(self, change: SchemaChange, seqno: int) -> None:
        old = self._tables.target_name(change.schema, change.table, seqno)
        new = self._tables.target_name(change.new_schema or change.schema,
                                       change.new_name or change.table, seqno)
        what = f"{change.describe()} (seqno {seqno})"
        if not self._exists(*old, what, seqno):
            log.info("%s: %s: no table %s here (never made, or already renamed): nothing to "
                     "rename", self.ctx.target, what, _dotted(old))
            return
        if self._exists(*new, what, seqno):
            raise DataError(f"{self.ctx.target}: {what}: both {_dotted(old)} and "
                            f"{_dotted(new)} are on the target; drop or rename one of them "
                            "there, then put the group online", seqno=seqno)
        dialect = self.ctx.db.dialect
        try:
            statements = ddl.rename_table(ddl.new_table(*old, [], dialect), *new, dialect)
        except ValueError as exc:
            raise DataError(f"{self.ctx.target}: {what}: {exc}; move the table by hand, "
                            "then skip the seqno", seqno=seqno) from exc
        self._ddl(statements, _dotted(old), what, seqno)
        log.info("%s: %s renamed to %s (%s)", self.ctx.target, _dotted(old), _dotted(new),
                 what)

    def rename_column(self, change: SchemaChange, keep_old: bool, seqno: int) -> None:
        where = self._tables.target_name(change.schema, change.table, seqno)
        what = f"{change.describe()} (seqno {seqno})"
        columns = self._columns(*where, what, seqno)
        if columns is None:
            log.info("%s: %s: no table %s here (never made): nothing to rename",
                     self.ctx.target, what, _dotted(where))
            return
        old = self._tables.column_name(change.schema, change.table, change.column or "", seqno)
        new = self._tables.column_name(change.schema, change.table, change.new_name or "",
                                       seqno)
        if old not in columns:
            log.info("%s: %s: %s has no column %s (already renamed): nothing to do",
                     self.ctx.target, what, _dotted(where), old)
            return
        key = old in self._key(*where, what, seqno)
        table = ddl.new_table(*where, [], self.ctx.db.dialect)
        if keep_old and not key:
            self._keep_beside(table, columns[old], new, columns, what, seqno)
            self._tables.keep(_dotted(where), change.column or "")
            return
        if new in columns:
            raise DataError(f"{self.ctx.target}: {what}: {_dotted(where)} has both columns "
                            f"{old} and {new}; drop one of them there, then put the group "
                            "online", seqno=seqno)
        self._ddl(ddl.rename_column(table, old, new, self.ctx.db.dialect), _dotted(where),
                  what, seqno)
        log.info("%s: %s: column %s renamed to %s%s", self.ctx.target, _dotted(where), old,
                 new, " (a key column: renamed in lenient mode too)" if keep_old else "")

    def drop_table(self, change: SchemaChange, seqno: int) -> None:
        where = self._tables.target_name(change.schema, change.table, seqno)
        what = f"{change.describe()} (seqno {seqno})"
        if not self._exists(*where, what, seqno):
            log.info("%s: %s: no table %s here (never made, or already dropped)",
                     self.ctx.target, what, _dotted(where))
            return
        self._ddl(ddl.drop_table(ddl.new_table(*where, [], self.ctx.db.dialect)),
                  _dotted(where), what, seqno)
        log.info("%s: %s dropped with its rows (%s; schema_changes: evolve)",
                 self.ctx.target, _dotted(where), what)

    # -- parts ------------------------------------------------------------------------------

    def _keep_beside(self, table: sa.Table, old: ReflectedColumn, new: str,
                     columns: Mapping[str, ReflectedColumn], what: str, seqno: int) -> None:
        """Lenient: the new column, with the old one's type and comment, filled from it; the
        old one kept, nullable."""
        dialect = self.ctx.db.dialect
        statements: list[ddl.Ddl] = []
        if new not in columns:
            column: sa.Column[object] = sa.Column(new, old["type"], comment=old.get("comment"))
            table.append_column(column)
            try:
                statements += ddl.add_column(table, column, dialect)[:1]
            except sa_exc.CompileError as exc:
                raise DataError(f"{self.ctx.target}: {what}: cannot add {new} to "
                                f"{table.schema}.{table.name} with the type of "
                                f"{old['name']}: {exc}", seqno=seqno) from exc
            if column.comment:
                statements.append(sa.schema.SetColumnComment(column))
        if not old["nullable"] and not old.get("computed"):
            statements += ddl.allow_null(table, old["name"], dialect)
        where = f"{table.schema}.{table.name}"
        if statements:
            self._ddl(statements, where, what, seqno)
        try:
            done = self.ctx.db.execute(ddl.copy_column(table, old["name"], new))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"filling {new} of {where} from {old['name']} ({what})",
                                 seqno) from exc
        log.info("%s: %s: column %s added beside %s and filled from it in %d row(s); %s is "
                 "kept, NULL in the rows written from now on (%s; schema_changes: lenient)",
                 self.ctx.target, where, new, old["name"], done.rowcount, old["name"], what)

    def _ddl(self, statements: list[ddl.Ddl], where: str, what: str, seqno: int) -> None:
        self._run_ddl(statements, f"{where} ({what})", seqno)
        # Whatever was reflected or compiled for the table describes it as it was.
        self._tables.clear()

    def _exists(self, schema: str, table: str, what: str, seqno: int) -> bool:
        try:
            return bool(sa.inspect(self.ctx.db).has_table(exact(table), schema=exact(schema)))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"looking for {schema}.{table} ({what})", seqno) from exc

    def _columns(self, schema: str, table: str, what: str, seqno: int
                 ) -> dict[str, ReflectedColumn] | None:
        """The target table's columns by target name; None if there is no such table."""
        try:
            found = sa.inspect(self.ctx.db).get_columns(exact(table), schema=exact(schema))
        except sa_exc.NoSuchTableError:
            return None
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"reading the columns of {schema}.{table} ({what})",
                                 seqno) from exc
        return {c["name"]: c for c in found}

    def _key(self, schema: str, table: str, what: str, seqno: int) -> set[str]:
        try:
            key = sa.inspect(self.ctx.db).get_pk_constraint(exact(table), schema=exact(schema))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"reading the primary key of {schema}.{table} ({what})",
                                 seqno) from exc
        return set(key.get("constrained_columns") or [])


def _dotted(name: tuple[str, str]) -> str:
    return f"{name[0]}.{name[1]}"
