"""Spark for the tests' own reads of Delta tables.

Reads go to the stack's Spark Connect server (``connect_session``): it is warm and shared
by every worker, where a Spark JVM of each pytest worker cost its start-up and its own JIT
warm-up for every Delta code path. ``local_session`` is the process's own Spark JVM, for
what a Connect session cannot do (RDDs: ``spark_changes``); a warehouse applier running
in this process in local mode shares it (its own ``newSession()``)."""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from decimal import Decimal
from typing import Any, cast

from pyspark.sql import SparkSession

from consumers.warehouse.session import alive
from stack.services.spark import session
from thl_topics.values import format_time

_session: SparkSession | None = None
_remote: SparkSession | None = None


def connect_session() -> SparkSession:
    """This process's session on the stack's Spark Connect server, in UTC (TIMESTAMP
    columns read back as UTC wall time); the server must be up (``spark_connect``)."""
    global _remote
    # Made once: nothing stops it, and asking the server whether it lives would cost a
    # round trip per read.
    if _remote is None:
        from pyspark.sql.connect.session import SparkSession as RemoteSession

        from stack.services.spark import SMALL_BLOCKS
        from stack.services.spark_connect import SparkConnect

        # The Connect session class mirrors the classic one's API (pyspark's own typing).
        remote = cast(SparkSession, RemoteSession.builder.remote(
            f"{SparkConnect().url}/;session_id={uuid.uuid4()}").create())
        for key, value in {**SMALL_BLOCKS, "spark.sql.session.timeZone": "UTC"}.items():
            remote.conf.set(key, value)
        _remote = remote
    return _remote


def local_session() -> SparkSession:
    """The process's Spark session (started on first use, again if a test stopped it),
    in UTC so TIMESTAMP columns read back as UTC wall time."""
    global _session
    if _session is None or not alive(_session):
        _session = session("tests")
    spark = _session.newSession()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    return spark


def delta_rows(path: str, columns: tuple[str, ...] | list[str]) -> list[tuple[Any, ...]]:
    """Rows of a Delta table, columns in the given order, TIMESTAMPs as naive UTC."""
    spark = connect_session()
    frame = spark.read.format("delta").load(path)
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    exprs = []
    for c in columns:
        quoted = "`" + c.replace("`", "``") + "`"
        exprs.append(f"CAST({quoted} AS TIMESTAMP_NTZ) AS {quoted}"
                     if types[c] == "timestamp" else quoted)
    return [tuple(r) for r in frame.selectExpr(*exprs).collect()]


#: Columns of the type matrix (tests/integration/consumers/tables.py) that are BIT.
BIT_COLUMNS = ("b64", "b1", "b9")


def canonical(column: str, value: Any) -> Any:
    """One comparable form of a source value (PyMySQL) and its Delta twin."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value)
        return int.from_bytes(value, "big") if column in BIT_COLUMNS else value
    if isinstance(value, dt.timedelta):
        return format_time(value)
    if column == "f" and isinstance(value, float):
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and column in (
            "u_big", *BIT_COLUMNS) else format(value, "f")
    if column.startswith("dec") and isinstance(value, str):
        return format(Decimal(value), "f")
    return value
