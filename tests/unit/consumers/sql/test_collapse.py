"""A block's changes of one table collapsed to each key's net effect."""

from __future__ import annotations

import random

import pytest

from consumers.sql.collapse import KeyMoved, NotCollapsed, TableChanges, Unexplained

AFTER = ["v0"]
BEFORE = ["k0"]


def row(key: object, value: object = None, before: object = None) -> dict[str, object]:
    """Parameters of a row change: ``v0`` the after image's key, ``k0`` the before image's."""
    return {"v0": key, "v1": value, "k0": key if before is None else before}


def test_each_key_keeps_its_last_image_and_whether_it_was_there() -> None:
    t = TableChanges()
    t.insert(row(1, "a"), AFTER)
    t.update(row(1, "b"), BEFORE, AFTER)        # new, updated: still an insert
    t.update(row(2, "x"), BEFORE, AFTER)        # was there, kept
    t.delete(row(3), BEFORE)                    # was there, gone
    t.insert(row(4, "c"), AFTER)
    t.delete(row(4), BEFORE)                    # new and gone: must not be there
    t.delete(row(5), BEFORE)
    t.insert(row(5, "again"), AFTER)            # was there, deleted, inserted: kept
    assert [r["v1"] for r in t.inserted()] == ["b"]
    assert [r["v1"] for r in t.upserted()] == ["x", "again"]
    assert t.must_exist() == [(2,), (5,)]
    assert t.deleted() == [(3,)]
    assert t.must_not_exist() == [(4,)]


def test_a_key_move_is_not_collapsed() -> None:
    t = TableChanges()
    with pytest.raises(KeyMoved):
        t.update(row(2, "x", before=1), BEFORE, AFTER)
    assert len(t) == 0


@pytest.mark.parametrize("steps", [
    [("insert", 1), ("insert", 1)],
    [("delete", 1), ("update", 1)],
    [("delete", 1), ("delete", 1)],
    [("update", 1), ("insert", 1)],
])
def test_changes_no_consistent_source_makes_are_unexplained(
        steps: list[tuple[str, int]]) -> None:
    t = TableChanges()
    *first, last = steps
    for step, key in first:
        apply(t, step, key)
    with pytest.raises(Unexplained):
        apply(t, *last)


def test_an_unhashable_key_value_is_not_collapsed() -> None:
    with pytest.raises(NotCollapsed):
        TableChanges().insert(row([1, 2], "a"), AFTER)


def test_composite_keys_are_matched_by_every_column_in_key_order() -> None:
    t = TableChanges()
    t.insert({"v0": "b", "v1": 1, "v2": "x"}, ["v1", "v0"])
    t.update({"v0": "b", "v1": 1, "v2": "y", "k0": 1, "k1": "b"}, ["k0", "k1"], ["v1", "v0"])
    t.delete({"k0": 1, "k1": "c"}, ["k0", "k1"])
    assert [r["v2"] for r in t.inserted()] == ["y"]
    assert t.deleted() == [(1, "c")]


def apply(t: TableChanges, step: str, key: int, value: object = None) -> None:
    if step == "insert":
        t.insert(row(key, value), AFTER)
    elif step == "update":
        t.update(row(key, value), BEFORE, AFTER)
    else:
        t.delete(row(key), BEFORE)


def test_net_effects_equal_applying_every_change_in_order() -> None:
    """Random consistent histories: the table before the block, with the deleted keys gone
    and the kept and new images written, is the table after every change in order."""
    rng = random.Random(7)
    for _ in range(300):
        before = {k: f"old{k}" for k in rng.sample(range(12), rng.randint(0, 8))}
        table = dict(before)
        t = TableChanges()
        for n in range(rng.randint(0, 30)):
            key = rng.randrange(12)
            if key in table:
                if rng.random() < 0.5:
                    t.update(row(key, f"u{n}"), BEFORE, AFTER)
                    table[key] = f"u{n}"
                else:
                    t.delete(row(key), BEFORE)
                    del table[key]
            else:
                t.insert(row(key, f"i{n}"), AFTER)
                table[key] = f"i{n}"
        assert all(k in before for (k,) in t.must_exist() + t.deleted())
        assert not any(k in before for (k,) in t.must_not_exist())
        assert not any(r["v0"] in before for r in t.inserted())
        result: dict[object, object] = {k: v for k, v in before.items()
                                        if (k,) not in t.deleted()}
        result.update({r["v0"]: r["v1"] for r in (*t.upserted(), *t.inserted())})
        assert result == table
