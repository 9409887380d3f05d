"""The target kinds of the conformance suite: one module per kind, one line each here."""

from __future__ import annotations

import importlib

from .base import Kind

__all__ = ["KINDS", "Kind", "kind_class"]

#: kind name -> "module:class" (relative to this package).
KINDS: dict[str, str] = {
    "mariadb": "sql:MariaDBKind",
    "postgresql": "sql:PostgreSQLKind",
    "elasticsearch": "elasticsearch:ElasticsearchKind",
    "changes": "changes:ChangesKind",
    "changes_json": "changes:ChangesJsonKind",
    "mongodb": "mongodb:MongoDBKind",
    "warehouse": "warehouse:WarehouseKind",
}


def kind_class(name: str) -> type[Kind]:
    """The class of a registered kind."""
    module, cls = KINDS[name].split(":")
    found: type[Kind] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return found
