"""The warehouse kind: Delta tables materialized by the stack's Spark Connect server (its
groups are thin clients, in the test process or spawned, so a restart costs no JVM); the
test process reads the tables back through the same server (``sparks.connect_session``).

Declared: tables without a primary key are refused (the default ``keyless: refuse``), every
write is seqno-guarded (replay-safe), and consistency checks read the Delta tables back.
"Target down" for an in-process Spark means the storage it writes is unavailable: the
staging location is replaced by a plain file (root ignores permissions, so chmod would prove
nothing) and put back after 30 s; the group retries with backoff and converges.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from consumers.warehouse.merge import HISTORY_META, MIRROR_META
from consumers.warehouse.naming import path_safe
from consumers.warehouse.storage import is_delta_table
from stack.service import Service
from stack.services.spark_connect import SparkConnect
from stack.settings import RUN_DIR

from ...sparks import canonical, connect_session, delta_rows
from ..tables import Table
from .base import Kind, Row

BASE = RUN_DIR / "warehouse-conformance"


class StagingOutage:
    """``stop()`` makes the staging location unwritable, ``start()`` brings it back."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.aside = staging.with_name(staging.name + ".away")

    def stop(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        self.staging.rename(self.aside)
        self.staging.write_text("the staging location is down (conformance test)\n")

    def start(self) -> None:
        self.staging.unlink(missing_ok=True)
        if self.aside.exists():
            self.aside.rename(self.staging)


class WarehouseKind(Kind):
    name = "warehouse"
    servers = ("spark", "spark_connect")
    keyless = False
    replay_safe = True
    #: A spawned trep-run opens a Connect session (seconds), but 2 busy cores are slow.
    startup_s = 120.0
    #: A MERGE per table per block costs seconds of Spark: fewer, larger blocks.
    block_ms = 1000

    def __init__(self, servers: dict[str, Service]) -> None:
        super().__init__(servers)
        self.spark = cast(SparkConnect, servers["spark_connect"]).group_spark()
        self.location: Path | None = None

    def target(self, service: str) -> dict[str, Any]:
        self.location = BASE / service
        return {"type": "warehouse", "location": str(self.location),
                "spark": self.spark}

    def path(self, schema: str, table: Table) -> str:
        """The Delta table of ``schema.table`` (a file:// URI)."""
        return self._path(schema, table.name)

    def _path(self, schema: str, name: str) -> str:
        assert self.location is not None
        return f"file://{self.location}/{path_safe(schema)}/{path_safe(name)}"

    def columns(self, schema: str, name: str) -> set[str] | None:
        """The Delta table's columns but the warehouse's own (``_seqno``...)."""
        path = self._path(schema, name)
        if not is_delta_table(connect_session(), path):
            return None
        own = {n for n, _ in (*MIRROR_META, *HISTORY_META)}
        return {f.name for f in connect_session().read.format("delta").load(path).schema.fields
                if f.name not in own}

    def rows(self, schema: str, table: Table) -> list[Row]:
        found = delta_rows(self.path(schema, table), table.columns)
        return [tuple(canonical(c, v) for c, v in zip(table.columns, r, strict=True))
                for r in found]

    def normalize(self, table: Table, row: Row) -> Row:
        return tuple(canonical(c, v) for c, v in zip(table.columns, row, strict=True))

    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        assert self.location is not None
        shutil.rmtree(self.location / path_safe(schema), ignore_errors=True)

    def drop(self, schema: str, service: str) -> None:
        shutil.rmtree(BASE / service, ignore_errors=True)

    def server(self) -> Service:
        assert self.location is not None
        return cast(Service, StagingOutage(self.location / "staging"))

    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        """One value changed in the Delta table (what a check would have to find)."""
        quoted = "`" + column.replace("`", "``") + "`"
        key_col = "`" + table.key[0].replace("`", "``") + "`"
        connect_session().sql(f"UPDATE delta.`{self.path(schema, table)}` SET {quoted} = "
                              f"'{value}' WHERE {key_col} = {int(key)}").collect()
