"""The demo on the warehouse target: Delta tables read back with Spark.

``customers`` is a mirror (primary key); ``audit_log`` has no key, so the warehouse keeps
its append-only history (``keyless: history``) and the demo rebuilds the table's current
rows from it: every I/UI adds its row image once, every D/UD removes one, which is exactly
the source table (duplicates included).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from consumers.warehouse.config import WarehouseTarget
from consumers.warehouse.naming import table_ref
from demo.compare import Digest, digest
from demo.tables import SCHEMA, DemoTable
from stack.services.spark import session
from trep.config import ServiceConfig


class WarehouseDemoTarget:
    """A warehouse consumer group's Delta tables."""

    def __init__(self, cfg: ServiceConfig, group: str, tables: Sequence[DemoTable]) -> None:
        target = cfg.consumers[group].target
        if not isinstance(target, WarehouseTarget):
            raise TypeError(f"{group} is not a warehouse group")
        self.target = target
        self.tables = tables

    def rebuild(self) -> None:
        """Drop the demo tables' Delta folders: the group starts after the marker and
        recreates them from the row changes."""
        for table in self.tables:
            ref = table_ref(self.target, SCHEMA, table.name)
            if ref.path is not None and ref.path.startswith("file://"):
                shutil.rmtree(urlparse(ref.path).path, ignore_errors=True)

    def digests(self) -> dict[str, Digest]:
        spark = session("demo")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        found = {}
        for table in self.tables:
            ref = table_ref(self.target, SCHEMA, table.name)
            frame = spark.read.format("delta").load(ref.path)
            cols = [f"`{c}`" for c in table.columns]
            if "_op" in frame.columns:
                # history -> current rows: +1 per inserted image, -1 per deleted one
                signed = frame.selectExpr(
                    *cols, "CASE WHEN _op IN ('I', 'UI') THEN 1 ELSE -1 END AS _n")
                counts = signed.groupBy(*cols).sum("_n").withColumnRenamed("sum(_n)", "_n")
                rows: list[Any] = []
                for r in counts.collect():
                    rows.extend([tuple(r)[:-1]] * int(r["_n"]))
            else:
                rows = [tuple(r) for r in frame.selectExpr(*cols).collect()]
            found[table.name] = digest(rows)
        return found
