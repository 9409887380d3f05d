"""Foreign keys that cascade, as the THL carries them (event metadata ``foreign_keys``).

InnoDB carries out ``ON DELETE CASCADE``, ``SET NULL`` and ``ON UPDATE CASCADE`` inside the
storage engine: the binlog holds the parent's row change and nothing of the child rows it
changed. So the extractor reads the source's foreign keys from its catalog and attaches to
each fragment holding a DELETE or UPDATE of a referenced table the rules that change may
set off: the table's cascading foreign keys and, transitively, those of the child tables they
reach, with each child table's column specs. A target that does not keep the same foreign
keys itself carries the cascade out from these (``consumers.cascades``).

The metadata value is JSON::

    {"rules": [{"name": "fk_lines_order", "parent": ["shop", "orders"],
                "parent_columns": ["id"], "child": ["shop", "lines"],
                "child_columns": ["order_id"], "on_delete": "CASCADE",
                "on_update": "RESTRICT"}, ...],
     "tables": [["shop", "lines", [<column spec>, ...]], ...]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from thl_topics.event import ColumnSpec


class Referential(StrEnum):
    """What a foreign key does to its child rows when the parent row goes or changes key
    (MariaDB's ``information_schema.REFERENTIAL_CONSTRAINTS`` spelling)."""

    CASCADE = "CASCADE"
    SET_NULL = "SET NULL"
    RESTRICT = "RESTRICT"
    NO_ACTION = "NO ACTION"
    SET_DEFAULT = "SET DEFAULT"

    @property
    def acts(self) -> bool:
        """The action changes child rows (the others refuse, or are refused by InnoDB)."""
        return self in (Referential.CASCADE, Referential.SET_NULL)


TableName = tuple[str, str]


@dataclass(frozen=True)
class ForeignKey:
    """One foreign key: ``child(child_columns)`` references ``parent(parent_columns)``."""

    name: str
    parent: TableName
    parent_columns: tuple[str, ...]
    child: TableName
    child_columns: tuple[str, ...]
    on_delete: Referential
    on_update: Referential

    @property
    def cascades(self) -> bool:
        return self.on_delete.acts or self.on_update.acts

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "parent": list(self.parent),
                "parent_columns": list(self.parent_columns), "child": list(self.child),
                "child_columns": list(self.child_columns),
                "on_delete": self.on_delete.value, "on_update": self.on_update.value}

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> ForeignKey:
        return cls(name=rec["name"], parent=(rec["parent"][0], rec["parent"][1]),
                   parent_columns=tuple(rec["parent_columns"]),
                   child=(rec["child"][0], rec["child"][1]),
                   child_columns=tuple(rec["child_columns"]),
                   on_delete=Referential(rec["on_delete"]),
                   on_update=Referential(rec["on_update"]))


@dataclass
class CascadeRules:
    """The cascading foreign keys an event's changes may set off, with the column specs of
    every child table they reach."""

    rules: list[ForeignKey] = field(default_factory=list)
    tables: dict[TableName, list[ColumnSpec]] = field(default_factory=dict)

    def of_parent(self, table: TableName) -> list[ForeignKey]:
        """The rules whose parent is ``table``, in catalog order."""
        return [r for r in self.rules if r.parent == table]

    def encode(self) -> str:
        return json.dumps({
            "rules": [r.to_json() for r in self.rules],
            "tables": [[s, t, [c.to_avro() for c in specs]]
                       for (s, t), specs in self.tables.items()]},
            separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> CascadeRules:
        raw = json.loads(text)
        return cls(rules=[ForeignKey.from_json(r) for r in raw["rules"]],
                   tables={(s, t): [ColumnSpec.from_avro(c) for c in specs]
                           for s, t, specs in raw["tables"]})
