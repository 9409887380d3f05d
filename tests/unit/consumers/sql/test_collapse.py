"""A block's changes of one table collapsed to each key's net effect: every test on the
Python reference and on its compiled twin, and the two held equal on random histories."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from consumers.sql import _collapse, collapse
from consumers.sql.collapse import Image, KeyMoved, KeyOf, NotCollapsed, Unexplained

#: Each implementation: its TableChanges class and its picker.
IMPLEMENTATIONS: dict[str, tuple[Callable[[], Any], Callable[[list[int]], KeyOf]]] = {
    "python": (collapse.TableChanges, collapse.picker),
    "compiled": (_collapse.TableChanges, _collapse.Picker),
}
TableChanges: Callable[[], Any]
picker: Callable[[list[int]], KeyOf]
#: Images of (key, value): the key first.
KEY: KeyOf


@pytest.fixture(autouse=True, params=sorted(IMPLEMENTATIONS))
def implementation(request: pytest.FixtureRequest) -> Iterator[None]:
    """The module's ``TableChanges``, ``picker`` and ``KEY`` of one implementation."""
    global TableChanges, picker, KEY
    TableChanges, picker = IMPLEMENTATIONS[request.param]
    KEY = picker([0])
    yield


class Change:
    """A row change's images: ``after`` (key, value), ``before`` (key, its old value)."""

    def __init__(self, key: object, value: object = None, before: object = None) -> None:
        self.after: Image = [key, value]
        self.before: Image = [key if before is None else before, "old"]


def insert(t: Any, c: Change) -> None:
    t.insert(c.after, KEY)


def update(t: Any, c: Change) -> None:
    t.update(c.after, c.before, KEY, KEY)


def delete(t: Any, c: Change) -> None:
    t.delete(c.before, KEY)


def test_each_key_keeps_its_last_image_and_whether_it_was_there() -> None:
    t = TableChanges()
    insert(t, Change(1, "a"))
    update(t, Change(1, "b"))                   # new, updated: still an insert
    update(t, Change(2, "x"))                   # was there, kept
    delete(t, Change(3))                        # was there, gone
    insert(t, Change(4, "c"))
    delete(t, Change(4))                        # new and gone: must not be there
    delete(t, Change(5))
    insert(t, Change(5, "again"))               # was there, deleted, inserted: kept
    assert [r[1] for r in t.inserted()] == ["b"]
    assert [r[1] for r in t.upserted()] == ["x", "again"]
    assert t.must_exist() == [(2,), (5,)]
    assert t.deleted() == [(3,)]
    assert t.must_not_exist() == [(4,)]


def test_a_key_move_is_not_collapsed() -> None:
    t = TableChanges()
    with pytest.raises(KeyMoved):
        update(t, Change(2, "x", before=1))
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
        insert(TableChanges(), Change([1, 2], "a"))


def test_composite_keys_are_matched_by_every_column_in_key_order() -> None:
    """Images of (b, a, value) with the key (a, b); before images of (a, b) alone."""
    t = TableChanges()
    after, before = picker([1, 0]), picker([0, 1])
    t.insert(["b", 1, "x"], after)
    t.update(["b", 1, "y"], [1, "b"], before, after)
    t.delete([1, "c"], before)
    assert [r[2] for r in t.inserted()] == ["y"]
    assert t.deleted() == [(1, "c")]
    with pytest.raises(KeyMoved):
        t.update(["b", 2, "z"], [1, "b"], before, after)


def apply(t: Any, step: str, key: int, value: object = None) -> None:
    {"insert": insert, "update": update, "delete": delete}[step](t, Change(key, value))


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
                    update(t, Change(key, f"u{n}"))
                    table[key] = f"u{n}"
                else:
                    delete(t, Change(key))
                    del table[key]
            else:
                insert(t, Change(key, f"i{n}"))
                table[key] = f"i{n}"
        assert all(k in before for (k,) in t.must_exist() + t.deleted())
        assert not any(k in before for (k,) in t.must_not_exist())
        assert not any(r[0] in before for r in t.inserted())
        result: dict[object, object] = {k: v for k, v in before.items()
                                        if (k,) not in t.deleted()}
        result.update({r[0]: r[1] for r in (*t.upserted(), *t.inserted())})
        assert result == table


def test_a_row_changes_inserts_are_taken_up_to_the_first_that_cannot_be_collapsed() -> None:
    t = TableChanges()
    delete(t, Change(3))
    rows = [Change(k, "v").after for k in (1, 2, 3, 2, 4)]
    # 3 was deleted before: its insert is taken; 2 is there already: the rest go in order.
    assert t.insert_all(rows, KEY) == 3
    assert [r[0] for r in t.inserted()] == [1, 2] and [r[0] for r in t.upserted()] == [3]
    assert t.insert_all([Change([5], "x").after], KEY) == 0  # an unhashable key value
    assert len(t) == 3


def test_a_row_changes_updates_and_deletes_are_taken_up_to_the_first_that_cannot_be_collapsed(
        ) -> None:
    t = TableChanges()
    insert(t, Change(1, "a"))
    delete(t, Change(2))
    after = [Change(k, "u").after for k in (1, 3, 2, 4)]
    before = [Change(k).before for k in (1, 3, 2, 4)]
    assert t.update_all(after, before, KEY, KEY) == 2  # 2 was deleted: updated after that
    assert t.delete_all([Change(k).before for k in (5, 1, 5, 6)], KEY) == 2  # 5 twice
    exist, absent, gone, kept, new = t.outcome()
    assert (exist, absent, gone) == ([(3,)], [(1,)], [(2,), (5,)])
    assert kept == [[3, "u"]] and new == []
    with pytest.raises(ValueError):
        t.update_all(after, before[:1], KEY, KEY)


def test_the_compiled_net_effects_equal_the_reference() -> None:
    """Random histories, consistent or not, of single and composite keys: each step's
    outcome (taken, or the error's type) and the net effects after it are the same."""
    rng = random.Random(11)
    for _ in range(400):
        width = rng.choice([1, 2])
        keys = [tuple(rng.randrange(4) for _ in range(width)) for _ in range(6)]
        both = [(cls(), pick(list(range(width)))) for cls, pick in IMPLEMENTATIONS.values()]
        for n in range(rng.randint(0, 25)):
            kind = rng.choice(["insert", "insert_all", "update", "update_all", "delete",
                               "delete_all"])
            rows = [[*rng.choice(keys), f"v{n}"] for _ in range(rng.randint(1, 3))]
            olds = [[*rng.choice(keys), "old"] if rng.random() < 0.2 else [*r[:width], "old"]
                    for r in rows]
            seen = []
            for t, key in both:
                try:
                    if kind == "insert":
                        got: object = t.insert(rows[0], key)
                    elif kind == "insert_all":
                        got = t.insert_all(rows, key)
                    elif kind == "update":
                        got = t.update(rows[0], olds[0], key, key)
                    elif kind == "update_all":
                        got = t.update_all(rows, olds, key, key)
                    elif kind == "delete":
                        got = t.delete(olds[0], key)
                    else:
                        got = t.delete_all(olds, key)
                except NotCollapsed as exc:
                    got = type(exc)
                seen.append((got, t.outcome(), t.must_exist(), t.must_not_exist(),
                             t.deleted(), list(t.upserted()), list(t.inserted()), len(t)))
            assert seen[0] == seen[1], (kind, rows, olds)
