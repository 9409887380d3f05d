"""The two record layouts of change topics: Debezium's envelope and Tungsten's.

A ``Shape`` is one table's column layout as one format writes it (field names, types, key
fields); an envelope turns a row change into the key and value data of its records and gives
the Connect (JSON) and Avro schemas they follow.

Debezium (what Flink's ``debezium-json``/``debezium-avro-confluent``, Kafka Connect sinks and
Spark jobs written for Debezium read)::

    {"before": {...} | null, "after": {...} | null,
     "source": {"version", "connector": "tungsten", "name", "ts_ms", "snapshot", "db",
                "table", "server_id", "gtid", "file", "pos", "row", "thread",
                "seqno", "epoch", "event_id", ...},
     "op": "c" | "u" | "d" | "r", "ts_ms", "ts_us", "ts_ns",
     "transaction": {"id", "total_order", "data_collection_order"}}

Tungsten (seeds/001, "Applying to Kafka")::

    {"record": {...}, "_optype": "INSERT" | "UPDATE" | "DELETE", "_seqno", "_committime",
     "_source_schema", "_source_table"}

A key change is a delete of the old key (then its tombstone) and a create of the new one, as
Debezium does. Rows of a provisioned chunk (``trepctl provision``: a table's existing rows
read through the THL) are ``op: r`` with ``source.snapshot: "true"``, as Debezium's snapshot
reads; Tungsten's envelope calls them INSERT.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from consumers.changes.naming import avro_name, avro_namespace
from consumers.changes.types import ColumnType, Value, column_type
from thl_topics.event import ColumnSpec

#: Version written in ``source.version``.
VERSION = "tungsten-kafka-0.1"
SOURCE_NAME = "io.tungsten.replicator.Source"
BLOCK_NAME = "event.block"

Row = dict[str, Value]


class ShapeError(ValueError):
    """A table layout that this format cannot write (e.g. two columns, one Avro name)."""


@dataclass(frozen=True)
class Shape:
    """One table's layout in one format: what a Value and a Key record hold."""

    topic: str
    schema: str
    table: str
    #: Source column names, in column order.
    columns: tuple[str, ...]
    #: Field names as the format writes them (Avro: legal Avro names).
    fields: tuple[str, ...]
    types: tuple[ColumnType, ...]
    #: Indexes of the primary key columns (empty: no key).
    key: tuple[int, ...]
    #: Avro namespace of the topic (also the Connect schema name prefix).
    namespace: str

    @classmethod
    def of(cls, topic: str, schema: str, table: str, specs: Sequence[ColumnSpec],
           avro: bool) -> Shape:
        """The shape of a layout; ShapeError if two columns map to one field name."""
        columns = tuple(s.name for s in specs)
        fields = tuple(avro_name(c) for c in columns) if avro else columns
        if len(set(fields)) != len(fields):
            clash = sorted({f for f in fields if fields.count(f) > 1})
            raise ShapeError(f"columns of {schema}.{table} map to the same field name(s) "
                             f"{clash}")
        return cls(topic=topic, schema=schema, table=table, columns=columns, fields=fields,
                   types=tuple(column_type(s) for s in specs),
                   key=tuple(i for i, s in enumerate(specs) if s.primary_key),
                   namespace=avro_namespace(topic))

    def row(self, values: Sequence[Value]) -> Row:
        """A row image (converted values in column order) as the Value record's data."""
        return dict(zip(self.fields, values, strict=True))

    def key_of(self, values: Sequence[Value]) -> Row | None:
        """The Key record's data (None for a table without a key)."""
        if not self.key:
            return None
        return {self.fields[i]: values[i] for i in self.key}

    # -- schemas -------------------------------------------------------------------------------

    def _connect_field(self, i: int, optional: bool) -> dict[str, Any]:
        return {**self.types[i].connect(), "optional": optional, "field": self.columns[i]}

    def _avro_field(self, i: int, optional: bool) -> dict[str, Any]:
        avro = self.types[i].avro()
        field: dict[str, Any] = ({"name": self.fields[i], "type": ["null", avro],
                                  "default": None} if optional
                                 else {"name": self.fields[i], "type": avro})
        if self.fields[i] != self.columns[i]:
            field["tungsten.column"] = self.columns[i]
        return field

    def value_connect(self, optional: bool = True) -> dict[str, Any]:
        """Connect schema of the row struct (every column optional)."""
        return {"type": "struct", "fields": [self._connect_field(i, True)
                                             for i in range(len(self.columns))],
                "optional": optional, "name": f"{self.namespace}.Value"}

    def value_avro(self) -> dict[str, Any]:
        return {"type": "record", "name": "Value", "namespace": self.namespace,
                "fields": [self._avro_field(i, True) for i in range(len(self.columns))],
                "connect.name": f"{self.namespace}.Value"}

    def key_connect(self) -> dict[str, Any]:
        return {"type": "struct", "fields": [self._connect_field(i, False) for i in self.key],
                "optional": False, "name": f"{self.namespace}.Key"}

    def key_avro(self) -> dict[str, Any]:
        return {"type": "record", "name": "Key", "namespace": self.namespace,
                "fields": [self._avro_field(i, False) for i in self.key],
                "connect.name": f"{self.namespace}.Key"}


@dataclass(frozen=True)
class Origin:
    """Where a row change comes from: its THL event and its place in the transaction."""

    seqno: int
    epoch: int
    event_id: str
    source_id: str
    #: Source commit time, microseconds since the epoch (UTC).
    tstamp: int
    server_id: int
    gtid: str | None
    file: str
    pos: int
    thread: int
    #: The transaction id (GTID, else the first fragment's event id).
    txn_id: str


def origin_parts(event_id: str) -> tuple[str, int, int]:
    """(binlog file, offset, session) of a THL event id ``file:offset;session``."""
    where, _, session = event_id.partition(";")
    file, _, offset = where.rpartition(":")
    try:
        return file, int(offset), int(session or 0)
    except ValueError:
        return where, 0, 0


def committime(tstamp: int) -> str:
    """Tungsten's ``_committime`` text of a THL tstamp (UTC): ``2017-08-15 18:21:32.0``."""
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=tstamp)
    text = when.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{when.microsecond:06d}".rstrip("0").rstrip(".") + (
        ".0" if not when.microsecond else "")


Op = Literal["c", "u", "d", "r", "t"]
_OPTYPE = {"c": "INSERT", "u": "UPDATE", "d": "DELETE", "r": "INSERT", "t": "TRUNCATE"}


class DebeziumEnvelope:
    """Debezium's change event envelope (``<topic>.Envelope``)."""

    name = "debezium"

    def __init__(self, server_name: str) -> None:
        self.server_name = server_name

    def value(self, shape: Shape, op: Op, before: Row | None, after: Row | None,
              origin: Origin, row: int, total: int, table_order: int, now_us: int
              ) -> dict[str, Any]:
        """The value data of one row change."""
        ts_ms = origin.tstamp // 1000
        return {
            "before": before, "after": after,
            "source": {
                "version": VERSION, "connector": "tungsten", "name": self.server_name,
                "ts_ms": ts_ms, "snapshot": "true" if op == "r" else "false",
                "db": shape.schema, "sequence": None,
                "ts_us": origin.tstamp, "ts_ns": origin.tstamp * 1000, "table": shape.table,
                "server_id": origin.server_id, "gtid": origin.gtid, "file": origin.file,
                "pos": origin.pos, "row": row, "thread": origin.thread, "query": None,
                "seqno": origin.seqno, "epoch": origin.epoch, "event_id": origin.event_id,
                "source_id": origin.source_id,
            },
            "op": op, "ts_ms": now_us // 1000, "ts_us": now_us, "ts_ns": now_us * 1000,
            "transaction": {"id": origin.txn_id, "total_order": total,
                            "data_collection_order": table_order},
        }

    @staticmethod
    def _source_fields() -> list[tuple[str, str, bool]]:
        return [("version", "string", False), ("connector", "string", False),
                ("name", "string", False), ("ts_ms", "int64", False),
                ("snapshot", "string", True), ("db", "string", False),
                ("sequence", "string", True), ("ts_us", "int64", True),
                ("ts_ns", "int64", True), ("table", "string", True),
                ("server_id", "int64", False), ("gtid", "string", True),
                ("file", "string", False), ("pos", "int64", False), ("row", "int32", False),
                ("thread", "int64", True), ("query", "string", True),
                ("seqno", "int64", False), ("epoch", "int64", False),
                ("event_id", "string", False), ("source_id", "string", True)]

    def value_connect(self, shape: Shape) -> dict[str, Any]:
        """Connect schema of the envelope (JSON ``schema`` block)."""
        source = {"type": "struct", "fields": [
            {"type": t, "optional": o, "field": n} for n, t, o in self._source_fields()],
            "optional": False, "name": SOURCE_NAME, "field": "source"}
        return {"type": "struct", "fields": [
            {**shape.value_connect(), "field": "before"},
            {**shape.value_connect(), "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
            {"type": "struct", "fields": [
                {"type": "string", "optional": False, "field": "id"},
                {"type": "int64", "optional": False, "field": "total_order"},
                {"type": "int64", "optional": False, "field": "data_collection_order"}],
             "optional": True, "name": BLOCK_NAME, "version": 1, "field": "transaction"},
        ], "optional": False, "name": f"{shape.namespace}.Envelope", "version": 1}

    def value_avro(self, shape: Shape) -> dict[str, Any]:
        """Avro schema of the envelope, as Confluent's AvroConverter writes Debezium's."""
        avro_type = {"string": "string", "int64": "long", "int32": "int"}
        source = {"type": "record", "name": "Source", "namespace": "io.tungsten.replicator",
                  "fields": [
                      {"name": n, "type": ["null", avro_type[t]], "default": None} if o
                      else {"name": n, "type": avro_type[t]}
                      for n, t, o in self._source_fields()],
                  "connect.name": SOURCE_NAME}
        block = {"type": "record", "name": "block", "namespace": "event", "fields": [
            {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
            {"name": "data_collection_order", "type": "long"}],
            "connect.version": 1, "connect.name": BLOCK_NAME}
        return {"type": "record", "name": "Envelope", "namespace": shape.namespace,
                "fields": [
                    {"name": "before", "type": ["null", shape.value_avro()], "default": None},
                    {"name": "after", "type": ["null", "Value"], "default": None},
                    {"name": "source", "type": source},
                    {"name": "op", "type": "string"},
                    {"name": "ts_ms", "type": ["null", "long"], "default": None},
                    {"name": "ts_us", "type": ["null", "long"], "default": None},
                    {"name": "ts_ns", "type": ["null", "long"], "default": None},
                    {"name": "transaction", "type": ["null", block], "default": None}],
                "connect.version": 1, "connect.name": f"{shape.namespace}.Envelope"}


class TungstenEnvelope:
    """Tungsten Replicator's Kafka message: the row plus ``_optype``, ``_seqno``, ..."""

    name = "tungsten"

    def value(self, shape: Shape, op: Op, before: Row | None, after: Row | None,
              origin: Origin, row: int, total: int, table_order: int, now_us: int
              ) -> dict[str, Any]:
        if after is None and before is None:  # a truncate: the record's fields all null
            after = {name: None for name in shape.fields}
        return {"record": after if after is not None else before,
                "_optype": _OPTYPE[op], "_seqno": origin.seqno,
                "_committime": committime(origin.tstamp),
                "_source_schema": shape.schema, "_source_table": shape.table}

    def value_connect(self, shape: Shape) -> dict[str, Any]:
        return {"type": "struct", "fields": [
            {**shape.value_connect(optional=False), "field": "record"},
            {"type": "string", "optional": False, "field": "_optype"},
            {"type": "int64", "optional": False, "field": "_seqno"},
            {"type": "string", "optional": False, "field": "_committime"},
            {"type": "string", "optional": False, "field": "_source_schema"},
            {"type": "string", "optional": False, "field": "_source_table"},
        ], "optional": False, "name": f"{shape.namespace}.Message", "version": 1}

    def value_avro(self, shape: Shape) -> dict[str, Any]:
        return {"type": "record", "name": "Message", "namespace": shape.namespace,
                "fields": [
                    {"name": "record", "type": shape.value_avro()},
                    {"name": "_optype", "type": "string"},
                    {"name": "_seqno", "type": "long"},
                    {"name": "_committime", "type": "string"},
                    {"name": "_source_schema", "type": "string"},
                    {"name": "_source_table", "type": "string"}],
                "connect.version": 1, "connect.name": f"{shape.namespace}.Message"}


Envelope = DebeziumEnvelope | TungstenEnvelope
