"""The target tables of a SQL applier: reflected, and made and evolved from the THL.

A table is reflected once (its columns' types, generated columns, and the source types that
``create_tables`` recorded in column comments) and then bound to as it is. With
``create_tables`` (PostgreSQL and Oracle) a table the target lacks is made from the row
image of its first change (``ddl.new_table``), and a later row image with new columns, or
with a source type widened, alters it first; a column dropped or narrowed on the source
follows ``schema_changes`` (kept; a narrowed one keeps its wider type), and one changed to a
type the target column cannot hold stops the group. The DDL runs
through the applier (``run_ddl``): in the block's transaction on PostgreSQL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.mysql import SET as MYSQL_SET
from sqlalchemy.engine.interfaces import ReflectedColumn

from consumers.errors import DataError
from consumers.metrics import ConsumerMetrics
from consumers.naming import UnfitName
from consumers.schema_changes import SchemaChangeMode
from consumers.sql import ddl
from consumers.sql.config import MYSQL_FAMILY
from consumers.sql.context import TargetContext
from consumers.sql.naming import SqlNames, exact
from consumers.sql.statements import SetShape, TargetTable
from consumers.sql.types import UnmappedType
from thl_topics.event import ColumnSpec, RowChange

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.sql.applier")

#: Runs DDL statements for a table (``where``) at a seqno.
RunDdl = Callable[[Sequence[ddl.Ddl], str, int], None]
_T = TypeVar("_T")


class TargetTables:
    """The tables of one target as the applier binds to them, by source schema and table."""

    def __init__(self, ctx: TargetContext, create_tables: bool, statements_applied: bool,
                 run_ddl: RunDdl, names: SqlNames,
                 metrics: ConsumerMetrics | None = None,
                 schema_changes: SchemaChangeMode = "lenient") -> None:
        self.ctx = ctx
        #: Where triggers found on target tables are reported (status and metric).
        self.metrics = metrics or ConsumerMetrics.disabled()
        #: What a column dropped on the source does here (``consumers.schema_changes``).
        self.schema_changes: SchemaChangeMode = schema_changes
        #: Columns kept after the source dropped them (logged once): (table, column).
        self._kept: set[tuple[str, str]] = set()
        self.create_tables = create_tables
        #: Statement events are replayed on this target (its tables come from them).
        self.statements_applied = statements_applied
        self._run_ddl = run_ddl
        self.names = names
        self._tables: dict[tuple[str, str], TargetTable] = {}
        #: Moves on whenever a table is bound anew or forgotten: what was worked out for
        #: a bound table (``RowWriter``'s layouts) holds while it stays the same.
        self.generation = 0
        #: Tables whose triggers were reported (once per process).
        self._trigger_checked: set[tuple[str, str]] = set()

    def clear(self) -> None:
        """Forget every table (reflected again when next used)."""
        self._tables.clear()
        self.generation += 1

    def get(self, change: RowChange, specs: Sequence[ColumnSpec], seqno: int) -> TargetTable:
        """The target table of a row change (made or evolved with ``create_tables``)."""
        key = (change.schema, change.table)
        known = found = self._tables.get(key)
        # Bound columns are keyed by source name: only a column not bound yet (a new one,
        # or one whose cut name this process has not met) needs the naming rule again.
        if found is None or (self.names.rule is not None
                             and any(s.name not in found.types for s in specs)):
            aliases = self._named(lambda: self.names.aliases(specs), key, seqno) \
                if self.names.rule is not None else {}
            found = self._bind(key, specs, aliases, found, seqno)
        if self.create_tables:
            found = self._evolve(found, specs, seqno)
        if found is not known:
            self._tables[key] = found
            self.generation += 1
        return found

    def _bind(self, key: tuple[str, str], specs: Sequence[ColumnSpec],
              aliases: dict[str, str], known: TargetTable | None, seqno: int) -> TargetTable:
        """The table of a source table, reflected (or made), its columns keyed by source
        names (``aliases`` adds to those of ``known``, the table as bound before)."""
        if known is not None:
            found = self.reflect(known.schema or "", known.name, {**known.aliases, **aliases})
            if found is not None:
                return found
        schema, table = self._named(lambda: self.names.table(*key), key, seqno)
        found = self.reflect(schema, table, aliases)
        if found is None:
            if not self.create_tables:
                hint = "" if self.statements_applied else (
                    "; create it there (statements are not applied to this target)")
                raise DataError(f"table {schema}.{table} does not exist on "
                                f"{self.ctx.target}" + hint, seqno=seqno)
            found = self._create(schema, table, specs, aliases, seqno)
        self._report_triggers(schema, table)
        return found

    def lookup(self, schema: str, table: str, specs: Sequence[ColumnSpec]
               ) -> TargetTable | None:
        """The target table of a source table for reading (checks), as it is now."""
        key = (schema, table)
        aliases = self._named(lambda: self.names.aliases(specs), key, -1)
        return self.reflect(*self._named(lambda: self.names.table(*key), key, -1), aliases)

    def target_name(self, schema: str, table: str, seqno: int) -> tuple[str, str]:
        """The target schema and table of a source table (the row path's naming rule)."""
        return self._named(lambda: self.names.table(schema, table), (schema, table), seqno)

    def column_name(self, schema: str, table: str, column: str, seqno: int) -> str:
        """The target name of a source column of ``schema.table``."""
        return self._named(lambda: self.names.identifier(column, "column"), (schema, table),
                           seqno)

    def keep(self, qualified: str, column: str) -> None:
        """A column of the target table ``qualified`` kept beside a renamed one: the row
        path need not log it as dropped."""
        self._kept.add((qualified, column))

    def _named(self, name: Callable[[], _T], key: tuple[str, str], seqno: int) -> _T:
        """A name of the naming rule; a data error where the target cannot hold it."""
        try:
            return name()
        except UnfitName as exc:
            raise DataError(f"{self.ctx.target}: table {key[0]}.{key[1]}: {exc}"
                            + (f" (seqno {seqno})" if seqno >= 0 else ""), seqno=seqno) from exc

    def _report_triggers(self, schema: str, table: str) -> None:
        """Warn of triggers on a target table: they fire on every row the applier writes,
        and the row images already carry what the source's triggers did."""
        if (schema, table) in self._trigger_checked or self.ctx.dialect == "oracle":
            return
        self._trigger_checked.add((schema, table))
        found = self._triggers(schema, table)
        self.metrics.target_triggers(f"{schema}.{table}", [
            f"{name} ({timing} {event})" for name, timing, event in found])
        for name, timing, event in found:
            log.warning("%s: table %s.%s has trigger %s (%s %s): it fires on every row this "
                        "group applies, on top of what the source's row images carry; drop "
                        "it on the target unless that is meant", self.ctx.target, schema,
                        table, name, timing, event)

    def collapsible(self, found: TargetTable, columns: Sequence[ColumnSpec],
                    keys: Sequence[ColumnSpec]) -> tuple[str, ...] | None:
        """The primary key (source column names, in order) by which changes of this layout
        may be collapsed to net effects (``consumers.sql.collapse``); None if they may not.

        They may where the row images' key is the target's primary key, after images hold
        every column the target writes (a delete and an insert must not lose one), and the
        target table has no triggers (they would fire for the upsert, not the change) and,
        on MySQL-family targets, no other unique key (``ON DUPLICATE KEY UPDATE`` matches
        any)."""
        layout = (tuple(c.name for c in columns), tuple((c.name, c.primary_key) for c in keys))
        if layout in found.collapsible:
            return found.collapsible[layout]
        shape = found.shape = found.shape or self._shape(found)
        image_key = {c.name for c in columns if c.primary_key}
        before_key = {c.name for c in keys if c.primary_key}
        written = {n for n in found.types if n not in found.generated}
        ok = (bool(shape.primary_key) and not shape.triggers
              and (image_key or before_key) == set(shape.primary_key)
              and (not before_key or before_key == set(shape.primary_key))
              and (not image_key or written <= {c.name for c in columns})
              and not (self.ctx.dialect in MYSQL_FAMILY and shape.other_unique))
        found.collapsible[layout] = shape.primary_key if ok else None
        return found.collapsible[layout]

    def _shape(self, found: TargetTable) -> SetShape:
        """The primary key, other unique keys and triggers of a target table, read."""
        source = {target: name for name, target in found.aliases.items()}

        def names(columns: Sequence[str | None]) -> tuple[str, ...]:
            return tuple(source.get(n, n) for n in
                         (self._column_name(c) for c in columns if c is not None))

        name, schema = exact(found.name), exact(found.schema)
        try:
            inspector = sa.inspect(self.ctx.db)
            key = names(inspector.get_pk_constraint(name, schema=schema)
                        .get("constrained_columns") or [])
            unique = {names(i["column_names"]) for i in inspector.get_indexes(name, schema=schema)
                      if i.get("unique")}
            unique |= {names(u["column_names"]) for u in
                       inspector.get_unique_constraints(name, schema=schema)}
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the keys of {found.qualified}") from exc
        return SetShape(key, tuple(sorted(u for u in unique if set(u) != set(key))),
                        bool(self._triggers(found.schema or "", found.name)))

    def _triggers(self, schema: str, table: str) -> list[sa.Row[tuple[str, str, str]]]:
        """The triggers of a target table: name, timing, event."""
        try:
            return list(self.ctx.db.execute(sa.text(
                "SELECT trigger_name, action_timing, event_manipulation FROM "
                "information_schema.triggers WHERE event_object_schema = :s AND "
                "event_object_table = :t ORDER BY trigger_name"), {"s": schema, "t": table}))
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the triggers of {schema}.{table}") from exc

    def reflect(self, schema: str, table: str, aliases: dict[str, str] | None = None
                ) -> TargetTable | None:
        """The target table ``schema.table`` as it is now, its columns keyed by source names
        (``aliases``: source name -> target name); None if there is none."""
        try:
            inspector = sa.inspect(self.ctx.db)
            columns = inspector.get_columns(exact(table), schema=exact(schema))
            # From the same SHOW CREATE TABLE, cached by the inspector.
            default_charset = inspector.get_table_options(
                exact(table), schema=exact(schema)).get("mysql_default charset") \
                if self.ctx.dialect in MYSQL_FAMILY else None
        except sa_exc.NoSuchTableError:
            return None
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the columns of {schema}.{table}") from exc
        aliases = aliases or {}
        source = {target: name for name, target in aliases.items()}

        def key(column: ReflectedColumn) -> str:
            name = self._column_name(column["name"])
            return source.get(name, name)

        sources = {}
        for c in columns:
            recorded = ddl.SourceType.from_comment(c.get("comment"))
            if recorded is not None:
                sources[key(c)] = recorded
        # Empty on other dialects: their reflected types have no character set.
        utf8 = {key(c): width for c in columns
                if (width := utf8_text(c["type"], default_charset))}
        return TargetTable(
            schema, table, {key(c): c["type"] for c in columns},
            {key(c): bool(c["computed"].get("persisted", True))
             for c in columns if c.get("computed")}, sources, aliases=dict(aliases),
            utf8_text=utf8)

    def _create(self, schema: str, name: str, specs: Sequence[ColumnSpec],
                aliases: dict[str, str], seqno: int) -> TargetTable:
        """Create the table of a row image (and its schema); the table as reflected."""
        where = f"{schema}.{name}"
        try:
            table = ddl.new_table(schema, name, specs, self.ctx.db.dialect, aliases)
        except UnmappedType as exc:
            raise DataError(f"{self.ctx.target}: cannot create {where} for seqno {seqno}: {exc}; "
                            "create it by hand", seqno=seqno) from exc
        self._run_ddl(ddl.create_statements(table, self.ctx.db.dialect), where, seqno)
        log.info("%s: created %s from the THL (seqno %d): %d column(s)%s", self.ctx.target, where,
                 seqno, len(specs), ", primary key " + ", ".join(
                     s.name for s in specs if s.primary_key) if any(
                     s.primary_key for s in specs) else ", no primary key")
        if aliases:
            log.info("%s: %s: column names cut to the target's identifier length: %s",
                     self.ctx.target, where, ", ".join(f"{s} -> {t}" for s, t in aliases.items()))
        return self._reflected(schema, name, aliases, seqno)

    def _reflected(self, schema: str, name: str, aliases: dict[str, str], seqno: int
                   ) -> TargetTable:
        found = self.reflect(schema, name, aliases)
        if found is None:
            raise DataError(f"{self.ctx.target}: {schema}.{name} is not there right after it was "
                            f"created or altered (seqno {seqno})", seqno=seqno)
        return found

    def _evolve(self, found: TargetTable, specs: Sequence[ColumnSpec], seqno: int
                ) -> TargetTable:
        """Bring a table made from the THL in line with a row image's columns.

        New columns are added and widened source types widen their column, in the block's
        transaction; a column dropped on the source follows ``schema_changes``; one narrowed
        keeps its wider column (a stop with ``exception``, or where the old type does not
        hold every new value, e.g. signed to unsigned).
        """
        layout = tuple((s.name, s.type.upper(), s.length, s.scale, s.unsigned, s.primary_key)
                       for s in specs)
        if layout in found.checked:
            return found
        where = found.qualified
        names = {s.name for s in specs}
        dropped = [c for c in found.sources if c not in names and c not in found.generated]
        table = ddl.new_table(found.schema, found.name, [], self.ctx.db.dialect, {})
        statements = self._dropped(found, dropped, table, seqno) if dropped else []
        try:
            statements += self._alterations(found, specs, table, seqno)
        except UnmappedType as exc:
            raise DataError(f"{self.ctx.target}: cannot evolve {where} for seqno {seqno}: {exc}",
                            seqno=seqno) from exc
        statements += self._key_change(found, specs, table, seqno)
        if statements:
            self._run_ddl(statements, where, seqno)
            log.info("%s: %s follows the source at seqno %d: %s", self.ctx.target, where, seqno,
                     "; ".join(ddl.ddl_text(statements, self.ctx.db.dialect)))
            if any(isinstance(s, str) and " ADD " in s for s in statements):
                log.warning("%s: %s: columns added at seqno %d are NULL in the rows the "
                            "target already had, whatever DEFAULT the source gave them",
                            self.ctx.target, where, seqno)
            found = self._reflected(found.schema or "", found.name, found.aliases, seqno)
        found.checked.add(layout)
        return found

    def _key_change(self, found: TargetTable, specs: Sequence[ColumnSpec], table: sa.Table,
                    seqno: int) -> list[ddl.Ddl]:
        """The DDL that gives the table the row image's primary key where the source's key
        changed (``ALTER TABLE ... DROP PRIMARY KEY, ADD PRIMARY KEY``, which has no row
        events): rows are found by the new key either way, but the old key's constraint
        would refuse a new row that repeats an old key value. A table without a primary
        key on the target (made by hand) is left as it is; ``exception`` stops."""
        new = [s.name for s in specs if s.primary_key]
        if not new:
            return []
        shape = found.shape = found.shape or self._shape(found)
        if not shape.primary_key or set(shape.primary_key) == set(new):
            return []
        where = found.qualified
        if self.schema_changes == "exception":
            raise DataError(
                f"{self.ctx.target}: the primary key of {where} is ({', '.join(shape.primary_key)})"
                f" and the row image of seqno {seqno} has ({', '.join(new)}): the key changed on "
                "the source; schema_changes: exception stops at every schema change. Change "
                "the key on the target, then put the group online", seqno=seqno)
        try:
            constraint = sa.inspect(self.ctx.db).get_pk_constraint(
                exact(found.name), schema=exact(found.schema)).get("name")
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the primary key of {where}") from exc
        log.info("%s: the primary key of %s changed on the source from (%s) to (%s) at seqno "
                 "%d", self.ctx.target, where, ", ".join(shape.primary_key), ", ".join(new),
                 seqno)
        return ddl.change_primary_key(table, constraint, [found.aliases.get(n, n) for n in new],
                                      self.ctx.db.dialect)

    def _dropped(self, found: TargetTable, dropped: list[str], table: sa.Table, seqno: int
                 ) -> list[ddl.Ddl]:
        """Columns the row images no longer have (dropped on the source): kept, NULL in the
        rows written from then on (``schema_changes: lenient``, ``ignore``), dropped
        (``evolve``), or a stop (``exception``, or a key column)."""
        where = found.qualified
        try:
            key = sa.inspect(self.ctx.db).get_pk_constraint(
                exact(found.name), schema=exact(found.schema))
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"reading the primary key of {where}") from exc
        target_keys = set(key.get("constrained_columns") or [])
        keys = [c for c in dropped if found.aliases.get(c, c) in target_keys]
        if self.schema_changes == "exception" or keys:
            why = (f"key column(s) {', '.join(keys)} cannot be kept or dropped" if keys else
                   "schema_changes: exception stops at every schema change")
            raise DataError(
                f"{self.ctx.target}: {where} has column(s) {', '.join(dropped)} that the row "
                f"image of seqno {seqno} lacks (dropped on the source); {why}. Change the "
                "table on the target, then put the group online, or set schema_changes: "
                "lenient (keeps the column) or evolve (drops it)", seqno=seqno)
        if self.schema_changes == "evolve":
            return [s for c in dropped
                    for s in ddl.drop_column(table, found.aliases.get(c, c),
                                             self.ctx.db.dialect)]
        new = [c for c in dropped if (where, c) not in self._kept]
        if new:
            self._kept.update((where, c) for c in new)
            log.info("%s: %s keeps column(s) %s, dropped on the source (seqno %d): NULL in the "
                     "rows written from now on (schema_changes: %s)", self.ctx.target, where,
                     ", ".join(new), seqno, self.schema_changes)
        return []

    def _alterations(self, found: TargetTable, specs: Sequence[ColumnSpec], table: sa.Table,
                     seqno: int) -> list[ddl.Ddl]:
        """The DDL that adds the columns ``found`` lacks and widens the ones whose source type
        widened; DataError for a column changed on the source to a type the target column
        cannot hold."""
        where = found.qualified
        dialect = self.ctx.db.dialect
        statements: list[ddl.Ddl] = []
        for spec in specs:
            if spec.name not in found.types:
                column = ddl.new_column(spec, dialect, found.aliases.get(spec.name))
                table.append_column(column)
                statements += ddl.add_column(table, column, dialect)
                continue
            old = found.sources.get(spec.name)
            if old is None:
                continue  # a column made by hand: its type is the user's choice
            new = ddl.SourceType.of(spec)
            change = ddl.compare(old, new)
            if change is ddl.Change.WIDER:
                column = ddl.new_column(spec, dialect, found.aliases.get(spec.name))
                table.append_column(column)
                statements += ddl.widen_column(table, column, found.types[spec.name],
                                               dialect)
            elif change is ddl.Change.NARROWER and self.schema_changes != "exception" \
                    and ddl.compare(new, old) is ddl.Change.WIDER:
                # The column holds every value of the narrower type: written on (issue 28).
                log.warning(
                    "%s: column %s of %s narrowed on the source from %s to %s (seqno %d): "
                    "the target column stays as it is. Values the source rewrote without row "
                    "events (rounded, cut) keep their old form here: `trepctl check` finds "
                    "them", self.ctx.target, spec.name, where, old, new, seqno)
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


#: MariaDB/MySQL character sets of UTF-8 and the widest character they hold, in bytes.
_UTF8_CHARSETS = {"utf8mb4": 4, "utf8mb3": 3, "utf8": 3}


def utf8_text(column_type: sa.types.TypeEngine[object], default_charset: str | None) -> int:
    """4 or 3 where a reflected MariaDB/MySQL column is CHAR, VARCHAR or a TEXT type in
    utf8mb4 or utf8mb3 (its own character set, else the table's ``default_charset``), 0
    for any other column (ENUM and SET included: their strings are names, not text)."""
    if not isinstance(column_type, sa.String) or isinstance(column_type, sa.Enum | MYSQL_SET):
        return 0
    # NCHAR and NVARCHAR (national) are utf8mb3 in MariaDB and MySQL.
    national = "utf8mb3" if getattr(column_type, "national", False) else None
    charset = getattr(column_type, "charset", None) or national or default_charset or ""
    return _UTF8_CHARSETS.get(charset.lower(), 0)
