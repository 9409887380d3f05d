"""Which cascading foreign keys a fragment carries (the catalog itself is read in
tests/integration/extractor/test_foreign_keys.py)."""

from __future__ import annotations

from typing import Any

import pytest

from extractor import foreign_keys
from extractor.foreign_keys import ForeignKeyCatalog
from extractor.snapshot import SourceTable
from thl_topics.event import ColumnSpec, RowAction, RowChange
from thl_topics.foreign_keys import CascadeRules, ForeignKey, Referential

KEYS = [
    ForeignKey("fk_lines", ("s", "orders"), ("id",), ("s", "lines"), ("order_id",),
               Referential.CASCADE, Referential.RESTRICT),
    ForeignKey("fk_parts", ("s", "lines"), ("id",), ("s", "parts"), ("line_id",),
               Referential.CASCADE, Referential.NO_ACTION),
    ForeignKey("fk_other", ("s", "users"), ("id",), ("s", "sessions"), ("user_id",),
               Referential.SET_NULL, Referential.RESTRICT),
]


class _Conn:
    def close(self) -> None:
        pass


@pytest.fixture
def catalog(monkeypatch: pytest.MonkeyPatch) -> ForeignKeyCatalog:
    monkeypatch.setattr(foreign_keys, "read_foreign_keys", lambda conn: list(KEYS))

    def describe(conn: Any, schema: str, table: str) -> SourceTable:
        return SourceTable(schema, table, [ColumnSpec(1, f"{table}_col", "INT")], [], [])
    monkeypatch.setattr(foreign_keys, "describe", describe)
    return ForeignKeyCatalog(_Conn)  # type: ignore[arg-type]


def _change(action: RowAction, table: str) -> RowChange:
    return RowChange(action, "s", table)


def test_a_parent_delete_carries_its_rules_transitively(catalog: ForeignKeyCatalog) -> None:
    found = catalog.rules_for([_change(RowAction.DELETE, "orders")])
    assert found is not None
    assert [r.name for r in found.rules] == ["fk_lines", "fk_parts"]
    assert set(found.tables) == {("s", "lines"), ("s", "parts")}
    assert CascadeRules.decode(found.encode()) == found


def test_inserts_children_and_unchecked_changes_carry_nothing(
        catalog: ForeignKeyCatalog) -> None:
    assert catalog.rules_for([_change(RowAction.INSERT, "orders")]) is None
    assert catalog.rules_for([_change(RowAction.DELETE, "parts")]) is None
    unchecked = _change(RowAction.DELETE, "orders")
    assert catalog.rules_for([unchecked], {id(unchecked)}) is None


def test_the_catalog_is_read_once_until_a_ddl(catalog: ForeignKeyCatalog) -> None:
    for _ in range(3):
        catalog.rules_for([_change(RowAction.UPDATE, "users")])
    assert catalog.reads == 1
    catalog.changed()
    catalog.rules_for([_change(RowAction.UPDATE, "users")])
    assert catalog.reads == 2
