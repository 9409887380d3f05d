"""How source names become SQL identifiers: schema, table and column names on the target.

Names stay as the source has them, quoted by the dialect, wherever the target can hold them.
MySQL-family targets hold every name MariaDB accepts (64 characters). PostgreSQL holds 63
bytes and Oracle 128 and quoted identifiers there take any other character but U+0000 (and
``"`` on Oracle): a longer name, such as a 64-character MariaDB column of PostgreSQL, follows
the one naming rule (``consumers.naming``): cut at a character boundary and ended with ``_``
and 8 hex digits of the SHA-256 of the whole name, so two long names that share their start
stay apart. ``names: strict`` stops the group on such a name instead.

The applier keys a target table's columns by their source names (``TargetTable.aliases``),
so statements, checks and read-back use source names and reach the cut ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import quoted_name

from consumers.naming import NamePolicy, StoreRule
from consumers.sql.config import MYSQL_FAMILY
from thl_topics.event import ColumnSpec


@overload
def exact(name: str) -> quoted_name: ...


@overload
def exact(name: None) -> None: ...


def exact(name: str | None) -> quoted_name | None:
    """A target schema or table name as the applier makes it (quoted: ``ddl.new_table``),
    for reflection: Oracle's would look a lowercase name up in upper case."""
    return None if name is None else quoted_name(name, True)


def identifier_rule(dialect: Dialect) -> StoreRule | None:
    """What a quoted identifier holds on this dialect; None where every source name fits."""
    if dialect.name in MYSQL_FAMILY:
        return None
    if dialect.name == "oracle":
        return StoreRule("Oracle identifier", dialect.max_identifier_length,
                         takes=lambda ch: ch not in '"\x00')
    return StoreRule(f"{dialect.name} identifier", dialect.max_identifier_length)


class SqlNames:
    """The target identifiers of source names on one target (UnfitName if strict refuses)."""

    def __init__(self, dialect: Dialect, policy: NamePolicy) -> None:
        self.rule = identifier_rule(dialect)
        self.policy = policy
        self._fitted: dict[str, str] = {}

    def identifier(self, name: str, what: str) -> str:
        """The identifier of a source schema, table or column name (``what`` for errors)."""
        if self.rule is None:
            return name
        found = self._fitted.get(name)
        if found is None:
            found = self._fitted[name] = self.rule.name(name, self.policy, f"{what} {name!r}")
        return found

    def table(self, schema: str, table: str) -> tuple[str, str]:
        """The target schema and table of a source table."""
        return self.identifier(schema, "schema"), self.identifier(table, f"table of {schema}")

    def aliases(self, specs: Sequence[ColumnSpec]) -> dict[str, str]:
        """The columns of ``specs`` whose target name differs: source name -> target name."""
        if self.rule is None:
            return {}
        out = {}
        for spec in specs:
            name = self.identifier(spec.name, "column")
            if name != spec.name:
                out[spec.name] = name
        return out
