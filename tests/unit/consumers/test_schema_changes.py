"""The one schema-change policy: what each mode does with each kind of change."""

from __future__ import annotations

import pytest

from consumers.schema_changes import Action, action, stopped
from thl_topics.schema_change import ChangeKind, SchemaChange


def _change(kind: ChangeKind) -> SchemaChange:
    return SchemaChange(kind, "shop", "items", column="c" if "column" in kind else None)


@pytest.mark.parametrize(("kind", "evolve", "lenient", "exception"), [
    (ChangeKind.CREATE_TABLE, Action.APPLY, Action.APPLY, Action.APPLY),
    (ChangeKind.TRUNCATE, Action.APPLY, Action.APPLY, Action.STOP),
    (ChangeKind.DROP_COLUMN, Action.APPLY, Action.KEEP, Action.STOP),
    (ChangeKind.DROP_TABLE, Action.APPLY, Action.KEEP, Action.STOP),
    (ChangeKind.ADD_COLUMN, Action.APPLY, Action.APPLY, Action.STOP),
    (ChangeKind.MODIFY_COLUMN, Action.APPLY, Action.APPLY, Action.STOP),
    (ChangeKind.RENAME_TABLE, Action.APPLY, Action.APPLY, Action.STOP),
])
def test_each_mode_decides_each_change(kind: ChangeKind, evolve: Action, lenient: Action,
                                       exception: Action) -> None:
    change = _change(kind)
    assert action("evolve", change) is evolve
    assert action("lenient", change) is lenient
    assert action("exception", change) is exception
    assert action("ignore", change) is Action.IGNORE


def test_a_stop_names_the_change_the_seqno_and_the_way_on() -> None:
    error = stopped(_change(ChangeKind.DROP_COLUMN), 42, "e42")
    assert error.seqno == 42 and error.event_id == "e42"
    assert "schema change at seqno 42: drop_column shop.items.c" in str(error)
    assert "schema_changes: lenient (or evolve)" in str(error)
