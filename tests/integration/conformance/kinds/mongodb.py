"""The MongoDB kind, on FerretDB (the stack's MongoDB-wire server; no mongod can be had here).

Rows are compared in one strict form on both sides: integers, strings, bytes, dates and NULL
as themselves, and every value Python would compare loosely wrapped in a type of its own
(``Double`` by its hex digits, ``Dec128`` by its text, ``Bool``, ``Array`` and ``Document``
with ordered fields), so an int never equals a double or a bool, a decimal string keeps its
scale, bytes stay bytes.
``rows`` reads documents (tombstones left out, ``_id``/``_seqno`` ignored: they are
bookkeeping; so are fields of kept columns); ``normalize`` turns a source row into what the
documented type map (``consumers/mongodb/types.py``) must have stored, written here
independently of it.
FerretDB has no Decimal128: DECIMALs and integers beyond 64 bits are exact strings there.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from bson.decimal128 import Decimal128
from pymongo import MongoClient

from consumers.mongodb.config import MongoTarget
from consumers.mongodb.naming import escape_name, field_name, namespace
from consumers.mongodb.server import is_ferretdb
from consumers.mongodb.types import DELETED, RESERVED
from stack.service import Service

from ..tables import Table
from .base import Kind, Row

_INT64 = (-(1 << 63), (1 << 63) - 1)
#: Columns whose type the source value alone does not tell (pymysql returns BIT as bytes,
#: DATETIME(6) and DATETIME alike as datetime, SET and JSON as str).
_FLOAT32 = {("types", "f")}
_BITS = {("types", "b64"), ("types", "b1"), ("types", "b9")}
_MICROS = {("types", "dt6"), ("types", "ts6"), ("accounts", "updated")}
_TIME_DIGITS = {("types", "t6"): 6, ("types", "t0"): 0}
_SETS = {("types", "st")}
_JSONS = {("types", "j")}


@dataclass(frozen=True)
class Double:
    """A double, equal only to the same bits (never to an int)."""

    hex: str


@dataclass(frozen=True)
class Dec128:
    """A Decimal128, by its exact text."""

    text: str


@dataclass(frozen=True)
class Bool:
    value: bool


@dataclass(frozen=True)
class Array:
    items: tuple[Any, ...]


@dataclass(frozen=True)
class Document:
    """An embedded document: its fields in order."""

    fields: tuple[tuple[str, Any], ...]


def strict(value: Any) -> Any:
    """A stored (BSON) value in the strict comparable form."""
    if value is None or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, bool):
        return Bool(value)
    if isinstance(value, int):
        return int(value)  # int32 and int64 alike (Int64 is an int subclass)
    if isinstance(value, float):
        return Double(value.hex())
    if isinstance(value, Decimal128):
        return Dec128(str(value.to_decimal()))
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, list):
        return Array(tuple(strict(v) for v in value))
    if isinstance(value, dict):
        return Document(tuple((k, strict(v)) for k, v in value.items()))
    raise TypeError(f"unexpected value {type(value).__name__} {value!r}")


def _float32(value: float) -> float:
    # A FLOAT column holds 32 bits; MariaDB's text protocol prints 6 digits of it.
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _time(value: dt.timedelta, digits: int) -> str:
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    secs, frac = divmod(abs(micros), 1_000_000)
    hours, rest = divmod(secs, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{text}.{frac:06d}"[: len(text) + 1 + digits] if digits else text


def _json(value: Any) -> Any:
    if isinstance(value, float):
        return Double(value.hex())
    if isinstance(value, bool):
        return Bool(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, list):
        return Array(tuple(_json(v) for v in value))
    if isinstance(value, dict):
        return Document(tuple((k, _json(v)) for k, v in value.items()))
    return value  # str, None


def _integer(value: int) -> Any:
    # Beyond 64 bits: the exact decimal string (FerretDB has no Decimal128).
    return value if _INT64[0] <= value <= _INT64[1] else str(value)


def _column(field: str) -> str:
    """The column a (percent-encoded) field stands for (``naming.field_name`` backwards)."""
    return re.sub("%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), field)


def expected(table: str, column: str, value: Any) -> Any:
    """What the type map stores for a source value (as pymysql returns it)."""
    where = (table, column)
    if value is None:
        return None
    if where in _BITS:
        return _integer(int.from_bytes(value, "big"))
    if where in _FLOAT32:
        return Double(_float32(value).hex())
    if where in _TIME_DIGITS:
        return _time(value, _TIME_DIGITS[where])
    if where in _SETS:
        return Array(tuple(value.split(",")) if value else ())
    if where in _JSONS:
        return _json(json.loads(value))
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return Double(value.hex())
    if isinstance(value, Decimal):
        return format(value, "f")  # all scale digits, as a string (no Decimal128 here)
    if isinstance(value, dt.datetime):
        if where in _MICROS:
            return f"{value.year:04d}-{value.month:02d}-{value.day:02d} " \
                f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"
        return value.replace(tzinfo=None)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if isinstance(value, (str, bytes)):
        return value
    raise TypeError(f"unexpected source value {type(value).__name__} {value!r}")


class MongoDBKind(Kind):
    name = "mongodb"
    max_row_bytes = 16 * 1024 * 1024  # BSON
    key_change_stop = "the primary key of"
    key_gained_stop = "the primary key of"
    servers = ("ferretdb",)
    down = "ferretdb"
    keyless = True
    replay_safe = True
    #: JSON columns are stored as documents and written back as text: ``1.5e300`` comes
    #: back ``1.5e+300``, so a check of the type matrix reports it different (README).
    checks_json_text = False

    @property
    def port(self) -> int:
        port = self.servers_up["ferretdb"].port
        assert port is not None
        return port

    def client(self) -> MongoClient[dict[str, Any]]:
        return MongoClient(f"mongodb://127.0.0.1:{self.port}/", directConnection=True,
                           serverSelectionTimeoutMS=5000)

    def target(self, service: str) -> dict[str, Any]:
        # MariaDB's JSON is a LONGTEXT in the binlog: the type matrix's JSON column is named.
        return {"type": "mongodb", "url": f"mongodb://127.0.0.1:{self.port}/",
                "json_columns": ["*.types.j"]}

    def documents(self, schema: str, table: str) -> list[dict[str, Any]]:
        """The live documents of a table (tombstones left out)."""
        with self.client() as client:
            coll = client[schema][escape_name(table)]
            return list(coll.find({"_deleted": {"$exists": False}}))

    def rows(self, schema: str, table: Table) -> list[Row]:
        fields = [field_name(c, True) for c in table.columns]
        out = []
        for doc in self.documents(schema, table.name):
            missing = [f for f in fields if f not in doc]
            assert not missing, f"document {doc['_id']!r} lacks {missing}"
            # Other fields are columns kept by ``schema_changes: lenient`` (dropped, or the
            # old name of a renamed one), left out like a SQL kind's kept columns.
            out.append(tuple(strict(doc[f]) for f in fields))
        return out

    def normalize(self, table: Table, row: Row) -> Row:
        return tuple(expected(table.name, c, v) for c, v in zip(table.columns, row, strict=True))

    def columns(self, schema: str, name: str) -> set[str] | None:
        """The columns behind the fields of the table's live documents (the applier's own
        fields left out), through the applier's naming rule; None if no live document."""
        with self.client() as client:
            ns = namespace(MongoTarget(url=f"mongodb://127.0.0.1:{self.port}/"), "", schema,
                           name, is_ferretdb(client))
            coll = client[ns.database][ns.collection]
            fields = {f for doc in coll.find({DELETED: {"$exists": False}}) for f in doc}
        return {_column(f) for f in fields - RESERVED} or None

    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        with self.client() as client:
            for table in tables:
                client[schema].drop_collection(escape_name(table.name))

    def drop(self, schema: str, service: str) -> None:
        with self.client() as client:
            client.drop_database(schema)
            client.drop_database(f"tungsten_{service}")

    def server(self) -> Service:
        return self.servers_up["ferretdb"]

    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        with self.client() as client:
            done = client[schema][escape_name(table.name)].update_one(
                {"_id": key}, {"$set": {field_name(column, True): value}})
            assert done.matched_count == 1, (key, done.raw_result)
