"""The runtime with channels (parallel apply) over an in-memory log and a fake transactional
target that keeps one position row per channel: routing by shard, critical seqnos, restart
from the lowest channel, clean offline, changing the channel count, failures."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from consumers.applier import StatementPolicy
from consumers.config import GroupConfig
from consumers.errors import PositionConflict, TransientError
from consumers.memory.applier import MemoryApplier, MemoryStore
from consumers.memory.config import MemoryTarget
from consumers.position import Position
from consumers.runtime import ConsumerRuntime, FeedSettings
from consumers.runtime.shards import shard_channel
from replicator.config import ConfigError
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.reader import ThlRecord

from .test_overlapped_commits import TwoStepCommits
from .test_runtime import TRACKING, MemoryControl, MemoryFeed, MemoryPositions

SCHEMAS = ("alpha", "beta", "gamma", "delta")


def _row(schema: str, key: int) -> RowChange:
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "v", "VARCHAR")]
    return RowChange(RowAction.INSERT, schema, "t", column_specs=specs,
                     column_values=[[key, f"v{key}"]])


def _rec(seqno: int, *schemas: str, data: list[Any] | None = None) -> ThlRecord:
    """Seqno ``seqno`` at offset ``seqno``: one row (key = seqno) in each schema."""
    event = ThlEvent(seqno=seqno, epoch=0, source_id="s", event_id=f"f:{seqno};0",
                     shard_id=schemas[0] if schemas else "", tstamp=0,
                     data=data if data is not None else [_row(s, seqno) for s in schemas])
    return ThlRecord(seqno, seqno, 0, event, size=100)


def _log(count: int) -> list[ThlRecord]:
    """``count`` seqnos, round robin over the four schemas."""
    return [_rec(i, SCHEMAS[i % 4]) for i in range(count)]


def _pos(seqno: int) -> Position:
    return Position(seqno=seqno, epoch=0, event_id=f"f:{seqno};0", source_id="s")


class Target:
    """One transactional target shared by every channel's applier: rows, one position row
    per channel, the shard assignments, and every commit in order."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.rows: dict[int, Position] = {}
        self.assigned: dict[str, int] = {}
        self.critical: set[str] = set()
        #: (channel, seqnos applied) of every commit, in commit order.
        self.commits: list[tuple[int, list[int]]] = []
        self.lock = threading.Lock()

    # -- the channel store ----------------------------------------------------------------

    def positions(self) -> dict[int, Position]:
        with self.lock:
            return dict(self.rows)

    def assignments(self) -> dict[str, int]:
        with self.lock:
            return dict(self.assigned)

    def critical_shards(self) -> set[str]:
        return set(self.critical)

    def assign(self, shard: str, channel: int) -> int:
        with self.lock:
            return self.assigned.setdefault(shard, channel)

    def rechannel(self, channels: int) -> None:
        with self.lock:
            common = next(iter(self.rows.values()))
            self.rows = dict.fromkeys(range(channels), common)
            self.assigned.clear()

    def clear_assignments(self, at_or_above: int) -> None:
        with self.lock:
            self.assigned = {s: c for s, c in self.assigned.items() if c < at_or_above}

    # -- what the tests look at -------------------------------------------------------------

    def seqnos_of(self, channel: int) -> list[int]:
        return [s for c, seqnos in self.commits if c == channel for s in seqnos]

    def commit_index(self, seqno: int) -> int:
        return next(i for i, (_, seqnos) in enumerate(self.commits) if seqno in seqnos)


class ChannelApplier(MemoryApplier):
    """One channel of the fake target; ``slow`` seqnos take that long to apply."""

    def __init__(self, target: Target, task: int, cfg: MemoryTarget | None = None,
                 slow: dict[int, float] | None = None) -> None:
        super().__init__(cfg or MemoryTarget(), store=target.store)
        # Statements reach it (and are only recorded), like a MySQL target's.
        self.capabilities = dataclasses.replace(self.capabilities, channels=True,
                                                statements=StatementPolicy.APPLY)
        self.shared, self.task, self.slow = target, task, slow or {}

    def channel_store(self) -> Target:
        return self.shared

    def position(self) -> Position | None:
        with self.shared.lock:
            pos = self.shared.rows.get(self.task)
        self._expected = pos.seqno if pos else None
        return pos

    def apply(self, event: ThlEvent) -> None:
        time.sleep(self.slow.get(event.seqno, 0))
        super().apply(event)

    def commit(self, position: Position) -> None:
        events, self._open = self._open, None
        if events is None:
            raise RuntimeError("no open block")
        if self._random.random() < self.cfg.transient_failure_rate:
            raise TransientError("fake: commit failed on purpose (transient)")
        with self.shared.lock:
            stored = self.shared.rows.get(self.task)
            if (stored.seqno if stored else None) != self._expected:
                raise PositionConflict(f"fake: channel {self.task} moved", seqno=position.seqno)
            for event in events:
                for item in event.data:
                    if isinstance(item, RowChange):
                        self._rows(item)
                self.store.applied[event.seqno] = self.store.applied.get(event.seqno, 0) + 1
            self.shared.commits.append((self.task, [e.seqno for e in events]))
            self.shared.rows[self.task] = position
        self._expected = position.seqno

    def reset(self) -> None:
        with self.shared.lock:
            self.shared.rows.clear()


def _group(channels: int, **settings: Any) -> GroupConfig:
    return GroupConfig(target={"type": "memory"}, channels=channels,
                       **{"block_commit_ms": 30, **settings})


def _run(records: list[ThlRecord], target: Target, channels: int,
         until: Callable[[MemoryControl], bool], group: GroupConfig | None = None,
         appliers: list[ChannelApplier] | None = None,
         control: MemoryControl | None = None,
         positions: MemoryPositions | None = None) -> MemoryControl:
    """Run the group until ``until(control)``, then stop it (a clean stop)."""
    feed, control = MemoryFeed(records), control or MemoryControl()
    appliers = appliers or [ChannelApplier(target, c) for c in range(channels)]
    runtime = ConsumerRuntime(
        "g", group or _group(channels), FeedSettings({}, "thl.t", "grp", "t", TRACKING),
        appliers[0], control, positions or MemoryPositions(),  # type: ignore[arg-type]
        feed_factory=lambda _: feed,  # type: ignore[arg-type,return-value]
        channel_appliers=appliers[1:])
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not until(control):
        assert thread.is_alive(), "the runtime thread died"
        assert time.monotonic() < deadline, (target.commits, control.status)
        time.sleep(0.01)
    runtime.stop()
    thread.join(15)
    assert not thread.is_alive()
    return control


def _seqnos(target: Target) -> dict[int, int]:
    """Each channel's stored seqno."""
    return {c: p.seqno for c, p in target.rows.items()}


def _applied(seqno: int) -> Callable[[MemoryControl], bool]:
    return lambda c: c.status.get("appliedLastSeqno", -1) >= seqno


def _in_error(c: MemoryControl) -> bool:
    return c.status.get("state") == "OFFLINE:ERROR"


class ComponentMirrors(MemoryPositions):
    """The ZooKeeper mirror writes, per component."""

    def __init__(self) -> None:
        super().__init__()
        self.by_component: dict[str, list[int]] = {}

    def mirror_position(self, component: str, pos: Any) -> None:
        self.by_component.setdefault(component, []).append(pos.seqno)


def test_position_mirrors_are_held_back_between_blocks_and_end_at_the_last_commit() -> None:
    # A block a seqno: 80 blocks, 26-27 on each channel. A mirror write per channel and
    # block kept kazoo's thread busy for a third of a 2-channel run; like the single
    # stream's, each mirror goes at most once a second while blocks follow each other,
    # and at once when the stream is quiet or stops.
    target, positions = Target(), ComponentMirrors()
    _run(_log(80), target, 3, _applied(79), group=_group(3, block_commit_events=1),
         positions=positions)
    assert sorted(target.store.applied) == list(range(80))
    mirrors = positions.by_component
    assert set(mirrors) == {"consumers/g", *(f"consumers/g/channels/{c}" for c in range(3))}
    assert mirrors["consumers/g"][-1] == 79
    for component, seqnos in mirrors.items():
        assert seqnos == sorted(seqnos), (component, seqnos)
        # Not one per block: the first, one a second (a slow machine), the last.
        assert len(seqnos) <= 8, (component, seqnos)
    assert sorted(s[-1] for c, s in mirrors.items() if c != "consumers/g") == \
        sorted(p.seqno for p in target.rows.values())


def test_shards_apply_on_their_channels_in_order_and_each_seqno_once() -> None:
    target = Target()
    control = _run(_log(40), target, 3, _applied(39))
    assert sorted(target.store.applied) == list(range(40))
    assert set(target.store.applied.values()) == {1}
    assert target.assigned == {s: shard_channel(s, 3) for s in SCHEMAS}
    for channel, seqnos in target.commits:
        # Every seqno where its shard lives (the first seqnos of a fresh group aside: it
        # applies its first seqno alone, then starts every channel there).
        assert all(target.assigned[SCHEMAS[s % 4]] == channel for s in seqnos if s > 0)
    for channel in range(3):
        mine = [s for s in target.seqnos_of(channel) if s > 0]
        assert mine == sorted(mine)  # THL order within a channel, so within a shard
    # A clean stop: every channel at the last seqno.
    assert _seqnos(target) == dict.fromkeys(range(3), 39)
    status = control.status
    assert status["channels"] == 3 and status["appliedLastSeqno"] == 39
    assert {r["channel"]: sorted(r["shards"]) for r in status["channelStatus"]} == {
        c: sorted(s for s in SCHEMAS if shard_channel(s, 3) == c) for c in range(3)}


def test_a_seqno_of_two_shards_waits_for_every_channel_and_applies_alone() -> None:
    records = _log(6) + [_rec(6, "alpha", "delta")] + [_rec(i, SCHEMAS[i % 4])
                                                        for i in range(7, 14)]
    target = Target()
    # Seqno 5 (beta) is slow: the two-shard seqno 6 must wait for its commit.
    appliers = [ChannelApplier(target, c, slow={5: 0.3}) for c in range(3)]
    control = _run(records, target, 3, _applied(13), appliers=appliers,
                   group=_group(3, block_commit_events=50))
    critical = target.commit_index(6)
    assert target.commits[critical] == (0, [6])  # alone, on channel 0
    assert all(target.commit_index(s) < critical for s in range(6))
    assert all(target.commit_index(s) > critical for s in range(7, 14))
    assert set(target.store.applied.values()) == {1} and len(target.store.applied) == 14
    assert control.status["criticalEvents"] == 1


def test_a_statement_is_critical_too() -> None:
    records = _log(4) + [_rec(4, data=[Statement("ALTER TABLE beta.t ADD c INT", "beta")])] \
        + [_rec(i, SCHEMAS[i % 4]) for i in range(5, 9)]
    target = Target()
    _run(records, target, 2, _applied(8))
    critical = target.commit_index(4)
    assert target.commits[critical] == (0, [4])
    assert all(target.commit_index(s) < critical for s in range(4))
    assert all(target.commit_index(s) > critical for s in range(5, 9))


def test_a_restart_starts_at_the_lowest_channel_and_each_skips_what_it_applied() -> None:
    target = Target()
    target.assigned = {"alpha": 0, "beta": 1, "gamma": 2, "delta": 2}
    # As a crash left them: channel 0 applied up to 8, channel 1 up to 13, channel 2 up to 10.
    target.rows = {0: _pos(8), 1: _pos(13), 2: _pos(10)}
    done = {s for s in range(20) if s <= target.rows[target.assigned[SCHEMAS[s % 4]]].seqno}
    control = _run(_log(20), target, 3, _applied(19))
    assert set(target.store.applied) == set(range(20)) - done
    assert set(target.store.applied.values()) == {1}
    assert _seqnos(target) == dict.fromkeys(range(3), 19)
    assert control.status["appliedLastSeqno"] == 19


def test_a_stop_after_a_crash_reads_on_to_the_highest_channel_first() -> None:
    target = Target()
    target.assigned = {"alpha": 0, "beta": 1, "gamma": 2, "delta": 2}
    target.rows = {0: _pos(4), 1: _pos(13), 2: _pos(6)}
    # Stopped as soon as it is online: it still passes seqno 13, so the stop is clean.
    _run(_log(14), target, 3, lambda c: c.status.get("state") == "ONLINE")
    assert _seqnos(target) == dict.fromkeys(range(3), 13)


def test_the_channel_count_changes_after_a_clean_stop() -> None:
    target = Target()
    _run(_log(12), target, 3, _applied(11))
    assert _seqnos(target) == dict.fromkeys(range(3), 11)
    _run(_log(20), target, 2, _applied(19))
    assert _seqnos(target) == dict.fromkeys(range(2), 19)
    assert target.assigned == {s: shard_channel(s, 2) for s in SCHEMAS}
    assert sorted(target.store.applied) == list(range(20))
    assert set(target.store.applied.values()) == {1}
    _run(_log(24), target, 1, _applied(23), group=_group(1))
    assert _seqnos(target) == {0: 23}
    assert set(target.store.applied.values()) == {1} and len(target.store.applied) == 24


def test_the_channel_count_cannot_change_after_a_crash() -> None:
    target = Target()
    target.rows = {0: _pos(4), 1: _pos(9), 2: _pos(6)}
    control = _run(_log(12), target, 2, _in_error)
    assert control.status["pendingErrorCode"] == "CHANNELS"
    assert "cannot change from 3 to 2" in control.status["pendingExceptionMessage"]
    assert target.rows == {0: _pos(4), 1: _pos(9), 2: _pos(6)} and not target.commits


def test_a_data_error_stops_the_group_at_that_seqno() -> None:
    target = Target()
    cfg = MemoryTarget(refuse_seqnos=[13])
    appliers = [ChannelApplier(target, c, cfg) for c in range(3)]
    control = _run(_log(30), target, 3, _in_error, appliers=appliers)
    assert control.status["pendingErrorSeqno"] == 13
    assert 13 not in target.store.applied
    channel = target.assigned["beta"]
    assert target.rows[channel].seqno < 13  # right before it, on its channel
    assert all(s in target.store.applied for s in range(13)
               if target.assigned[SCHEMAS[s % 4]] == channel)


def test_transient_failures_converge_with_each_seqno_applied_once() -> None:
    target = Target()
    cfg = MemoryTarget(transient_failure_rate=0.2, seed=5)
    appliers = [ChannelApplier(target, c, cfg) for c in range(3)]
    _run(_log(60), target, 3, _applied(59), appliers=appliers,
         group=_group(3, block_commit_events=3))
    assert sorted(target.store.applied) == list(range(60))
    assert set(target.store.applied.values()) == {1}


def test_channels_need_a_target_that_has_them() -> None:
    with pytest.raises(ConfigError, match="channels: 2 needs a target that applies in "
                                          "parallel, and memory does not"):
        ConsumerRuntime("g", _group(2), FeedSettings({}, "thl.t", "grp", "t", TRACKING),
                        MemoryApplier(MemoryTarget()), MemoryControl(),  # type: ignore[arg-type]
                        MemoryPositions(),  # type: ignore[arg-type]
                        channel_appliers=[MemoryApplier(MemoryTarget())])


class TwoStepChannelApplier(TwoStepCommits, ChannelApplier):
    """A channel that commits in two steps (``Pipelined``); counts the blocks it began
    while the one before was still pending."""

    overlapped = 0

    def begin(self) -> None:
        super().begin()
        self.overlapped += self.pending is not None


def test_channels_overlap_commits_and_still_apply_each_seqno_once() -> None:
    target = Target()
    cfg = MemoryTarget(transient_failure_rate=0.1, seed=7)
    two_step = [TwoStepChannelApplier(target, c, cfg) for c in range(3)]
    appliers: list[ChannelApplier] = list(two_step)
    control = _run(_log(60), target, 3, _applied(59), appliers=appliers,
                   group=_group(3, block_commit_events=3))
    assert sorted(target.store.applied) == list(range(60))
    assert set(target.store.applied.values()) == {1}
    assert sum(a.overlapped for a in two_step) > 0
    # A clean stop finished every pending commit: each channel at the last seqno.
    assert _seqnos(target) == dict.fromkeys(range(3), 59)
    assert control.status["appliedLastSeqno"] == 59
