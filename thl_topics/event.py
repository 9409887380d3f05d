"""The THL event: one fragment of one source transaction, as the whole system sees it.

This is the Python face of ``schemas/avro/thl_event.v2.avsc``; the codec turns it into bytes
and back. Field names follow Tungsten's THL (seeds/000 Table E.1) on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias

from thl_topics.schema_change import SchemaChange

#: A value as it travels in the THL: the Avro union null | long | double | string | bytes.
ThlValue: TypeAlias = int | float | str | bytes | None


class RowAction(StrEnum):
    """What a row change does to its table."""

    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


@dataclass(slots=True)
class ColumnSpec:
    """A column of a row change, with enough type information to rebuild its values."""

    index: int
    name: str
    type: str
    length: int = 0
    scale: int = 0
    unsigned: bool = False
    nullable: bool = True
    blob: bool = False
    charset: str | None = None
    primary_key: bool = False
    enum_values: list[str] = field(default_factory=list)

    def to_avro(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "type": self.type, "length": self.length,
            "scale": self.scale, "unsigned": self.unsigned, "nullable": self.nullable,
            "blob": self.blob, "charset": self.charset, "primary_key": self.primary_key,
            "enum_values": self.enum_values,
        }

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ColumnSpec:
        return cls(**rec)


@dataclass(slots=True)
class Statement:
    """A statement event (DDL, statement-format DML) with the session OPTIONS it ran under."""

    sql: str
    default_schema: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    error_code: int = 0
    timestamp: int | None = None
    #: What the statement did to tables, as the extractor read it; None: not understood
    #: (or not DDL the extractor parses, or written before THL schema v2).
    schema_changes: list[SchemaChange] | None = None

    def to_avro(self) -> dict[str, Any]:
        return {"sql": self.sql, "default_schema": self.default_schema,
                "options": self.options, "error_code": self.error_code,
                "timestamp": self.timestamp,
                "schema_changes": None if self.schema_changes is None
                else [c.to_avro() for c in self.schema_changes]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> Statement:
        changes = rec.get("schema_changes")  # absent in v1 records
        return cls(sql=rec["sql"], default_schema=rec["default_schema"],
                   options=rec["options"], error_code=rec["error_code"],
                   timestamp=rec["timestamp"],
                   schema_changes=None if changes is None
                   else [SchemaChange.from_avro(c) for c in changes])


@dataclass(slots=True)
class RowChange:
    """Rows of one table and one action, in source order.

    ``column_values`` are after images (INSERT, UPDATE), ``key_values`` before images
    (UPDATE, DELETE); each row is a list in the order of its specs.
    """

    action: RowAction
    schema: str
    table: str
    column_specs: list[ColumnSpec] = field(default_factory=list)
    key_specs: list[ColumnSpec] = field(default_factory=list)
    column_values: list[list[ThlValue]] = field(default_factory=list)
    key_values: list[list[ThlValue]] = field(default_factory=list)

    @property
    def row_count(self) -> int:
        return max(len(self.column_values), len(self.key_values))

    def to_avro(self) -> dict[str, Any]:
        return {
            "action": self.action.value, "schema": self.schema, "table": self.table,
            "column_specs": [c.to_avro() for c in self.column_specs],
            "key_specs": [c.to_avro() for c in self.key_specs],
            "column_values": self.column_values, "key_values": self.key_values,
        }


DataItem: TypeAlias = Statement | RowChange


@dataclass(slots=True)
class ThlEvent:
    """One fragment of a source transaction (seqno, fragno), stamped with the epoch."""

    seqno: int
    epoch: int
    source_id: str
    event_id: str
    shard_id: str
    tstamp: int
    fragno: int = 0
    last_frag: bool = True
    metadata: dict[str, str] = field(default_factory=dict)
    data: list[DataItem] = field(default_factory=list)

    @property
    def row_count(self) -> int:
        """The rows of the fragment's row changes."""
        rows = 0
        for item in self.data:  # no generator: once an event, on every consumer's thread
            if isinstance(item, RowChange):
                rows += max(len(item.column_values), len(item.key_values))
        return rows

    def to_avro(self) -> dict[str, Any]:
        """The record fastavro writes (unions of records are tagged by name)."""
        return {
            "seqno": self.seqno, "fragno": self.fragno, "last_frag": self.last_frag,
            "epoch": self.epoch, "source_id": self.source_id, "event_id": self.event_id,
            "shard_id": self.shard_id, "tstamp": self.tstamp, "metadata": self.metadata,
            "data": [
                (_STATEMENT if isinstance(item, Statement) else _ROW_CHANGE, item.to_avro())
                for item in self.data
            ],
        }

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ThlEvent:
        """Rebuild from a record read with ``return_record_name=True``."""
        data: list[DataItem] = []
        for name, item in rec["data"]:
            if name == _STATEMENT:
                data.append(Statement.from_avro(item))
            else:
                data.append(RowChange(
                    action=RowAction(item["action"]), schema=item["schema"],
                    table=item["table"],
                    column_specs=[ColumnSpec.from_avro(c) for c in item["column_specs"]],
                    key_specs=[ColumnSpec.from_avro(c) for c in item["key_specs"]],
                    column_values=item["column_values"], key_values=item["key_values"],
                ))
        return cls(
            seqno=rec["seqno"], fragno=rec["fragno"], last_frag=rec["last_frag"],
            epoch=rec["epoch"], source_id=rec["source_id"], event_id=rec["event_id"],
            shard_id=rec["shard_id"], tstamp=rec["tstamp"], metadata=rec["metadata"],
            data=data,
        )


_STATEMENT = "tungsten.thl.Statement"
_ROW_CHANGE = "tungsten.thl.RowChange"
