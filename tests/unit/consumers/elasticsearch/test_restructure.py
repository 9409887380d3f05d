"""The pure parts of following renamed columns and tables (consumers.elasticsearch.restructure)."""

from __future__ import annotations

from consumers.elasticsearch.naming import row_id
from consumers.elasticsearch.restructure import (
    dropped_source,
    keyless_id,
    moved_source,
    renamed_columns,
    renamed_meta,
    row_columns,
)
from consumers.elasticsearch.types import APPLIED_FRAGNO, APPLIED_SEQNO, INTERNAL_FIELDS, ROWS

BOOKKEEPING = frozenset(INTERNAL_FIELDS) | {"seqno"}


def test_a_moved_field_takes_the_old_ones_place() -> None:
    source = {"id": 1, "name": "a", "qty": 2}
    moved = moved_source(source, "name", "label", keep_old=False)
    assert moved is not None and list(moved.items()) == [("id", 1), ("label", "a"), ("qty", 2)]


def test_a_copied_field_keeps_the_old_one_last() -> None:
    source = {"id": 1, "name": None, "qty": 2, ROWS: 1}
    moved = moved_source(source, "name", "label", keep_old=True)
    assert moved is not None
    assert list(moved) == ["id", "label", "qty", ROWS, "name"]
    assert moved["label"] is None and moved["name"] is None


def test_a_document_done_before_or_without_the_field_is_left_alone() -> None:
    assert moved_source({"id": 1, "label": "a"}, "name", "label", keep_old=False) is None
    assert moved_source({"id": 1, "name": "a", "label": "a"}, "name", "label",
                        keep_old=True) is None
    assert moved_source({"id": 1}, "name", "label", keep_old=False) is None


def test_meta_columns_are_renamed_in_place_or_copied_once() -> None:
    columns = [{"name": "id", "type": "INT"}, {"name": "name", "type": "VARCHAR"},
               {"name": "qty", "type": "INT"}]
    moved = renamed_columns(columns, "name", "label", keep_old=False)
    assert [c["name"] for c in moved] == ["id", "label", "qty"]
    assert moved[1]["type"] == "VARCHAR"
    copied = renamed_columns(columns, "name", "label", keep_old=True)
    assert [c["name"] for c in copied] == ["id", "label", "name", "qty"]
    # Replayed: nothing changes (and evolve after lenient drops the old one).
    assert renamed_columns(moved, "name", "label", keep_old=False) == moved
    assert renamed_columns(copied, "name", "label", keep_old=True) == copied
    assert [c["name"] for c in renamed_columns(copied, "name", "label", False)] == \
        ["id", "label", "qty"]


def test_a_keyless_document_is_hashed_on_the_columns_before_the_bookkeeping() -> None:
    source = {"a": 1, "b": "x", "seqno": 9, ROWS: 2, APPLIED_SEQNO: 9, APPLIED_FRAGNO: 0}
    assert row_columns(source, BOOKKEEPING) == ["a", "b"]
    assert keyless_id(source, BOOKKEEPING) == row_id(["a", "b"], [1, "x"])
    moved = moved_source(source, "b", "c", keep_old=True)
    assert moved is not None
    # The kept old field comes after the bookkeeping: not part of the row any more.
    assert keyless_id(moved, BOOKKEEPING) == row_id(["a", "c"], [1, "x"])


def test_a_renamed_table_owns_its_index_under_the_new_name() -> None:
    tungsten = {"service": "s", "schema": "a", "table": "items", "columns": []}
    meta = {"tungsten": tungsten, "other": 1}
    assert renamed_meta(meta, "b", "goods") == {
        "tungsten": {"service": "s", "schema": "b", "table": "goods", "columns": []},
        "other": 1}
    assert tungsten["table"] == "items"


def test_a_dropped_field_leaves_the_source_once() -> None:
    source = {"id": 1, "name": "a", "price": "1.5"}
    assert dropped_source(source, "price") == {"id": 1, "name": "a"}
    assert dropped_source({"id": 1, "name": "a"}, "price") is None
