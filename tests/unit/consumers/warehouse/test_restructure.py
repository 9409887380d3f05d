"""What a renamed table or column does to a Delta table, from the state found there (every
step harmless when replayed)."""

from __future__ import annotations

import pytest

from consumers.warehouse.restructure import (
    ColumnStep,
    TableStep,
    column_step,
    renamed_key,
    table_step,
)

COLUMNS = {"id": ("id", "int"), "name": ("name", "string"), "_seqno": ("_seqno", "bigint")}
RENAMED = {"id": ("id", "int"), "label": ("label", "string"), "_seqno": ("_seqno", "bigint")}
COPIED = {**COLUMNS, "label": ("label", "string")}


@pytest.mark.parametrize(("old", "new", "step"), [
    (True, False, TableStep.MOVE), (False, True, TableStep.DONE),
    (False, False, TableStep.ABSENT), (True, True, TableStep.BOTH)])
def test_table_step(old: bool, new: bool, step: TableStep) -> None:
    assert table_step(old, new) is step


@pytest.mark.parametrize(("columns", "keep_old", "step"), [
    (None, False, ColumnStep.NO_TABLE), (None, True, ColumnStep.NO_TABLE),
    (COLUMNS, False, ColumnStep.RENAME), (RENAMED, False, ColumnStep.DONE),
    (COPIED, False, ColumnStep.BOTH),
    (COLUMNS, True, ColumnStep.COPY), (COPIED, True, ColumnStep.COPY),  # a replay: guarded
    (RENAMED, True, ColumnStep.DONE),
    ({"id": ("id", "int")}, False, ColumnStep.ABSENT),
    ({"id": ("id", "int")}, True, ColumnStep.ABSENT)])
def test_column_step(columns: dict[str, tuple[str, str]] | None, keep_old: bool,
                     step: ColumnStep) -> None:
    assert column_step(columns, "name", "label", keep_old, ["id"]) is step


def test_a_key_column_is_renamed_even_when_the_old_one_is_kept() -> None:
    assert column_step(COLUMNS, "ID", "code", True, ["id"]) is ColumnStep.RENAME
    assert column_step({"code": ("code", "int")}, "id", "code", True, ["id"]) \
        is ColumnStep.DONE
    assert renamed_key(["a", "ID"], "id", "code") == ["a", "code"]
    assert renamed_key(["a"], "id", "code") == ["a"]


def test_a_change_of_case_only_renames_the_one_column() -> None:
    assert column_step(COLUMNS, "name", "Name", True, []) is ColumnStep.RENAME
    assert column_step({"name": ("Name", "string")}, "name", "Name", True, []) \
        is ColumnStep.DONE
    assert column_step({"id": ("id", "int")}, "name", "Name", False, []) is ColumnStep.ABSENT
