"""The target tables of a SQL applier: reflected, and made and evolved from the THL.

A table is reflected once (its columns' types, generated columns, and the source types that
``create_tables`` recorded in column comments) and then bound to as it is. With
``create_tables`` (PostgreSQL and Oracle) a table the target lacks is made from the row
image of its first change (``ddl.new_table``), and a later row image with new columns, or
with a source type widened, alters it first; a column dropped, narrowed or changed on the
source stops the group, since the source rewrote its rows without row events. The DDL runs
through the applier (``run_ddl``): in the block's transaction on PostgreSQL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import DataError
from consumers.sql import ddl
from consumers.sql.config import MYSQL_FAMILY
from consumers.sql.context import TargetContext
from consumers.sql.statements import TargetTable
from consumers.sql.types import UnmappedType
from thl_topics.event import ColumnSpec, RowChange

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.sql.applier")

#: Runs DDL statements for a table (``where``) at a seqno.
RunDdl = Callable[[Sequence[ddl.Ddl], str, int], None]


class TargetTables:
    """The tables of one target as the applier binds to them, by source schema and table."""

    def __init__(self, ctx: TargetContext, create_tables: bool, statements_applied: bool,
                 run_ddl: RunDdl) -> None:
        self.ctx = ctx
        self.create_tables = create_tables
        #: Statement events are replayed on this target (its tables come from them).
        self.statements_applied = statements_applied
        self._run_ddl = run_ddl
        self._tables: dict[tuple[str, str], TargetTable] = {}
        #: Tables whose triggers were reported (once per process).
        self._trigger_checked: set[tuple[str, str]] = set()

    def clear(self) -> None:
        """Forget every table (reflected again when next used)."""
        self._tables.clear()

    def get(self, change: RowChange, specs: Sequence[ColumnSpec], seqno: int) -> TargetTable:
        """The target table of a row change (made or evolved with ``create_tables``)."""
        key = (change.schema, change.table)
        found = self._tables.get(key)
        if found is None:
            found = self.reflect(change.schema, change.table)
            if found is None:
                if not self.create_tables:
                    hint = "" if self.statements_applied else (
                        "; create it there (statements are not applied to this target)")
                    raise DataError(f"table {change.schema}.{change.table} does not exist on "
                                    f"{self.ctx.target}" + hint, seqno=seqno)
                found = self._create(change.schema, change.table, specs, seqno)
            self._tables[key] = found
            self._report_triggers(change.schema, change.table)
        if self.create_tables:
            found = self._evolve(found, specs, seqno)
        return found

    def _report_triggers(self, schema: str, table: str) -> None:
        """Warn of triggers on a target table: they fire on every row the applier writes,
        and the row images already carry what the source's triggers did."""
        if (schema, table) in self._trigger_checked or self.ctx.dialect == "oracle":
            return
        self._trigger_checked.add((schema, table))
        try:
            found = self.ctx.db.execute(sa.text(
                "SELECT trigger_name, action_timing, event_manipulation FROM "
                "information_schema.triggers WHERE event_object_schema = :s AND "
                "event_object_table = :t ORDER BY trigger_name"), {"s": schema, "t": table}).all()
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the triggers of {schema}.{table}") from exc
        for name, timing, event in found:
            log.warning("%s: table %s.%s has trigger %s (%s %s): it fires on every row this "
                        "group applies, on top of what the source's row images carry; drop "
                        "it on the target unless that is meant", self.ctx.target, schema,
                        table, name, timing, event)

    def reflect(self, schema: str, table: str) -> TargetTable | None:
        """The target table as it is now; None if there is none."""
        try:
            columns = sa.inspect(self.ctx.db).get_columns(table, schema=schema)
        except sa_exc.NoSuchTableError:
            return None
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the columns of {schema}.{table}") from exc
        sources = {}
        for c in columns:
            source = ddl.SourceType.from_comment(c.get("comment"))
            if source is not None:
                sources[self._column_name(c["name"])] = source
        return TargetTable(
            schema, table, {self._column_name(c["name"]): c["type"] for c in columns},
            {self._column_name(c["name"]): bool(c["computed"].get("persisted", True))
             for c in columns if c.get("computed")}, sources)

    def _create(self, schema: str, name: str, specs: Sequence[ColumnSpec], seqno: int
                ) -> TargetTable:
        """Create the table of a row image (and its schema); the table as reflected."""
        where = f"{schema}.{name}"
        try:
            table = ddl.new_table(schema, name, specs, self.ctx.db.dialect)
        except UnmappedType as exc:
            raise DataError(f"{self.ctx.target}: cannot create {where} for seqno {seqno}: {exc}; "
                            "create it by hand", seqno=seqno) from exc
        self._run_ddl(ddl.create_statements(table, self.ctx.db.dialect), where, seqno)
        log.info("%s: created %s from the THL (seqno %d): %d column(s)%s", self.ctx.target, where,
                 seqno, len(specs), ", primary key " + ", ".join(
                     s.name for s in specs if s.primary_key) if any(
                     s.primary_key for s in specs) else ", no primary key")
        return self._reflected(schema, name, seqno)

    def _reflected(self, schema: str, name: str, seqno: int) -> TargetTable:
        found = self.reflect(schema, name)
        if found is None:
            raise DataError(f"{self.ctx.target}: {schema}.{name} is not there right after it was "
                            f"created or altered (seqno {seqno})", seqno=seqno)
        return found

    def _evolve(self, found: TargetTable, specs: Sequence[ColumnSpec], seqno: int
                ) -> TargetTable:
        """Bring a table made from the THL in line with a row image's columns.

        New columns are added and widened source types widen their column, in the block's
        transaction; a column dropped or narrowed on the source stops the group.
        """
        layout = tuple((s.name, s.type.upper(), s.length, s.scale, s.unsigned) for s in specs)
        if layout in found.checked:
            return found
        where = found.qualified
        names = {s.name for s in specs}
        dropped = [c for c in found.sources if c not in names and c not in found.generated]
        if dropped:
            raise DataError(
                f"{self.ctx.target}: {where} has column(s) {', '.join(dropped)} that the row "
                f"image of seqno {seqno} lacks: dropped on the source? The target keeps "
                "them, so nothing is written without them. Drop them on the target (or "
                "clear their comment to keep them, filled by their default), then put the "
                "group online", seqno=seqno)
        table = ddl.new_table(found.schema, found.name, [], self.ctx.db.dialect)
        try:
            statements = self._alterations(found, specs, table, seqno)
        except UnmappedType as exc:
            raise DataError(f"{self.ctx.target}: cannot evolve {where} for seqno {seqno}: {exc}",
                            seqno=seqno) from exc
        if statements:
            self._run_ddl(statements, where, seqno)
            log.info("%s: %s follows the source at seqno %d: %s", self.ctx.target, where, seqno,
                     "; ".join(ddl.ddl_text(statements, self.ctx.db.dialect)))
            if any(isinstance(s, str) and " ADD " in s for s in statements):
                log.warning("%s: %s: columns added at seqno %d are NULL in the rows the "
                            "target already had, whatever DEFAULT the source gave them",
                            self.ctx.target, where, seqno)
            found = self._reflected(found.schema or "", found.name, seqno)
            self._tables[(found.schema or "", found.name)] = found
        found.checked.add(layout)
        return found

    def _alterations(self, found: TargetTable, specs: Sequence[ColumnSpec], table: sa.Table,
                     seqno: int) -> list[ddl.Ddl]:
        """The DDL that adds the columns ``found`` lacks and widens the ones whose source type
        widened; DataError for a column narrowed or changed on the source."""
        where = found.qualified
        dialect = self.ctx.db.dialect
        statements: list[ddl.Ddl] = []
        for spec in specs:
            if spec.name not in found.types:
                column = ddl.new_column(spec, dialect)
                table.append_column(column)
                statements += ddl.add_column(table, column, dialect)
                continue
            old = found.sources.get(spec.name)
            if old is None:
                continue  # a column made by hand: its type is the user's choice
            new = ddl.SourceType.of(spec)
            change = ddl.compare(old, new)
            if change is ddl.Change.WIDER:
                column = ddl.new_column(spec, dialect)
                table.append_column(column)
                statements += ddl.widen_column(table, column, found.types[spec.name],
                                               dialect)
            elif change is not ddl.Change.SAME:
                how = "narrowed" if change is ddl.Change.NARROWER else "changed type"
                raise DataError(
                    f"{self.ctx.target}: column {spec.name} of {where} {how} on the source "
                    f"from {old} to {new} (seqno {seqno}): the source rewrote its rows "
                    "without row events, so the target may hold values the source no "
                    "longer has. Fix the column on the target (its type, its values and "
                    f"its comment '{new.comment()}'), then put the group online",
                    seqno=seqno)
        return statements

    def _column_name(self, reflected: str) -> str:
        # SQLAlchemy's MySQL reflection parses SHOW CREATE TABLE and keeps a backtick inside
        # a name doubled (`back``tick` comes back as "back``tick").
        return reflected.replace("``", "`") if self.ctx.dialect in MYSQL_FAMILY else reflected
