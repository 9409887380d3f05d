"""The target kinds of the conformance suite: one module per kind, one line each here."""

from __future__ import annotations

import importlib

from .base import Kind

__all__ = ["KINDS", "ONLY", "Kind", "kind_class"]

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

#: Kinds that run only some tests: changes_json differs from changes only in how records
#: are serialized (JSON and the Tungsten envelope), so it runs the tests that read records
#: back; the runtime's restarts, crashes and outages are the same code as for changes.
ONLY: dict[str, frozenset[str]] = {
    "changes_json": frozenset({
        "test_inserts_updates_deletes_and_key_changes",
        "test_table_without_a_key_is_applied_or_refused_as_declared",
        "test_type_matrix_round_trips", "test_hostile_identifiers",
        "test_consistency_check_finds_the_changed_range",
        "test_rows_larger_than_a_kafka_record",
        "test_a_changed_primary_key_is_followed_or_stops_the_group"}),
}


def kind_class(name: str) -> type[Kind]:
    """The class of a registered kind."""
    module, cls = KINDS[name].split(":")
    found: type[Kind] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return found
