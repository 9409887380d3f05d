"""The MongoDB applier against the stack's real FerretDB, driven block by block.

These tests call the applier the way the runtime does (connect, position, begin, apply,
commit) with hand-made THL events, to reach exact situations: a stale write in the middle of
a block, a crash between the data and the position, a second writer, a replay.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from bson.int64 import Int64
from pymongo import MongoClient

from consumers.errors import DataError, PositionConflict, TerminalError
from consumers.heartbeat import Heartbeat
from consumers.mongodb.applier import MongoApplier
from consumers.mongodb.config import MongoTarget
from consumers.position import Position
from consumers.registry import ApplierContext
from replicator.config import ServiceSettings
from stack.services.ferretdb import FerretDB
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.records import META_PROVISION, META_PROVISIONING

ITEMS = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "name", "VARCHAR", 40),
         ColumnSpec(3, "price", "DECIMAL", 12, 2)]
PAIRS = [ColumnSpec(1, "b", "VARCHAR", 10, primary_key=True),
         ColumnSpec(2, "a", "INT", primary_key=True), ColumnSpec(3, "v", "TEXT")]
LOOSE = [ColumnSpec(1, "a", "INT"), ColumnSpec(2, "b", "VARCHAR", 20)]


class Target:
    """One service's database on FerretDB, and appliers for it.

    ``upserts``: write with guarded upserts, as on MongoDB, instead of FerretDB's
    insert-first path, so both write paths run against a real server.
    """

    def __init__(self, ferretdb: FerretDB, upserts: bool = False) -> None:
        self.upserts = upserts
        self.service = f"m{uuid.uuid4().hex[:10]}"
        self.schema = f"src_{self.service}"
        self.url = f"mongodb://127.0.0.1:{ferretdb.port}/"
        self.client: MongoClient[dict[str, Any]] = ferretdb.client()

    def applier(self, **target: Any) -> MongoApplier:
        cfg = MongoTarget(url=self.url, **target)
        applier = MongoApplier(cfg, ApplierContext(ServiceSettings(service=self.service), "g"))
        applier.connect()
        if self.upserts:
            applier.traits = replace(applier.server, scanning_updates=False)
        return applier

    def docs(self, table: str, live: bool = True) -> list[dict[str, Any]]:
        query = {"_deleted": {"$exists": False}} if live else {}
        return sorted(self.client[self.schema][table].find(query), key=lambda d: repr(d["_id"]))

    def close(self) -> None:
        self.client.drop_database(self.schema)
        self.client.drop_database(f"tungsten_{self.service}")
        self.client.close()


@pytest.fixture(params=["insert-first", "upserts"])
def target(request: pytest.FixtureRequest, ferretdb: FerretDB) -> Iterator[Target]:
    t = Target(ferretdb, upserts=request.param == "upserts")
    try:
        yield t
    finally:
        t.close()


def change(schema: str, table: str, action: RowAction, specs: list[ColumnSpec],
           after: list[list[ThlValue]] | None = None,
           before: list[list[ThlValue]] | None = None) -> RowChange:
    return RowChange(action, schema, table, column_specs=specs if after else [],
                     key_specs=specs if before else [], column_values=after or [],
                     key_values=before or [])


def event(seqno: int, *changes: RowChange) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="src", event_id=f"bin.000001:{seqno:016d};0",
                    shard_id="s", tstamp=1_700_000_000_000_000, data=list(changes))


def block(applier: MongoApplier, *events: ThlEvent) -> None:
    """One block: begin, apply, commit at the last event's position."""
    applier.begin()
    for e in events:
        applier.apply(e)
    applier.commit(Position.of(events[-1]))


def test_a_stale_write_in_the_middle_of_a_block_does_not_stop_the_writes_after_it(
        target: Target) -> None:
    s = target.schema
    first = target.applier()
    assert first.position() is None
    block(first, event(0, change(s, "items", RowAction.INSERT, ITEMS,
                                 [[i, f"v{i}", "1.00"] for i in range(5)])))
    block(first, event(10, change(s, "items", RowAction.UPDATE, ITEMS, [[2, "newer", "2.00"]],
                                  [[2, "v2", "1.00"]])))
    # A replay from seqno 5 (after `trepctl reset` and `online --from-seqno 5`): id 2 is
    # already at seqno 10, in the middle of the block; the writes around it must land.
    replay = target.applier()
    replay.reset()
    block(replay, event(5, change(s, "items", RowAction.UPDATE, ITEMS,
                                  [[1, "one", "1.50"], [2, "stale", "0.01"],
                                   [3, "three", "3.50"]],
                                  [[1, "v1", "1.00"], [2, "v2", "1.00"], [3, "v3", "1.00"]])),
          event(6, change(s, "items", RowAction.INSERT, ITEMS, [[7, "seven", "7.00"]])))
    docs = {d["_id"]: (d["name"], d["price"], d["_seqno"]) for d in target.docs("items")}
    assert docs == {0: ("v0", "1.00", 0), 1: ("one", "1.50", 5), 2: ("newer", "2.00", 10),
                    3: ("three", "3.50", 5), 4: ("v4", "1.00", 0), 7: ("seven", "7.00", 6)}
    stored = replay.position()
    assert stored is not None and stored.seqno == 6


def test_deletes_leave_tombstones_so_an_older_replay_cannot_resurrect_a_row(
        target: Target) -> None:
    s = target.schema
    applier = target.applier()
    insert = event(1, change(s, "items", RowAction.INSERT, ITEMS, [[1, "a", "1.00"],
                                                                  [2, "b", "2.00"]]))
    block(applier, insert)
    block(applier, event(2, change(s, "items", RowAction.DELETE, ITEMS,
                                   before=[[1, "a", "1.00"]])))
    assert [d["_id"] for d in target.docs("items")] == [2]
    tomb = [d for d in target.docs("items", live=False) if d["_id"] == 1]
    assert tomb == [{"_id": 1, "_seqno": 2, "_deleted": True}]
    applier.reset()
    block(applier, insert)  # the older insert again: id 1 stays deleted
    assert [d["_id"] for d in target.docs("items")] == [2]


def test_a_block_collapses_to_the_last_write_per_document_and_key_changes_move_rows(
        target: Target) -> None:
    s = target.schema
    applier = target.applier()
    block(applier,
          event(1, change(s, "pairs", RowAction.INSERT, PAIRS, [["x", 1, "v"], ["y", 1, None]])),
          event(2, change(s, "pairs", RowAction.UPDATE, PAIRS, [["z", 1, "moved"]],
                          [["x", 1, "v"]])),
          event(3, change(s, "pairs", RowAction.INSERT, PAIRS, [["t", 2, "tmp"]]),
                change(s, "pairs", RowAction.DELETE, PAIRS, before=[["t", 2, "tmp"]])))
    live = target.docs("pairs")
    # _id: the key's columns in table order (b, a), as a sub-document.
    assert [(d["_id"], d["v"], d["_seqno"]) for d in live] == [
        ({"b": "y", "a": 1}, None, 1), ({"b": "z", "a": 1}, "moved", 2)]
    assert [list(d["_id"]) for d in live] == [["b", "a"], ["b", "a"]]
    gone = {repr(d["_id"]): d["_seqno"] for d in target.docs("pairs", live=False)
            if d.get("_deleted")}
    assert gone == {repr({"b": "x", "a": 1}): 2, repr({"b": "t", "a": 2}): 3}


def test_keyless_rows_are_applied_once_even_when_a_block_is_applied_again(
        target: Target) -> None:
    s = target.schema
    applier = target.applier()
    rows: list[list[ThlValue]] = [[1, "dup"], [1, "dup"], [2, None]]
    events = [event(1, change(s, "loose", RowAction.INSERT, LOOSE, rows)),
              event(2, change(s, "loose", RowAction.UPDATE, LOOSE, [[1, "one"]], [[1, "dup"]])),
              event(3, change(s, "loose", RowAction.DELETE, LOOSE, before=[[2, None]])),
              event(4, change(s, "loose", RowAction.INSERT, LOOSE, [[3, "x"]]))]
    applier.begin()
    for e in events:
        applier.apply(e)
    # The data is written, then the process dies before the position (apply-before-position).
    applier._write_block = _die_before_position(applier._write_block)  # type: ignore[method-assign]
    with pytest.raises(_Died):
        applier.commit(Position.of(events[-1]))
    again = target.applier()
    assert again.position() is None
    block(again, *events)
    block(again, *events[2:])  # and a late replay of the last two seqnos
    values = sorted((d["a"], d["b"] or "") for d in target.docs("loose"))
    assert values == [(1, "dup"), (1, "one"), (3, "x")]


class _Died(Exception):
    pass


def _die_before_position(write_block: Any) -> Any:
    def wrapped(position: Position, session: Any, marks: Any) -> None:
        applier = write_block.__self__
        applier._advance = _raise  # the data lands, the position never does
        write_block(position, session, marks)
    return wrapped


def _raise(*_: Any) -> None:
    raise _Died


def test_a_second_writer_of_the_position_is_refused(target: Target) -> None:
    s = target.schema
    one, two = target.applier(), target.applier()
    assert one.position() is None and two.position() is None
    block(one, event(1, change(s, "items", RowAction.INSERT, ITEMS, [[1, "a", "1.00"]])))
    with pytest.raises(PositionConflict, match="expected stored seqno none, found 1"):
        block(two, event(1, change(s, "items", RowAction.INSERT, ITEMS, [[1, "a", "1.00"]])))
    stored = two.position()
    assert stored is not None and stored.seqno == 1
    block(two, event(2, change(s, "items", RowAction.INSERT, ITEMS, [[2, "b", "2.00"]])))
    with pytest.raises(PositionConflict, match="expected stored seqno 1, found 2"):
        block(one, event(2, change(s, "items", RowAction.INSERT, ITEMS, [[2, "b", "2.00"]])))


def test_transactions_on_fails_fast_against_ferretdb_and_auto_picks_off(
        target: Target) -> None:
    with pytest.raises(TerminalError, match=re.escape(
            "transactions: on, but FerretDB v1.24.0 has no multi-document transactions")):
        target.applier(transactions="on")
    auto = target.applier(transactions="auto")
    assert auto.server.ferretdb and auto._transactions is False
    with pytest.raises(TerminalError, match="no Decimal128"):
        target.applier(decimal="decimal128")


def test_values_ferretdb_takes_and_keys_it_refuses(target: Target) -> None:
    s = target.schema
    applier = target.applier(json_columns=[f"{s}.docs.j"])
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "t", "TEXT"),
             ColumnSpec(3, "j", "TEXT")]
    # U+0000 in a string: FerretDB 1.24 on SQLite stores it exactly.
    block(applier, event(1, change(s, "docs", RowAction.INSERT, specs,
                                   [[1, "a\x00b", '{"k": {"z": [1, 2.5]}}']])))
    assert target.docs("docs") == [{"_id": 1, "_seqno": 1, "id": 1, "t": "a\x00b",
                                     "j": {"k": {"z": [1, 2.5]}}}]
    applier.begin()
    with pytest.raises(DataError) as refused:
        applier.apply(event(2, change(s, "docs", RowAction.INSERT, specs,
                                      [[2, "x", '{"a.b": 1}']])))
    message = str(refused.value)
    assert refused.value.seqno == 2 and refused.value.event_id == "bin.000001:0000000000000002;0"
    assert f"table {s}.docs, column j" in message and "JSON key 'a.b'" in message
    applier.rollback()


def test_heartbeats_land_in_the_tracking_database(target: Target) -> None:
    import datetime as dt
    applier = target.applier()
    applier.position()
    now = dt.datetime.now(dt.UTC)
    applier.begin()
    applier.heartbeat(Heartbeat(id=1, name="hb", salt=7, seqno=3, event_id="e3",
                                source_tstamp=now - dt.timedelta(seconds=2), target_tstamp=now,
                                lag_millis=2000))
    applier.commit(Position(seqno=3, epoch=0, event_id="e3"))
    beats = list(target.client[f"tungsten_{target.service}"]["heartbeat"].find())
    assert len(beats) == 1 and beats[0]["_id"] == Int64(1)
    assert (beats[0]["name"], beats[0]["salt"], beats[0]["lag_millis"], beats[0]["seqno"]) == \
        ("hb", 7, 2000, 3)


def test_writes_ahead_of_the_commit_keep_their_order_and_their_errors(target: Target) -> None:
    s = target.schema
    applier = target.applier(batch_ops=2)
    applier.position()
    events = [event(1, change(s, "items", RowAction.INSERT, ITEMS, [[1, "a", "1.00"],
                                                                    [2, "b", "2.00"]])),
              event(2, change(s, "items", RowAction.UPDATE, ITEMS, [[1, "a2", "1.50"]],
                              [[1, "a", "1.00"]])),
              event(3, change(s, "loose", RowAction.INSERT, LOOSE, [[1, "x"], [1, "x"]])),
              event(4, change(s, "items", RowAction.DELETE, ITEMS, before=[[2, "b", "2.00"]]),
                    change(s, "loose", RowAction.UPDATE, LOOSE, [[1, "y"]], [[1, "x"]])),
              event(5, change(s, "items", RowAction.INSERT, ITEMS, [[2, "again", "3.00"]]))]
    applier.begin()
    for e in events[:4]:
        applier.apply(e)
    applier._wait()  # the writer has taken seqnos 1-3 while 4 was being converted
    assert [(d["_id"], d["name"]) for d in target.docs("items")] == [(1, "a2"), (2, "b")]
    assert applier.position() is None  # nothing committed yet
    applier.apply(events[4])
    applier.commit(Position.of(events[4]))
    assert [(d["_id"], d["name"], d["_seqno"]) for d in target.docs("items")] == [
        (1, "a2", 2), (2, "again", 5)]
    assert sorted(d["b"] for d in target.docs("loose")) == ["x", "y"]
    stored = applier.position()
    assert stored is not None and stored.seqno == 5
    # A write refused in the writer thread stops the block with the seqno of that write: a
    # unique index of the user's own refuses a duplicate name.
    target.client[s]["items"].create_index("name", unique=True)
    applier.begin()
    applier.apply(event(6, change(s, "items", RowAction.INSERT, ITEMS, [[7, "a2", "1.00"]])))
    applier.apply(event(7, change(s, "items", RowAction.INSERT, ITEMS, [[8, "ok", "1.00"]])))
    with pytest.raises(DataError) as refused:
        applier.commit(Position.of(event(7)))
    assert refused.value.seqno == 6 and f"seqno 6 (event {refused.value.event_id}), table " \
        f"{s}.items: a unique index other than _id refuses the document" in str(refused.value)
    applier.rollback()
    stored = applier.position()
    assert stored is not None and stored.seqno == 5


# -- provisioning ---------------------------------------------------------------------------


def chunk(seqno: int, schema: str, table: str, specs: list[ColumnSpec],
          rows: list[list[ThlValue]], number: int, end: bool) -> ThlEvent:
    """A provisioned chunk, marked as ``extractor.provision`` marks it."""
    e = event(seqno, change(schema, table, RowAction.INSERT, specs, rows))
    e.metadata[META_PROVISION] = json.dumps({
        "id": "p1", "table": [schema, table], "chunk": number, "first": number == 0,
        "end": end, "rows": len(rows)})
    return e


def provisioning(e: ThlEvent, schema: str, table: str) -> ThlEvent:
    """A binlog transaction while ``table`` is being provisioned."""
    e.metadata[META_PROVISIONING] = json.dumps([[schema, table]])
    return e


def _die_writing(applier: MongoApplier, *events: ThlEvent) -> None:
    """Apply a block whose data lands and whose position never does (a crash)."""
    applier.begin()
    for e in events:
        applier.apply(e)
    applier._write_block = _die_before_position(applier._write_block)  # type: ignore[method-assign]
    with pytest.raises(_Died):
        applier.commit(Position.of(events[-1]))


def test_provisioning_empties_a_drifted_collection_once_even_across_a_crash(
        target: Target) -> None:
    s = target.schema
    applier = target.applier()
    applier.position()
    block(applier, event(1, change(s, "items", RowAction.INSERT, ITEMS,
                                   [[i, "old", "1.00"] for i in range(10)])),
          event(2, change(s, "items", RowAction.DELETE, ITEMS, before=[[9, "old", "1.00"]])))
    # Drift: a document the replicator never wrote, a value changed behind its back.
    coll = target.client[s]["items"]
    coll.insert_one({"_id": 100, "id": 100, "name": "ghost", "price": "0.00"})
    coll.update_one({"_id": 5}, {"$set": {"name": "wrong"}})
    provision = [
        provisioning(event(3, change(s, "items", RowAction.UPDATE, ITEMS, [[1, "binlog", "1"]],
                                     [[1, "old", "1.00"]])), s, "items"),
        chunk(4, s, "items", ITEMS, [[i, "src", "2.00"] for i in range(5)], 0, False),
        # Changes of rows the target may not have: an insert, a delete of a row never seen.
        provisioning(event(5, change(s, "items", RowAction.INSERT, ITEMS, [[20, "new", "3"]]),
                           change(s, "items", RowAction.DELETE, ITEMS,
                                  before=[[30, "none", "0"]])), s, "items"),
        chunk(6, s, "items", ITEMS, [[i, "src", "2.00"] for i in range(5, 8)], 1, True)]
    # Everything lands, the position stays at seqno 2: the next process replays the first
    # chunk over the later one's rows.
    _die_writing(applier, *provision)
    expected = {**{i: ("src", 4) for i in range(5)}, **{i: ("src", 6) for i in range(5, 8)},
                20: ("new", 5)}

    def live() -> dict[Any, tuple[str, int]]:
        return {d["_id"]: (d["name"], d["_seqno"]) for d in target.docs("items")}

    assert live() == expected
    again = target.applier()
    stored = again.position()
    assert stored is not None and stored.seqno == 2
    block(again, *provision[:2])
    block(again, *provision[2:])
    assert live() == expected
    gone = {d["_id"]: d["_seqno"] for d in target.docs("items", live=False) if d.get("_deleted")}
    assert gone == {8: 4, 9: 2, 30: 5}
    marker = target.client[f"tungsten_{target.service}"]["provisioned"].find_one(
        {"_id": f"{s}.items"})
    assert marker is not None and marker["_seqno"] == 4
    # Without the marker (a crash between the clear and its marker), the clear runs again
    # and still leaves the chunks' rows alone: they are not older than the chunk.
    target.client[f"tungsten_{target.service}"]["provisioned"].delete_many({})
    again.reset()
    block(again, *provision)
    assert live() == expected
    # A full replay from the start changes nothing either.
    again.reset()
    block(again, event(1, change(s, "items", RowAction.INSERT, ITEMS,
                                 [[i, "old", "1.00"] for i in range(10)])), *provision)
    assert live() == expected


def test_provisioning_a_table_without_a_key(target: Target) -> None:
    s = target.schema
    applier = target.applier()
    applier.position()
    block(applier, event(1, change(s, "loose", RowAction.INSERT, LOOSE, [[1, "a"], [2, "b"]])),
          event(2, change(s, "loose", RowAction.UPDATE, LOOSE, [[1, "x"]], [[1, "a"]])))
    target.client[s]["loose"].insert_one({"_id": "foreign", "a": 9, "b": "ghost"})
    provision = [
        # A delete of a row the target does not have: no divergence while provisioning.
        provisioning(event(3, change(s, "loose", RowAction.DELETE, LOOSE, before=[[7, "no"]])),
                     s, "loose"),
        chunk(4, s, "loose", LOOSE, [[1, "src"], [3, "src"], [3, "src"]], 0, True),
        provisioning(event(5, change(s, "loose", RowAction.UPDATE, LOOSE, [[3, "upd"]],
                                     [[3, "src"]])), s, "loose")]
    _die_writing(applier, *provision)
    expected = [(1, "src"), (3, "src"), (3, "upd")]
    assert sorted((d["a"], d["b"]) for d in target.docs("loose")) == expected
    again = target.applier()
    stored = again.position()
    assert stored is not None and stored.seqno == 2
    block(again, *provision)
    assert sorted((d["a"], d["b"]) for d in target.docs("loose")) == expected
    # From the start: the update at seqno 2 was superseded by the clear (its mark says so).
    again.reset()
    block(again, event(1, change(s, "loose", RowAction.INSERT, LOOSE, [[1, "a"], [2, "b"]])),
          event(2, change(s, "loose", RowAction.UPDATE, LOOSE, [[1, "x"]], [[1, "a"]])),
          *provision)
    assert sorted((d["a"], d["b"]) for d in target.docs("loose")) == expected
    # Outside provisioning, a row the target lacks is still a divergence.
    again.begin()
    again.apply(event(6, change(s, "loose", RowAction.DELETE, LOOSE, before=[[7, "no"]])))
    with pytest.raises(DataError, match="the target has diverged"):
        again.commit(Position.of(event(6)))
    again.rollback()
