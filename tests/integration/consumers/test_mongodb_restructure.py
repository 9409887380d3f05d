"""Renamed tables and columns and dropped tables on the stack's FerretDB (issue 28), driven
block by block like the runtime does: each change in a block of its own, replayed as a crash
would make the runtime replay it, and followed by rows of the new names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from consumers.mongodb.applier import MongoApplier
from consumers.position import Position
from stack.services.ferretdb import FerretDB
from thl_topics.event import ColumnSpec, RowAction, ThlValue
from thl_topics.schema_change import ChangeKind, SchemaChange

from .test_mongodb_applier import ITEMS, PAIRS, Target, block, change, event


@pytest.fixture
def target(ferretdb: FerretDB) -> Iterator[Target]:
    t = Target(ferretdb)
    try:
        yield t
    finally:
        t.client.drop_database(f"{t.schema}_other")
        t.close()


def restructure(applier: MongoApplier, seqno: int, kind: ChangeKind, schema: str, table: str,
                *, keep_old: bool = False, **fields: str) -> None:
    """One schema change in a block of its own, as the runtime carries it out."""
    ddl = event(seqno)
    applier.begin()
    sc = SchemaChange(kind, schema, table, **fields)  # type: ignore[arg-type]
    if kind is ChangeKind.RENAME_TABLE:
        applier.rename_table(sc, ddl)
    elif kind is ChangeKind.RENAME_COLUMN:
        applier.rename_column(sc, keep_old, ddl)
    else:
        applier.drop_table(sc, ddl)
    applier.commit(Position.of(ddl))


def names(target: Target) -> dict[str, str]:
    coll = target.client[f"tungsten_{target.service}"]["trep_names"]
    return {d["_id"]: d["source"] for d in coll.find({})}


def test_a_renamed_table_keeps_its_documents_tombstones_and_owner(target: Target) -> None:
    s = target.schema
    applier = target.applier()
    block(applier, event(1, change(s, "items", RowAction.INSERT, ITEMS,
                                   [[1, "a", "1.00"], [2, "b", "2.00"]])))
    block(applier, event(2, change(s, "items", RowAction.DELETE, ITEMS,
                                   before=[[2, "b", "2.00"]])))
    for _ in range(2):  # the second: a replay
        restructure(applier, 3, ChangeKind.RENAME_TABLE, s, "items", new_schema=s,
                    new_name="goods")
    assert target.client[s].list_collection_names() == ["goods"]
    assert [d["_id"] for d in target.docs("goods", live=False)] == [1, 2]  # the tombstone too
    assert names(target) == {f"{s}.goods": f"{s}.goods"}
    # A restart: the owners come from trep_names; rows of the new name reach the documents.
    again = target.applier()
    assert again.position() is not None
    block(again, event(4, change(s, "goods", RowAction.UPDATE, ITEMS, [[1, "A", "1.50"]],
                                 [[1, "a", "1.00"]])))
    # A replayed older write of the old key is still refused by the tombstone's seqno.
    block(again, event(1, change(s, "goods", RowAction.INSERT, ITEMS, [[2, "b", "2.00"]])))
    assert [(d["_id"], d["name"]) for d in target.docs("goods")] == [(1, "A")]


def test_a_table_renamed_into_another_database_is_copied_then_dropped(target: Target) -> None:
    s, other = target.schema, f"{target.schema}_other"
    applier = target.applier()
    block(applier, event(1, change(s, "items", RowAction.INSERT, ITEMS,
                                   [[i, f"v{i}", "1.00"] for i in range(5)])))
    # FerretDB 1.24 cannot rename across databases: the documents are copied.
    restructure(applier, 2, ChangeKind.RENAME_TABLE, s, "items", new_schema=other,
                new_name="items")
    restructure(applier, 2, ChangeKind.RENAME_TABLE, s, "items", new_schema=other,
                new_name="items")
    assert "items" not in target.client[s].list_collection_names()
    assert target.client[other]["items"].count_documents({}) == 5
    assert names(target) == {f"{other}.items": f"{other}.items"}


def test_a_table_never_on_the_target_is_left_alone(target: Target) -> None:
    s = target.schema
    applier = target.applier()
    restructure(applier, 1, ChangeKind.RENAME_TABLE, s, "none", new_schema=s, new_name="x")
    restructure(applier, 2, ChangeKind.RENAME_COLUMN, s, "x", column="a", new_name="b")
    restructure(applier, 3, ChangeKind.DROP_TABLE, s, "x")
    assert target.client[s].list_collection_names() == []
    assert names(target) == {}


def test_a_renamed_column_is_copied_in_lenient_and_renamed_in_evolve(target: Target) -> None:
    s = target.schema
    applier = target.applier()
    block(applier, event(1, change(s, "items", RowAction.INSERT, ITEMS,
                                   [[1, "a", "1.00"], [2, "b", "2.00"]])))
    restructure(applier, 2, ChangeKind.RENAME_COLUMN, s, "items", keep_old=True,
                column="name", new_name="label")
    restructure(applier, 2, ChangeKind.RENAME_COLUMN, s, "items", keep_old=True,
                column="name", new_name="label")
    assert [(d["name"], d["label"], d["_seqno"]) for d in target.docs("items")] == [
        ("a", "a", 1), ("b", "b", 1)]
    renamed = [ITEMS[0], ColumnSpec(2, "label", "VARCHAR", 40), ITEMS[2]]
    block(applier, event(3, change(s, "items", RowAction.UPDATE, renamed,
                                   [[1, "new", "1.00"]], [[1, "a", "1.00"]])))
    # evolve: the old field goes; the document written after seqno 4's rename is not one
    # the rename touches (its replay neither).
    restructure(applier, 4, ChangeKind.RENAME_COLUMN, s, "items", column="price",
                new_name="cost")
    block(applier, event(5, change(s, "items", RowAction.INSERT, ITEMS,
                                   [[9, "price kept", "9.00"]])))
    restructure(applier, 4, ChangeKind.RENAME_COLUMN, s, "items", column="price",
                new_name="cost")
    docs = target.docs("items")
    assert [sorted(set(d) - {"_id", "_seqno", "id"}) for d in docs] == [
        ["cost", "label"], ["cost", "label", "name"], ["name", "price"]]


def test_a_lenient_column_copy_over_many_documents_finishes(target: Target) -> None:
    """More documents than FerretDB takes update statements in one command (it stops
    answering at 100): the copy goes in smaller commands and the server stays up."""
    s = target.schema
    applier = target.applier()
    rows: list[list[ThlValue]] = [[i, f"n{i}", "1.00"] for i in range(1, 251)]
    block(applier, event(1, change(s, "items", RowAction.INSERT, ITEMS, rows)))
    restructure(applier, 2, ChangeKind.RENAME_COLUMN, s, "items", keep_old=True,
                column="name", new_name="label")
    docs = target.docs("items")
    assert len(docs) == 250 and all(d["label"] == d["name"] for d in docs)


def test_a_renamed_key_column_of_a_composite_key_moves_the_documents(target: Target) -> None:
    s = target.schema
    applier = target.applier()
    block(applier, event(1, change(s, "pairs", RowAction.INSERT, PAIRS,
                                   [["x", 1, "one"], ["y", 2, "two"]])))
    block(applier, event(2, change(s, "pairs", RowAction.DELETE, PAIRS,
                                   before=[["y", 2, "two"]])))
    restructure(applier, 3, ChangeKind.RENAME_COLUMN, s, "pairs", keep_old=True,
                column="a", new_name="n")
    restructure(applier, 3, ChangeKind.RENAME_COLUMN, s, "pairs", keep_old=True,
                column="a", new_name="n")
    assert [d["_id"] for d in target.docs("pairs", live=False)] == [
        {"b": "x", "n": 1}, {"b": "y", "n": 2}]
    renamed = [PAIRS[0], ColumnSpec(2, "n", "INT", primary_key=True), PAIRS[2]]
    block(applier, event(4, change(s, "pairs", RowAction.UPDATE, renamed,
                                   [["x", 1, "ONE"]], [["x", 1, "one"]])))
    assert [(d["_id"], d["n"], d["v"]) for d in target.docs("pairs")] == [
        ({"b": "x", "n": 1}, 1, "ONE")]


def test_a_dropped_table_goes_with_its_owner(target: Target) -> None:
    s = target.schema
    applier = target.applier()
    block(applier, event(1, change(s, "items", RowAction.INSERT, ITEMS, [[1, "a", "1.00"]])))
    restructure(applier, 2, ChangeKind.DROP_TABLE, s, "items")
    restructure(applier, 2, ChangeKind.DROP_TABLE, s, "items")
    assert target.client[s].list_collection_names() == []
    assert names(target) == {}
    # The name is free again: a new table of that name starts afresh.
    block(applier, event(3, change(s, "items", RowAction.INSERT, ITEMS, [[5, "e", "5.00"]])))
    assert [d["_id"] for d in target.docs("items")] == [5]
