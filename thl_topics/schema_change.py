"""Schema changes as data: what a DDL statement did to which table, beside its text in the THL.

The extractor parses each DDL statement once (``extractor.ddl_parser``) and publishes the
result with the statement, so every consumer kind acts on the same reading of it instead of
parsing SQL text of a dialect it does not speak. A ``Statement`` whose ``schema_changes`` is
``None`` was not understood (or was written before THL schema v2): consumers then treat it
as they always did, by its text alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ChangeKind(StrEnum):
    """What one schema-change item does (the Avro enum ``SchemaChangeKind``)."""

    CREATE_TABLE = "create_table"
    DROP_TABLE = "drop_table"
    RENAME_TABLE = "rename_table"
    TRUNCATE = "truncate"
    ADD_COLUMN = "add_column"
    DROP_COLUMN = "drop_column"
    RENAME_COLUMN = "rename_column"
    MODIFY_COLUMN = "modify_column"
    CREATE_INDEX = "create_index"
    DROP_INDEX = "drop_index"


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """One change to one table, in statement order (an ALTER with three clauses is three).

    ``column`` is the column added, dropped or modified (for a rename, its old name);
    ``new_name`` the new column name of a rename_column or the new table name of a
    rename_table (``new_schema`` its schema). ``column_type`` is the type as the statement
    declares it, in MariaDB's spelling (``BIGINT UNSIGNED``, ``VARCHAR(64)``); the row events
    that follow carry the exact column specs as always.
    """

    kind: ChangeKind
    schema: str
    table: str
    column: str | None = None
    new_name: str | None = None
    new_schema: str | None = None
    column_type: str | None = None
    nullable: bool | None = None
    #: ``FIRST`` or ``AFTER <column>`` for a column placed other than last.
    position: str | None = None
    index: str | None = None
    columns: tuple[str, ...] = field(default_factory=tuple)
    unique: bool = False

    def to_avro(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "schema": self.schema, "table": self.table,
                "column": self.column, "new_name": self.new_name,
                "new_schema": self.new_schema, "column_type": self.column_type,
                "nullable": self.nullable, "position": self.position, "index": self.index,
                "columns": list(self.columns), "unique": self.unique}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> SchemaChange:
        return cls(**{**rec, "kind": ChangeKind(rec["kind"]), "columns": tuple(rec["columns"])})

    def describe(self) -> str:
        """One line for logs, errors and ``thl list``: ``add_column s.t.c BIGINT``."""
        name = f"{self.schema}.{self.table}"
        if self.kind is ChangeKind.RENAME_TABLE:
            return f"{self.kind} {name} -> {self.new_schema}.{self.new_name}"
        if self.kind is ChangeKind.RENAME_COLUMN:
            return f"{self.kind} {name}.{self.column} -> {self.new_name}"
        if self.kind in (ChangeKind.CREATE_INDEX, ChangeKind.DROP_INDEX):
            cols = f" ({', '.join(self.columns)})" if self.columns else ""
            return f"{self.kind} {name} {self.index}{cols}"
        if self.column is None:
            return f"{self.kind} {name}"
        parts = [f"{self.kind} {name}.{self.column}"]
        parts += [p for p in (self.column_type, self.position) if p]
        if self.nullable is False:
            parts.append("NOT NULL")
        return " ".join(parts)
