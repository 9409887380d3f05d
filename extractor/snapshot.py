"""Reading existing rows of a source table the way the binlog would have carried them.

Column specs come from ``information_schema`` (the same type names, lengths and flags the
binlog path derives from table maps, ``extractor.row_values``), and values read by pymysql
are turned into the same THL forms, so a target cannot tell a provisioned row from a
replicated one: FLOAT narrowed to single precision, BIT as an integer, BINARY(n) without its
trailing 0x00 padding, zero dates as the text the server prints, TIMESTAMP in UTC.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from extractor.binlog_position import BinlogPosition
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import from_thl, to_thl

_TYPES = {
    "tinyint": "TINYINT", "smallint": "SMALLINT", "mediumint": "MEDIUMINT", "int": "INT",
    "bigint": "BIGINT", "float": "FLOAT", "double": "DOUBLE", "decimal": "DECIMAL",
    "date": "DATE", "time": "TIME", "datetime": "DATETIME", "timestamp": "TIMESTAMP",
    "year": "YEAR", "bit": "BIT", "enum": "ENUM", "set": "SET", "geometry": "GEOMETRY",
}
_TEXT = ("tinytext", "text", "mediumtext", "longtext", "json")
_BLOB = ("tinyblob", "blob", "mediumblob", "longblob")
_MEMBER = re.compile(r"'((?:[^']|'')*)'")

Convert = Callable[[Any], ThlValue]


@dataclass(frozen=True)
class SourceTable:
    """A source table as provisioning reads it: its specs and key, in column order."""

    schema: str
    table: str
    specs: list[ColumnSpec]
    converters: list[Convert]
    #: Primary key columns in key order (empty: the table has none).
    key: list[str]

    @property
    def lossy_definition(self) -> list[str]:
        """Columns whose ENUM/SET members the server reports with '?' in them: MariaDB's
        data dictionary is utf8mb3, so a 4-byte character there comes back as '?' (in
        SHOW CREATE TABLE too), and DDL made from it would not take the real values."""
        return [c.name for c in self.specs
                if c.type in ("ENUM", "SET") and any("?" in m for m in c.enum_values)]

    @property
    def qualified(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"

    def values(self, row: Sequence[Any]) -> list[ThlValue]:
        """One fetched row as THL values."""
        return [conv(v) for conv, v in zip(self.converters, row, strict=True)]


@dataclass(frozen=True)
class Chunk:
    """Rows of a table read in one consistent snapshot (``read_chunk``)."""

    #: The binlog position the snapshot is consistent with.
    position: BinlogPosition
    rows: list[list[ThlValue]]
    #: The key of the last row (None: no rows, or the table has no key).
    last: list[ThlValue] | None
    #: No rows after these: the table's last chunk.
    end: bool


def quote(name: str) -> str:
    """A MySQL identifier, quoted."""
    return "`" + name.replace("`", "``") + "`"


def _spec(col: dict[str, Any]) -> ColumnSpec:
    data_type = str(col["DATA_TYPE"]).lower()
    column_type = str(col["COLUMN_TYPE"]).lower()
    charset = col["CHARACTER_SET_NAME"]
    binary = data_type in ("binary", "varbinary", *_BLOB) or (
        data_type in ("char", "varchar") and charset in (None, "binary"))
    if data_type in ("char", "binary"):
        kind = "BINARY" if binary else "CHAR"
    elif data_type in ("varchar", "varbinary"):
        kind = "VARBINARY" if binary else "VARCHAR"
    elif data_type in _TEXT:
        kind = "TEXT"
    elif data_type in _BLOB:
        kind = "BLOB"
    else:
        kind = _TYPES.get(data_type, data_type.upper())
    length = scale = 0
    if kind == "DECIMAL":
        length, scale = int(col["NUMERIC_PRECISION"]), int(col["NUMERIC_SCALE"])
    elif kind in ("TIME", "DATETIME", "TIMESTAMP"):
        scale = int(col["DATETIME_PRECISION"] or 0)
    elif kind == "BIT":
        length = int(col["NUMERIC_PRECISION"])
    elif kind in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
        length = int(col["CHARACTER_OCTET_LENGTH"])
    members = [m.replace("''", "'") for m in _MEMBER.findall(column_type)] \
        if kind in ("ENUM", "SET") else []
    return ColumnSpec(
        index=int(col["ORDINAL_POSITION"]), name=str(col["COLUMN_NAME"]), type=kind,
        length=length, scale=scale, unsigned="unsigned" in column_type,
        blob=binary or kind in ("TEXT", "BLOB"), charset=None if binary else charset,
        primary_key=col["COLUMN_KEY"] == "PRI", enum_values=members)


def _converter(spec: ColumnSpec) -> Convert:
    if spec.type == "FLOAT":
        # The binlog carries FLOAT as 4 bytes; pymysql parses the server's decimal text.
        return lambda v: None if v is None else struct.unpack("<f", struct.pack("<f", v))[0]
    if spec.type == "BIT":
        return lambda v: None if v is None else to_thl(int.from_bytes(v, "big"))
    if spec.type == "BINARY":
        # The binlog strips BINARY(n)'s trailing 0x00 padding (from_thl pads it back).
        return lambda v: None if v is None else bytes(v).rstrip(b"\x00")
    if spec.blob and spec.charset is None:
        return lambda v: None if v is None else bytes(v)
    return to_thl


def describe(conn: pymysql.connections.Connection[Any], schema: str, table: str
             ) -> SourceTable:
    """The table's column specs (every column, invisible ones too) and value converters."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, "
            "NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_OCTET_LENGTH, CHARACTER_SET_NAME, "
            "COLUMN_KEY FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))
        rows = cur.fetchall()
    if not rows:
        raise LookupError(f"table {schema}.{table} does not exist on the source")
    specs = [_spec(r) for r in rows]
    # Key columns in the order of the primary key, whatever their place in the table.
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                    "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' "
                    "ORDER BY SEQ_IN_INDEX", (schema, table))
        order = [r[0] for r in cur.fetchall()]
    key = order or [c.name for c in specs if c.primary_key]
    return SourceTable(schema, table, specs, [_converter(s) for s in specs], key)


def chunk_query(table: SourceTable, after: Sequence[Any] | None, limit: int | None
                ) -> tuple[str, list[Any]]:
    """SELECT of the next chunk and its parameters: rows after the key ``after`` (None: from
    the start), in key order, at most ``limit``.

    ``(a, b) > (x, y)`` is spelled out as ``a >= x AND (a > x OR (a = x AND b > y))``: a row
    constructor comparison is not turned into an index range by every server version.
    """
    cols = ", ".join(quote(c.name) for c in table.specs)
    # Identifiers are quoted (quote()); every value is a bound parameter.
    sql = f"SELECT {cols} FROM {table.qualified}"  # noqa: S608
    params: list[Any] = []
    keys = table.key
    if keys and after is not None:
        ors = []
        for i in range(len(keys)):
            eqs = [f"{quote(k)} = %s" for k in keys[:i]]
            ors.append("(" + " AND ".join([*eqs, f"{quote(keys[i])} > %s"]) + ")")
            params.extend([*after[:i], after[i]])
        sql += f" WHERE {quote(keys[0])} >= %s AND ({' OR '.join(ors)})"
        params.insert(0, after[0])
    if keys:
        sql += " ORDER BY " + ", ".join(quote(k) for k in keys)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


def read_chunk(conn: pymysql.connections.Connection[Any], source: SourceTable,
               last: Sequence[ThlValue] | None, limit: int) -> Chunk:
    """The next ``limit`` rows after the key ``last`` (None: from the start; a table without
    a key: all of it), read in a consistent snapshot, with the binlog position MariaDB
    reports for that snapshot: the rows hold every transaction before it and none after."""
    keyless = not source.key
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = dict(cur.fetchall())
        at = BinlogPosition(str(status["Binlog_snapshot_file"]),
                            int(status["Binlog_snapshot_position"]))
        after = None if last is None else [
            from_thl(spec, v) for spec, v in zip(
                [next(c for c in source.specs if c.name == k) for k in source.key],
                last, strict=True)]
        sql, params = chunk_query(source, after, None if keyless else limit)
        cur.execute(sql, params)
        fetched = cur.fetchall()
        conn.commit()
    rows = [source.values(r) for r in fetched]
    end = keyless or len(rows) < limit
    key = None if not rows or keyless else [
        rows[-1][[c.name for c in source.specs].index(k)] for k in source.key]
    return Chunk(at, rows, key, end)
