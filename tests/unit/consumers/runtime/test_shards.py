"""Routing seqnos to channels and planning the stored channel rows (pure logic)."""

from __future__ import annotations

import zlib

import pytest

from consumers.position import Position
from consumers.runtime.shards import (
    CRITICAL_CHANNEL,
    ChannelError,
    ShardMap,
    plan_channels,
    shard_channel,
)
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.records import META_CHECK, META_PROVISION


def _row(schema: str, key: int = 1) -> RowChange:
    return RowChange(RowAction.INSERT, schema, "t",
                     column_specs=[ColumnSpec(1, "id", "INT", primary_key=True)],
                     column_values=[[key]])


def _event(*data: RowChange | Statement, last: bool = True,
           metadata: dict[str, str] | None = None) -> ThlEvent:
    return ThlEvent(seqno=5, epoch=0, source_id="s", event_id="f:5;0", shard_id="a", tstamp=0,
                    last_frag=last, metadata=metadata or {}, data=list(data))


class Persisted:
    """trep_shard_channel as a dict; ``taken`` pretends another writer assigned first."""

    def __init__(self, taken: dict[str, int] | None = None) -> None:
        self.rows: dict[str, int] = {}
        self.taken = taken or {}

    def __call__(self, shard: str, channel: int) -> int:
        self.rows.setdefault(shard, self.taken.get(shard, channel))
        return self.rows[shard]


def test_a_shard_goes_to_its_crc32_channel_and_the_assignment_is_stored_first() -> None:
    persisted = Persisted()
    shards = ShardMap(3, {}, set(), persisted)
    route = shards.route(_event(_row("sales"), _row("sales", 2)))
    assert route.channel == zlib.crc32(b"sales") % 3 == shard_channel("sales", 3)
    assert route.critical is None and route.shard == "sales"
    assert persisted.rows == {"sales": route.channel}
    # Known now: not stored again, same channel.
    persisted.rows.clear()
    assert shards.route(_event(_row("sales"))).channel == route.channel
    assert persisted.rows == {}


def test_stored_assignments_win_over_the_hash() -> None:
    other = (shard_channel("sales", 4) + 1) % 4
    shards = ShardMap(4, {"sales": other}, set(), Persisted())
    assert shards.route(_event(_row("sales"))).channel == other
    racing = ShardMap(4, {}, set(), Persisted(taken={"hr": 3}))
    assert racing.route(_event(_row("hr"))).channel == 3
    assert racing.shards()[3] == ["hr"]


@pytest.mark.parametrize(("event", "why"), [
    (_event(_row("a"), _row("b")), "several shards"),
    (_event(Statement("ALTER TABLE a.t ADD c INT", "a")), "a statement"),
    (_event(_row("a"), last=False), "a fragmented transaction"),
    (_event(metadata={META_CHECK: "{}"}), "a consistency check"),
    (_event(metadata={META_PROVISION: "{}"}), "a provisioning mark"),
])
def test_critical_seqnos_apply_alone_on_channel_zero(event: ThlEvent, why: str) -> None:
    route = ShardMap(3, {}, set(), Persisted()).route(event)
    assert (route.channel, route.critical) == (CRITICAL_CHANNEL, why)


def test_a_shard_marked_critical_applies_alone_on_its_own_channel() -> None:
    shards = ShardMap(3, {}, {"ledger"}, Persisted())
    route = shards.route(_event(_row("ledger")))
    assert route.channel == shard_channel("ledger", 3)
    assert route.critical == "a critical shard"


def test_a_seqno_with_nothing_to_apply_has_no_channel() -> None:
    route = ShardMap(3, {}, set(), Persisted()).route(_event())
    assert route.channel is None and route.critical is None


def test_an_assignment_to_a_channel_the_group_lacks_is_refused() -> None:
    with pytest.raises(ChannelError, match="shard 'sales' to channel 5, but the group has 3"):
        ShardMap(3, {"sales": 5}, set(), Persisted())


class Store:
    """The channel store as dicts."""

    def __init__(self, rows: dict[int, Position], assigned: dict[str, int]) -> None:
        self.rows = rows
        self.assigned = assigned

    def positions(self) -> dict[int, Position]:
        return dict(self.rows)

    def assignments(self) -> dict[str, int]:
        return dict(self.assigned)

    def critical_shards(self) -> set[str]:
        return set()

    def assign(self, shard: str, channel: int) -> int:
        return self.assigned.setdefault(shard, channel)

    def rechannel(self, channels: int) -> None:
        common = next(iter(self.rows.values()))
        self.rows = dict.fromkeys(range(channels), common)
        self.assigned = {}

    def clear_assignments(self, at_or_above: int) -> None:
        self.assigned = {s: c for s, c in self.assigned.items() if c < at_or_above}


def _pos(seqno: int) -> Position:
    return Position(seqno=seqno, epoch=0, event_id=f"f:{seqno};0")


def test_the_same_channel_count_keeps_everything() -> None:
    store = Store({0: _pos(3), 1: _pos(9)}, {"a": 1})
    plan_channels(store, 2, "g", "db")
    assert store.rows == {0: _pos(3), 1: _pos(9)} and store.assigned == {"a": 1}


def test_a_fresh_group_keeps_pins_to_channels_it_has() -> None:
    store = Store({}, {"a": 1, "b": 4})
    plan_channels(store, 3, "g", "db")
    assert store.assigned == {"a": 1}


@pytest.mark.parametrize(("before", "after"), [(1, 3), (3, 1), (4, 2)])
def test_the_channel_count_changes_when_every_channel_stopped_at_one_seqno(
        before: int, after: int) -> None:
    store = Store(dict.fromkeys(range(before), _pos(7)), {"a": 0})
    plan_channels(store, after, "g", "db")
    assert store.rows == dict.fromkeys(range(after), _pos(7)) and store.assigned == {}


def test_a_partly_written_fresh_start_is_one_seqno_too() -> None:
    # A fresh group crashed while moving every channel to its first seqno.
    store = Store({1: _pos(0)}, {})
    plan_channels(store, 3, "g", "db")
    assert store.rows == dict.fromkeys(range(3), _pos(0))


def test_the_channel_count_cannot_change_after_a_crash() -> None:
    store = Store({0: _pos(10), 1: _pos(14), 2: _pos(12)}, {"a": 2})
    with pytest.raises(ChannelError) as caught:
        plan_channels(store, 2, "g", "db")
    message = str(caught.value)
    assert "channel 0: seqno 10, channel 1: seqno 14, channel 2: seqno 12" in message
    assert "cannot change from 3 to 2" in message
    assert "Start it again with `channels: 3`" in message
    assert "trepctl offline -group g" in message
    assert caught.value.seqno == 11
    assert store.rows == {0: _pos(10), 1: _pos(14), 2: _pos(12)} and store.assigned == {"a": 2}
