"""Foreign-key cascades followed from the THL's rules, against the in-memory target."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from consumers.cascades import Cascades, Relearn, integer_lookup
from consumers.errors import DataError
from consumers.memory.applier import MemoryApplier
from consumers.memory.config import MemoryTarget
from consumers.position import Position
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.foreign_keys import CascadeRules, ForeignKey, Referential
from thl_topics.records import META_FOREIGN_KEYS


def _specs(*names: str, key: str = "id") -> list[ColumnSpec]:
    return [ColumnSpec(index=i + 1, name=n, type="INT", primary_key=n == key)
            for i, n in enumerate(names)]


ORDERS = _specs("id", "note")
LINES = _specs("id", "order_id", "qty")
PARTS = _specs("id", "line_id")
NOTES = _specs("id", "order_id")


def _fk(name: str, parent: str, pcols: tuple[str, ...], child: str, ccols: tuple[str, ...],
        on_delete: Referential, on_update: Referential = Referential.RESTRICT) -> ForeignKey:
    return ForeignKey(name, ("s", parent), pcols, ("s", child), ccols, on_delete, on_update)


RULES = CascadeRules(
    rules=[_fk("fk_lines", "orders", ("id",), "lines", ("order_id",), Referential.CASCADE,
               Referential.CASCADE),
           _fk("fk_parts", "lines", ("id",), "parts", ("line_id",), Referential.CASCADE),
           _fk("fk_notes", "orders", ("id",), "notes", ("order_id",), Referential.SET_NULL,
               Referential.SET_NULL)],
    tables={("s", "lines"): LINES, ("s", "parts"): PARTS, ("s", "notes"): NOTES})


def _insert(table: str, specs: list[ColumnSpec], *rows: Sequence[ThlValue]) -> RowChange:
    return RowChange(RowAction.INSERT, "s", table, column_specs=specs,
                     column_values=[list(r) for r in rows])


def _event(seqno: int, *items: RowChange, rules: CascadeRules | None = None) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="src", event_id=f"e{seqno}",
                    shard_id="s", tstamp=0, data=list(items),
                    metadata={META_FOREIGN_KEYS: rules.encode()} if rules else {})


class Target:
    """The memory applier with cascades followed before its blocks, as the runtime does."""

    def __init__(self) -> None:
        self.applier = MemoryApplier(MemoryTarget(type="memory"))
        self.cascades = Cascades(lambda schema, table: table != "ignored")
        self.seqno = 0

    def block(self, *events: ThlEvent) -> list[ThlEvent]:
        self.applier.begin()
        self.cascades.begun(self.applier)
        out = []
        for event in events:
            followed, _ = self.cascades.follow(event, self.applier)
            self.applier.apply(followed)
            out.append(followed)
        self.seqno = events[-1].seqno
        self.applier.commit(Position(self.seqno, 0, f"e{self.seqno}"))
        return out

    def ids(self, table: str) -> list[int]:
        return sorted(int(r["id"]) for r in self.applier.rows("s", table))


def _loaded() -> Target:
    """Rows in every table, written by an event that carried the rules (the process knows
    the child tables from then on)."""
    t = Target()
    t.block(_event(1, _insert("orders", ORDERS, [1, "a"], [2, "b"]),
                   _insert("lines", LINES, [10, 1, 5], [11, 1, 6], [12, 2, 7]),
                   _insert("parts", PARTS, [100, 10], [101, 12], [102, None]),
                   _insert("notes", NOTES, [1000, 1], [1001, 2]), rules=RULES))
    return t


def test_a_delete_cascades_two_levels_and_sets_null() -> None:
    t = _loaded()
    delete = RowChange(RowAction.DELETE, "s", "orders", key_specs=ORDERS,
                       key_values=[[1, "a"]])
    [event] = t.block(_event(2, delete, rules=RULES))
    assert [(i.table, i.action) for i in event.data if isinstance(i, RowChange)] == [
        ("orders", RowAction.DELETE), ("lines", RowAction.DELETE),
        ("parts", RowAction.DELETE), ("notes", RowAction.UPDATE)]
    assert t.ids("lines") == [12]
    assert t.ids("parts") == [101, 102]
    assert {r["id"]: r["order_id"] for r in t.applier.rows("s", "notes")} == {
        1000: None, 1001: 2}
    assert t.cascades.rows == 4 and t.cascades.deepest == 2


def test_a_key_update_cascades_to_the_new_key_and_sets_null() -> None:
    t = _loaded()
    update = RowChange(RowAction.UPDATE, "s", "orders", column_specs=ORDERS,
                       key_specs=ORDERS, column_values=[[20, "b"]], key_values=[[2, "b"]])
    t.block(_event(2, update, rules=RULES))
    assert {r["id"]: r["order_id"] for r in t.applier.rows("s", "lines")} == {
        10: 1, 11: 1, 12: 20}
    assert {r["id"]: r["order_id"] for r in t.applier.rows("s", "notes")} == {
        1000: 1, 1001: None}
    assert t.ids("parts") == [100, 101, 102]  # parts has no ON UPDATE action


def test_an_update_that_keeps_the_key_changes_no_child() -> None:
    t = _loaded()
    update = RowChange(RowAction.UPDATE, "s", "orders", column_specs=ORDERS,
                       key_specs=ORDERS, column_values=[[1, "new"]], key_values=[[1, "a"]])
    [event] = t.block(_event(2, update, rules=RULES))
    assert len(event.data) == 1


def test_children_written_earlier_in_the_block_are_found_before_they_are_stored() -> None:
    """The memory target stores a block at commit: the child rows of the same block are
    only in the block's own changes."""
    t = _loaded()
    t.block(_event(2, _insert("lines", LINES, [13, 2, 1])),
            _event(3, _insert("parts", PARTS, [103, 13]),
                   RowChange(RowAction.DELETE, "s", "parts", key_specs=PARTS,
                             key_values=[[101, 12]])),
            _event(4, RowChange(RowAction.DELETE, "s", "orders", key_specs=ORDERS,
                                key_values=[[2, "b"]]), rules=RULES))
    assert t.ids("lines") == [10, 11]
    assert t.ids("parts") == [100, 102]


def test_a_child_table_learnt_after_the_block_wrote_it_asks_for_the_block_again() -> None:
    t = Target()
    t.block(_event(1, _insert("orders", ORDERS, [1, "a"])))
    first = _event(2, _insert("lines", LINES, [10, 1, 5]))
    parent = _event(3, RowChange(RowAction.DELETE, "s", "orders", key_specs=ORDERS,
                                 key_values=[[1, "a"]]), rules=RULES)
    with pytest.raises(Relearn, match="lines"):
        t.block(first, parent)
    t.applier.rollback()
    t.block(first, parent)  # the runtime applies the block again: now it is kept
    assert t.ids("lines") == []


def test_tables_the_group_leaves_out_are_not_looked_up() -> None:
    rules = CascadeRules(rules=[_fk("fk", "orders", ("id",), "ignored", ("order_id",),
                                    Referential.CASCADE)],
                         tables={("s", "ignored"): LINES})
    t = _loaded()
    [event] = t.block(_event(2, RowChange(RowAction.DELETE, "s", "orders", key_specs=ORDERS,
                                          key_values=[[1, "a"]]), rules=rules))
    assert len(event.data) == 1


def test_keyless_children_are_removed_as_often_as_they_are_there() -> None:
    keyless = [ColumnSpec(index=1, name="order_id", type="INT"),
               ColumnSpec(index=2, name="v", type="INT")]
    rules = CascadeRules(rules=[_fk("fk", "orders", ("id",), "loose", ("order_id",),
                                    Referential.CASCADE)], tables={("s", "loose"): keyless})
    t = _loaded()
    t.block(_event(2, _insert("loose", keyless, [1, 7], [1, 7], [2, 7])))
    [event] = t.block(_event(3, RowChange(RowAction.DELETE, "s", "orders", key_specs=ORDERS,
                                          key_values=[[1, "a"]]), rules=rules))
    cascaded = event.data[1]
    assert isinstance(cascaded, RowChange) and cascaded.key_values == [[1, 7], [1, 7]]
    assert t.applier.rows("s", "loose") == [{"order_id": 2, "v": 7}]


def test_a_loop_of_rules_stops_with_a_data_error() -> None:
    loop = CascadeRules(rules=[_fk("fk_self", "tree", ("id",), "tree", ("parent",),
                                   Referential.SET_NULL, Referential.CASCADE)],
                        tables={("s", "tree"): _specs("id", "parent")})
    t = Target()
    tree = _specs("id", "parent")
    t.block(_event(1, _insert("tree", tree, *[[i, i - 1 if i else None] for i in range(20)])))
    # A key update re-points each child, whose own key does not change: one level only.
    update = RowChange(RowAction.UPDATE, "s", "tree", column_specs=tree, key_specs=tree,
                       column_values=[[100, None]], key_values=[[0, None]])
    t.block(_event(2, update, rules=loop))
    assert {r["id"]: r["parent"] for r in t.applier.rows("s", "tree")}[1] == 100
    deep = CascadeRules(rules=[_fk("fk_deep", "tree", ("id",), "tree", ("parent",),
                                   Referential.CASCADE)], tables={("s", "tree"): tree})
    with pytest.raises(DataError, match="deeper than 15"):
        t.block(_event(3, RowChange(RowAction.DELETE, "s", "tree", key_specs=tree,
                                    key_values=[[1, 100]]), rules=deep))


def test_only_integer_lookups_are_pushed_into_a_store() -> None:
    specs = [*_specs("id", "n"), ColumnSpec(index=3, name="s", type="VARCHAR")]
    assert integer_lookup(specs, ["n"], [(1,), (2,)])
    assert not integer_lookup(specs, ["s"], [("a",)])
    assert not integer_lookup(specs, ["n"], [(1 << 63,)])
