"""Block collapsing of the MongoDB applier: one guarded write per document, last one wins."""

from __future__ import annotations

import json
from typing import Any

import bson
import pytest
from bson.int64 import Int64

from consumers.errors import DataError
from consumers.mongodb.applier import MongoApplier
from consumers.mongodb.blocks import (
    Clear,
    KeyedWrites,
    KeylessOp,
    Write,
    chunks,
    fresh,
    row_document,
)
from consumers.mongodb.config import MongoTarget
from consumers.mongodb.naming import Namespace
from consumers.mongodb.server import detect
from consumers.naming import NameOwners
from consumers.registry import ApplierContext
from replicator.config import ServiceSettings
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

from .test_server import FERRETDB_BUILD_INFO, FERRETDB_HELLO

NS = Namespace("shop", "items")
ITEMS = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "name", "VARCHAR", 40)]
LOOSE = [ColumnSpec(1, "a", "INT"), ColumnSpec(2, "b", "VARCHAR", 20)]


def write(seqno: int, ident: Any, fields: dict[str, Any] | None = None) -> Write:
    doc = None if fields is None else row_document(ident, seqno, fields.items())
    return Write(seqno, 1, f"e{seqno}", "shop.items", ident, doc)


def row(w: Write) -> dict[str, Any] | None:
    """A write's row fields (None for a tombstone)."""
    return None if w.doc is None else {k: v for k, v in w.doc.items()
                                       if k not in ("_id", "_seqno")}


def test_the_last_write_of_a_document_wins_in_the_order_of_last_writes() -> None:
    block = KeyedWrites()
    block.add(NS, write(1, 1, {"v": "a"}))
    block.add(NS, write(1, 2, {"v": "b"}))
    block.add(NS, write(2, 1, {"v": "c"}))
    block.add(Namespace("shop", "other"), write(2, 1, {"v": "x"}))
    block.add(NS, write(3, {"a": 1, "b": "x"}, None))
    block.add(NS, write(4, {"a": 1, "b": "x"}, {"v": "back"}))
    got = block.by_namespace()
    assert [(w.seqno, w.ident, row(w)) for w in got[NS]] == [
        (1, 2, {"v": "b"}), (2, 1, {"v": "c"}), (4, {"a": 1, "b": "x"}, {"v": "back"})]
    assert [(w.seqno, w.ident) for w in got[Namespace("shop", "other")]] == [(2, 1)]
    assert len(block) == 4


def test_a_write_is_a_guarded_upsert_and_a_delete_a_tombstone() -> None:
    spec = write(7, 3, {"v": "a"}).spec()
    assert spec["q"] == {"_id": 3, "_seqno": {"$lt": Int64(7)}} and spec["upsert"] is True
    assert bson.decode(spec["u"].raw) == {"_id": 3, "_seqno": 7, "v": "a"}
    tomb = write(8, 3).document()
    assert tomb == {"_id": 3, "_seqno": 8, "_deleted": True}


def test_stored_seqnos_leave_out_what_a_replay_already_applied() -> None:
    writes = [write(5, 1), write(5, 2), write(5, 3), write(6, {"a": 1})]
    stored = {1: 9, 2: 5, 3: 4}  # 1 newer, 2 the same seqno, 3 older; {a: 1} absent
    assert [w.ident for w in fresh(writes, stored)] == [3, {"a": 1}]


def test_chunks_split_by_count_and_by_bytes() -> None:
    writes = [write(1, i, {"pad": "x" * 100}) for i in range(10)]
    assert [len(c) for c in chunks(writes, 4)] == [4, 4, 2]
    size = writes[0].encode()
    assert [len(c) for c in chunks(writes, 100, max_bytes=3 * size)] == [3, 3, 3, 1]


def test_keyless_rows_are_identified_by_where_they_were_inserted() -> None:
    op = KeylessOp(12, 3, "e12", "shop.log", None, {"a": 1})
    assert op.insert().ident == "12:3"
    update = KeylessOp(14, 1, "e14", "shop.log", {"a": 1}, {"a": 2})
    assert update.replacement("12:3") == {
        "_id": "12:3", "_seqno": 14, "_op": {"s": 14, "r": 1}, "a": 2}
    delete = KeylessOp(15, 1, "e15", "shop.log", {"a": 2}, None)
    assert delete.replacement("x")["_deleted"] is True
    assert (14, 1) < (15, 1) and update.mark == (14, 1)


def _applier(**cfg: Any) -> MongoApplier:
    applier = MongoApplier(MongoTarget(url="mongodb://127.0.0.1:1/", **cfg),
                           ApplierContext(ServiceSettings(service="unit"), "g"))
    applier.traits = detect(FERRETDB_BUILD_INFO, FERRETDB_HELLO)  # no server needed
    # Collection owners kept in memory only (the applier records them in trep_names).
    applier._layouts.owners = NameOwners("collection", "collection")
    return applier


def _event(seqno: int, *changes: RowChange, fragno: int = 0) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="s", event_id=f"e{seqno}", shard_id="",
                    tstamp=0, fragno=fragno, data=list(changes))


def _rows(action: RowAction, specs: list[ColumnSpec], after: list[list[ThlValue]] | None = None,
          before: list[list[ThlValue]] | None = None, table: str = "items") -> RowChange:
    return RowChange(action, "shop", table, specs if after else [], specs if before else [],
                     after or [], before or [])


def test_insert_update_delete_of_one_key_in_a_block_is_one_tombstone() -> None:
    applier = _applier()
    applier.begin()
    applier.apply(_event(1, _rows(RowAction.INSERT, ITEMS, [[1, "a"], [2, "b"]])))
    applier.apply(_event(2, _rows(RowAction.UPDATE, ITEMS, [[1, "a2"]], [[1, "a"]])))
    applier.apply(_event(3, _rows(RowAction.DELETE, ITEMS, before=[[1, "a2"]])))
    writes, keyless = applier.pending()
    assert keyless == {}
    assert [(w.seqno, w.ident, row(w)) for w in writes[NS]] == [
        (1, 2, {"id": 2, "name": "b"}), (3, 1, None)]
    assert list(writes[NS][0].document()) == ["_id", "_seqno", "id", "name"]


def test_key_changes_delete_the_old_key_and_write_the_new_one() -> None:
    applier = _applier()
    applier.begin()
    # A swap through a third key, as SQL does it: 1 -> 3, 2 -> 1, 3 -> 2.
    applier.apply(_event(1, _rows(RowAction.UPDATE, ITEMS, [[3, "one"]], [[1, "one"]]),
                         _rows(RowAction.UPDATE, ITEMS, [[1, "two"]], [[2, "two"]]),
                         _rows(RowAction.UPDATE, ITEMS, [[2, "one"]], [[3, "one"]])))
    writes, _ = applier.pending()
    final = {w.ident: (w.doc or {}).get("name") for w in writes[NS]}
    assert final == {1: "two", 3: None, 2: "one"}
    assert [w.ordinal for w in writes[NS]] == sorted(w.ordinal for w in writes[NS])
    # An update that keeps its key writes one document, no tombstone.
    applier.begin()
    applier.apply(_event(2, _rows(RowAction.UPDATE, ITEMS, [[5, "new"]], [[5, "old"]])))
    assert [w.document() for w in applier.pending()[0][NS]] == [
        {"_id": 5, "_seqno": 2, "id": 5, "name": "new"}]


def test_row_ordinals_count_across_the_fragments_of_a_seqno() -> None:
    applier = _applier()
    applier.begin()
    applier.apply(_event(4, _rows(RowAction.INSERT, LOOSE, [[1, "a"], [1, "a"]], table="log")))
    applier.apply(_event(4, _rows(RowAction.INSERT, LOOSE, [[2, "b"]], table="log"), fragno=1))
    applier.apply(_event(5, _rows(RowAction.DELETE, LOOSE, before=[[1, "a"]], table="log")))
    _, keyless = applier.pending()
    ops = keyless[Namespace("shop", "log")]
    assert [(o.seqno, o.ordinal, o.before, o.after) for o in ops] == [
        (4, 1, None, {"a": 1, "b": "a"}), (4, 2, None, {"a": 1, "b": "a"}),
        (4, 3, None, {"a": 2, "b": "b"}), (5, 1, {"a": 1, "b": "a"}, None)]
    assert len({repr(o.insert().ident) for o in ops[:3]}) == 3


def test_names_map_through_the_templates_and_are_escaped() -> None:
    applier = _applier(database="replica", collection="{schema}.{table}")
    applier.begin()
    specs = [ColumnSpec(1, "_id", "INT", primary_key=True), ColumnSpec(2, "a.b", "INT")]
    applier.apply(_event(1, RowChange(RowAction.INSERT, "shop", 'we"ird', specs, [],
                                      [[1, 2]], [])))
    writes, _ = applier.pending()
    (ns,) = writes
    assert ns == Namespace("replica", "shop.we%22ird")
    assert writes[ns][0].document() == {"_id": 1, "_seqno": 1, "%5Fid": 1, "a%2Eb": 2}


def test_names_the_server_refuses_are_data_errors_naming_where() -> None:
    applier = _applier(escape_names=False)
    applier.begin()
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "a.b", "INT")]
    with pytest.raises(DataError) as refused:
        applier.apply(_event(9, RowChange(RowAction.INSERT, "shop", "t", specs, [],
                                          [[1, 2]], [])))
    assert refused.value.seqno == 9 and refused.value.event_id == "e9"
    assert "seqno 9 (event e9), table shop.t, column a.b" in str(refused.value)
    assert "contains '.'" in str(refused.value)
    # A database name the server refuses is mapped (the naming rule), or refused if strict.
    applier.apply(_event(10, RowChange(RowAction.INSERT, "sh.op", "t", ITEMS, [],
                                       [[1, "x"]], [])))
    assert applier._layouts.namespace("sh.op", "t", _event(10)) == ("sh_op", "t")
    strict = _applier(names="strict")
    strict.begin()
    with pytest.raises(DataError, match=r"table sh\.op\.t: database 'sh\.op': a FerretDB database "
                       r"name cannot contain '\.' \(names: strict\).* on FerretDB"):
        strict.apply(_event(10, RowChange(RowAction.INSERT, "sh.op", "t", ITEMS, [],
                                          [[1, "x"]], [])))
    with pytest.raises(DataError, match=r"sh\.op\.t and sh_op\.t both map to collection "
                       r"sh_op\.t"):
        applier.apply(_event(11, RowChange(RowAction.INSERT, "sh_op", "t", ITEMS, [],
                                           [[1, "x"]], [])))


def _chunk(seqno: int, change: RowChange, first: bool, fragno: int = 0) -> ThlEvent:
    e = _event(seqno, change, fragno=fragno)
    e.metadata["provision"] = json.dumps({"id": "p", "table": ["shop", change.table],
                                          "chunk": 0 if first else 1, "first": first,
                                          "end": False, "rows": change.row_count})
    return e


def test_a_first_chunk_supersedes_the_pending_changes_of_its_table_only() -> None:
    applier = _applier()
    applier.begin()
    applier.apply(_event(1, _rows(RowAction.INSERT, ITEMS, [[1, "a"], [2, "b"]]),
                         _rows(RowAction.INSERT, ITEMS, [[7, "other"]], table="other"),
                         _rows(RowAction.INSERT, LOOSE, [[1, "x"]], table="log")))
    applier.apply(_chunk(2, _rows(RowAction.INSERT, ITEMS, [[2, "src"], [3, "src"]]), True))
    # A later fragment of the chunk, and a later chunk, clear nothing.
    applier.apply(_chunk(2, _rows(RowAction.INSERT, ITEMS, [[4, "src"]]), True, fragno=1))
    applier.apply(_chunk(3, _rows(RowAction.INSERT, ITEMS, [[5, "src"]]), False))
    writes, keyless = applier.pending()
    assert [(w.seqno, w.ident) for w in writes[NS]] == [(2, 2), (2, 3), (2, 4), (3, 5)]
    assert [w.ident for w in writes[Namespace("shop", "other")]] == [7]
    assert list(keyless) == [Namespace("shop", "log")]
    assert applier._clears == {NS: Clear(2, "e2", "shop.items", keyless=False)}
    applier.apply(_chunk(4, _rows(RowAction.INSERT, LOOSE, [[1, "y"]], table="log"), True))
    _, keyless = applier.pending()
    assert [op.seqno for op in keyless[Namespace("shop", "log")]] == [4]
    assert applier._clears[Namespace("shop", "log")].keyless
    applier.rollback()
    assert applier._clears == {}


def test_a_clear_tombstone_is_guarded_by_the_chunk_seqno() -> None:
    keyed = Clear(9, "e9", "shop.items", keyless=False).tombstone(5)
    assert keyed.spec()["q"] == {"_id": 5, "_seqno": {"$lt": Int64(9)}}
    assert keyed.document() == {"_id": 5, "_seqno": 9, "_deleted": True}
    loose = Clear(9, "e9", "shop.log", keyless=True).tombstone("3:1")
    # The clear supersedes every update and delete before it: a replay skips them.
    assert loose.document() == {"_id": "3:1", "_seqno": 9, "_deleted": True,
                                "_op": {"s": 9, "r": 0}}


def test_the_size_bound_is_never_below_the_bson_size() -> None:
    """The applier encodes only documents whose bound reaches the server's limit: the bound
    must never be below the real size, or a document too large would go out unchecked."""
    import datetime as dt
    import random
    from collections.abc import Callable
    from decimal import Decimal

    import bson
    from bson.binary import Binary
    from bson.decimal128 import Decimal128
    from bson.int64 import Int64

    from consumers.mongodb.writes import _upper_bound

    rng = random.Random(7)

    def value(depth: int) -> object:
        pick = rng.randrange(9 if depth < 3 else 7)
        makers: list[Callable[[], object]] = [
            lambda: rng.randrange(-2**31, 2**31), lambda: Int64(rng.randrange(2**62)),
            lambda: rng.random(), lambda: "ü😀x"[rng.randrange(3)] * rng.randrange(200),
            lambda: Binary(rng.randbytes(rng.randrange(300))),
            lambda: dt.datetime(2024, 1, 2), lambda: Decimal128(Decimal("1.5")),
            lambda: {f"k{i}é": value(depth + 1) for i in range(rng.randrange(4))},
            lambda: [value(depth + 1) for _ in range(rng.randrange(4))]]
        return makers[pick]()

    for _ in range(500):
        doc = {"_id": rng.randrange(1000), **{f"c{i}": value(0) for i in range(8)}}
        assert _upper_bound(doc) >= len(bson.encode(doc)), doc
