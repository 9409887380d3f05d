"""How the demo prepares and reads each kind of target: one module per target type.

A demo target knows how to empty the demo tables of a target that does not replay DDL (the
demo rebuilds its source tables on every run) and how to digest the demo tables it holds.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Protocol

from demo.compare import Digest
from demo.tables import DemoTable
from trep.config import ServiceConfig

#: target type -> "module:class"
_TARGETS: dict[str, str] = {
    "sql": "demo.targets.sql:SqlDemoTarget",
    "elasticsearch": "demo.targets.elasticsearch:ElasticsearchDemoTarget",
    "changes": "demo.targets.changes:ChangesDemoTarget",
    "mongodb": "demo.targets.mongodb:MongoDemoTarget",
    "warehouse": "demo.targets.warehouse:WarehouseDemoTarget",
}


class DemoTarget(Protocol):
    """One consumer group's target, as the demo sees it."""

    def rebuild(self) -> None:
        """Empty the demo tables (for a target that does not replay the source's DDL)."""

    def digests(self) -> dict[str, Digest]:
        """Row count and checksum of each demo table on the target."""


def demo_target(cfg: ServiceConfig, group: str, tables: Sequence[DemoTable]) -> DemoTarget:
    """The demo's view of consumer group ``group``."""
    target = cfg.consumers[group].target
    module, name = _TARGETS[target.type].split(":")
    found: DemoTarget = getattr(importlib.import_module(module), name)(cfg, group, tables)
    return found
