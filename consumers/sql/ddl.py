"""Target tables made and evolved from THL column specs (pure: no connection needed).

A table the THL names and the target lacks is created with the type map's columns
(``consumers.sql.types``) and the THL's primary key; a column a row image has and the table
lacks is added (nullable). Every column made this way carries its source type in its
comment (``tungsten source type: VARCHAR(200 bytes)``), so a later row image can be compared
with what the column was made for: a wider source type widens the column, a narrower or
different one is refused (the source rewrote its rows without a row event, so the target
would silently differ), and a column the row image no longer has was dropped on the
source. Columns without such a comment (tables written by hand) are left as they are.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import (
    CreateColumn,
    CreateSchema,
    CreateTable,
    DropTable,
    SetColumnComment,
)

from consumers.sql.types import SqlType, column_type, integer_range
from thl_topics.event import ColumnSpec

#: A DDL element, or SQL text built with the dialect's identifier quoting (run it with
#: ``exec_driver_sql`` and no parameters: the quoting doubles ``%`` for pyformat drivers).
Ddl = str | sa.schema.ExecutableDDLElement

COMMENT_PREFIX = "tungsten source type: "
_SIGNATURE = re.compile(
    r"(?P<type>[A-Z][A-Z0-9_]*)(?:\((?P<a>\d+)(?: bytes)?(?:,(?P<b>\d+))?\))?"
    r"(?P<unsigned> UNSIGNED)?")
_TEMPORAL = frozenset({"TIME", "DATETIME", "TIMESTAMP"})
_DECIMAL = frozenset({"DECIMAL", "NUMERIC", "NEWDECIMAL"})
_LENGTHS = frozenset({"CHAR", "VARCHAR", "BINARY", "VARBINARY", "BIT"})
#: Types whose values any later length or member list still holds on the target.
_UNBOUNDED = frozenset({"TEXT", "BLOB", "JSON", "ENUM", "SET", "GEOMETRY"})
#: Kinds of types a column may move between, widening (CHAR(5) -> VARCHAR(9) -> TEXT).
_FAMILIES = {"CHAR": "text", "VARCHAR": "text", "TEXT": "text",
             "BINARY": "binary", "VARBINARY": "binary", "BLOB": "binary",
             "TINYINT": "integer", "SMALLINT": "integer", "MEDIUMINT": "integer",
             "INT": "integer", "INTEGER": "integer", "BIGINT": "integer",
             "FLOAT": "float", "DOUBLE": "float", "REAL": "float",
             "ENUM": "members", "SET": "members",
             "DECIMAL": "decimal", "NUMERIC": "decimal", "NEWDECIMAL": "decimal"}


@dataclass(frozen=True)
class SourceType:
    """What a THL column spec says about the source column's type, as a comment keeps it."""

    type: str
    length: int = 0
    scale: int = 0
    unsigned: bool = False

    @classmethod
    def of(cls, spec: ColumnSpec) -> SourceType:
        kind = spec.type.upper()
        kind = {"INTEGER": "INT", "NUMERIC": "DECIMAL", "NEWDECIMAL": "DECIMAL",
                "REAL": "DOUBLE"}.get(kind, kind)
        if kind in _DECIMAL:
            return cls(kind, spec.length, spec.scale)
        if kind in _TEMPORAL:
            return cls(kind, 0, spec.scale)
        if kind in _LENGTHS:
            return cls(kind, spec.length)
        return cls(kind, unsigned=spec.unsigned and _FAMILIES.get(kind) == "integer")

    def __str__(self) -> str:
        if self.type in _DECIMAL:
            text = f"{self.type}({self.length},{self.scale})"
        elif self.type in _TEMPORAL:
            text = f"{self.type}({self.scale})"
        elif self.type in ("CHAR", "VARCHAR"):
            # MySQL declares these in characters; the THL knows their bytes.
            text = f"{self.type}({self.length} bytes)"
        elif self.type in _LENGTHS:
            text = f"{self.type}({self.length})"
        else:
            text = self.type
        return text + (" UNSIGNED" if self.unsigned else "")

    def comment(self) -> str:
        """The column comment that records this source type."""
        return COMMENT_PREFIX + str(self)

    @classmethod
    def from_comment(cls, comment: str | None) -> SourceType | None:
        """The source type a column comment records; None for any other comment."""
        if not comment or not comment.startswith(COMMENT_PREFIX):
            return None
        found = _SIGNATURE.fullmatch(comment[len(COMMENT_PREFIX):])
        if found is None:
            return None
        kind, a, b = found["type"], int(found["a"] or 0), int(found["b"] or 0)
        unsigned = bool(found["unsigned"])
        if kind in _DECIMAL:
            return cls(kind, a, b)
        if kind in _TEMPORAL:
            return cls(kind, 0, a)
        return cls(kind, a, unsigned=unsigned)


class Change(enum.Enum):
    """How a column's source type moved since the target column was made for it."""

    SAME = "same"
    #: Every old value fits the new type: the target column can be widened.
    WIDER = "wider"
    #: Some old values do not fit: the source rewrote them without row events.
    NARROWER = "narrower"
    #: Another kind of type altogether.
    OTHER = "other"


def compare(old: SourceType, new: SourceType) -> Change:
    """How ``new`` relates to ``old`` (both source types of one column)."""
    if old == new:
        return Change.SAME
    family = _FAMILIES.get(old.type)
    if family is None or family != _FAMILIES.get(new.type):
        # Same non-family type (DATETIME(0) -> DATETIME(6), BIT(4) -> BIT(8)) or a new kind.
        if old.type != new.type:
            return Change.OTHER
        return _order(old.length <= new.length and old.scale <= new.scale)
    if family == "members":
        return Change.SAME if old.type == new.type else Change.OTHER
    if family == "integer":
        old_low, old_high = integer_range(_spec(old))
        new_low, new_high = integer_range(_spec(new))
        return _order(new_low <= old_low and old_high <= new_high)
    if family == "float":
        return _order(new.type == "DOUBLE")
    if family == "decimal":
        return _order(new.length - new.scale >= old.length - old.scale
                      and new.scale >= old.scale)
    # text, binary: a length in bytes, TEXT/BLOB unbounded.
    if new.type in _UNBOUNDED:
        return Change.WIDER
    if old.type in _UNBOUNDED:
        return Change.NARROWER
    return _order(new.length >= old.length)


def _order(fits: bool) -> Change:
    return Change.WIDER if fits else Change.NARROWER


def _spec(source: SourceType) -> ColumnSpec:
    return ColumnSpec(0, "-", source.type, source.length, source.scale, source.unsigned)


# -- statements -----------------------------------------------------------------------------

def new_column(spec: ColumnSpec, dialect: Dialect, name: str | None = None, *,
               key: bool = False) -> sa.Column[object]:
    """The column made for a THL column (named ``name`` if its source name is not the
    target's, ``consumers.sql.naming``), its source type in its comment."""
    # autoincrement=False: SQLAlchemy would make a lone integer key SERIAL on PostgreSQL (a
    # sequence the source never had, and a 4-byte column whatever the mapped type, so a
    # BIGINT UNSIGNED key of 18446744073709551615 was out of range).
    return sa.Column(name or spec.name, column_type(spec, dialect.name), nullable=not key,
                     autoincrement=False, comment=SourceType.of(spec).comment())


def new_table(schema: str | None, name: str, specs: Sequence[ColumnSpec],
              dialect: Dialect, aliases: dict[str, str] | None = None) -> sa.Table:
    """The table made for the columns of a row image, keyed by the THL's primary key.

    Key columns come in the order the THL lists them (the THL flags key columns; it
    carries no separate key order). Without key columns the table has no primary key.
    """
    aliases = aliases or {}
    keys = [aliases.get(s.name, s.name) for s in specs if s.primary_key]
    columns = [new_column(s, dialect, aliases.get(s.name), key=s.primary_key) for s in specs]
    constraints = [sa.PrimaryKeyConstraint(*keys)] if keys else []
    return sa.Table(name, sa.MetaData(), *columns, *constraints, schema=schema, quote=True,
                    quote_schema=True)


def create_statements(table: sa.Table, dialect: Dialect) -> list[Ddl]:
    """CREATE SCHEMA IF NOT EXISTS (PostgreSQL), CREATE TABLE, one COMMENT per column."""
    out: list[Ddl] = []
    if table.schema is not None and dialect.name == "postgresql":
        # An Oracle schema is a user: it must exist already.
        out.append(CreateSchema(table.schema, if_not_exists=True))
    out.append(CreateTable(table))
    out += [SetColumnComment(c) for c in table.columns]
    return out


def _table_name(table: sa.Table, dialect: Dialect) -> str:
    return str(dialect.identifier_preparer.format_table(table))


def add_column(table: sa.Table, column: sa.Column[object], dialect: Dialect) -> list[Ddl]:
    """ALTER TABLE ADD COLUMN (nullable) and its comment."""
    spec = str(CreateColumn(column).compile(dialect=dialect))
    name = _table_name(table, dialect)
    add = f"ALTER TABLE {name} ADD ({spec})" if dialect.name == "oracle" else \
        f"ALTER TABLE {name} ADD COLUMN {spec}"
    return [add, SetColumnComment(column)]


def drop_column(table: sa.Table, column: str, dialect: Dialect) -> list[Ddl]:
    """ALTER TABLE DROP COLUMN (a column dropped on the source, ``schema_changes: evolve``)."""
    quoted = dialect.identifier_preparer.quote(column)
    return [f"ALTER TABLE {_table_name(table, dialect)} DROP COLUMN {quoted}"]


def rename_table(table: sa.Table, schema: str, name: str, dialect: Dialect
                 ) -> list[Ddl]:
    """The DDL that makes ``table`` the table ``schema.name`` with its rows (a source
    ``RENAME TABLE``): ``ALTER TABLE ... RENAME TO`` and, where the schema changes,
    ``SET SCHEMA`` (PostgreSQL, the schema made first as a new table's is). Oracle renames
    in its schema only (``ALTER TABLE s.a RENAME TO b``): a move to another schema is a
    ValueError there."""
    preparer = dialect.identifier_preparer
    out: list[Ddl] = []
    moved = table
    if schema != table.schema:
        if dialect.name != "postgresql":
            raise ValueError(f"{dialect.name} cannot move a table to another schema "
                             f"({table.schema} -> {schema})")
        moved = new_table(schema, table.name, [], dialect)
        out.append(CreateSchema(moved.schema or schema, if_not_exists=True))
        out.append(f"ALTER TABLE {_table_name(table, dialect)} SET SCHEMA "
                   f"{preparer.quote_identifier(schema)}")
    if name != table.name:
        # Forced quotes, as ``new_table`` makes the table (``quote=True``).
        out.append(f"ALTER TABLE {_table_name(moved, dialect)} RENAME TO "
                   f"{preparer.quote_identifier(name)}")
    return out


def rename_column(table: sa.Table, old: str, new: str, dialect: Dialect) -> list[Ddl]:
    """ALTER TABLE RENAME COLUMN (the same text on PostgreSQL and Oracle)."""
    quote = dialect.identifier_preparer.quote
    return [f"ALTER TABLE {_table_name(table, dialect)} RENAME COLUMN {quote(old)} TO "
            f"{quote(new)}"]


def change_primary_key(table: sa.Table, constraint: str | None, columns: Sequence[str],
                       dialect: Dialect) -> list[Ddl]:
    """The primary key made of ``columns`` instead of the one named ``constraint`` (None:
    the table has none): a key changed on the source."""
    name, quote = _table_name(table, dialect), dialect.identifier_preparer.quote
    add = f"ADD PRIMARY KEY ({', '.join(quote(c) for c in columns)})"
    if dialect.name in ("mysql", "mariadb"):
        return [f"ALTER TABLE {name} " + ("DROP PRIMARY KEY, " if constraint else "") + add]
    drop = [f"ALTER TABLE {name} DROP CONSTRAINT {quote(constraint)}"] if constraint else []
    return [*drop, f"ALTER TABLE {name} {add}"]


def allow_null(table: sa.Table, column: str, dialect: Dialect) -> list[Ddl]:
    """Make a column nullable (a column kept after the source renamed or dropped it)."""
    name, quoted = _table_name(table, dialect), dialect.identifier_preparer.quote(column)
    if dialect.name == "oracle":
        return [f"ALTER TABLE {name} MODIFY ({quoted} NULL)"]
    return [f"ALTER TABLE {name} ALTER COLUMN {quoted} DROP NOT NULL"]


def copy_column(table: sa.Table, old: str, new: str) -> sa.Update:
    """``UPDATE t SET new = old WHERE new IS NULL``: a renamed column kept beside its new
    one fills it for the rows already there (a replay leaves the rows it filled alone)."""
    t = sa.Table(table.name, sa.MetaData(), sa.Column(old, sa.types.NullType()),
                 sa.Column(new, sa.types.NullType()), schema=table.schema, quote=True,
                 quote_schema=True)
    return sa.update(t).values({t.c[new]: t.c[old]}).where(t.c[new].is_(None))


def drop_table(table: sa.Table) -> list[Ddl]:
    """DROP TABLE (a table dropped on the source, ``schema_changes: evolve``); the caller
    checks that it exists: Oracle before 23 has no ``IF EXISTS``."""
    return [DropTable(table)]


def widen_column(table: sa.Table, column: sa.Column[object], old: SqlType,
                 dialect: Dialect) -> list[Ddl]:
    """ALTER the column to its new (wider) type and record the new source type."""
    name = _table_name(table, dialect)
    quoted = dialect.identifier_preparer.format_column(column)
    new_type = column.type.compile(dialect=dialect)
    out: list[Ddl] = []
    if new_type != _compiled(old, dialect):
        if dialect.name == "oracle":
            out.append(f"ALTER TABLE {name} MODIFY ({quoted} {new_type})")
        else:
            using = ""
            if type(old).__name__.upper() == "BIT":
                # A bit string cast to a longer BIT pads on the right (another number);
                # through BIGINT it keeps its value.
                using = f" USING CAST(CAST({quoted} AS BIGINT) AS {new_type})"
            out.append(f"ALTER TABLE {name} ALTER COLUMN {quoted} TYPE {new_type}{using}")
    out.append(SetColumnComment(column))
    return out


def ddl_text(statements: Sequence[Ddl], dialect: Dialect) -> list[str]:
    """The statements as the target receives them (for logs and tests)."""
    return [s if isinstance(s, str) else str(s.compile(dialect=dialect)) for s in statements]


def _compiled(type_: SqlType, dialect: Dialect) -> str:
    try:
        return str(type_.compile(dialect=dialect))
    except sa.exc.CompileError:
        return ""
