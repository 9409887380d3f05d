"""The runtime with an in-memory log and the fault-injecting memory applier: ordering, blocks,
fragments, gaps, handshake, filters, heartbeats, statements, locks and ZooKeeper faults."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from consumers.config import GroupConfig
from consumers.errors import DataError, PositionConflict
from consumers.memory.applier import MemoryApplier, MemoryStore
from consumers.memory.config import MemoryTarget
from consumers.position import Position
from consumers.runtime import ConsumerRuntime, FeedSettings
from replicator.control import Desired
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.foreign_keys import CascadeRules, ForeignKey, Referential
from thl_topics.reader import ThlRecord
from thl_topics.records import META_FOREIGN_KEYS
from thl_topics.schema_change import ChangeKind, SchemaChange

TRACKING = "tungsten_t"


def _rec(offset: int, seqno: int, fragno: int = 0, last: bool = True, epoch: int = 0,
         data: list[Any] | None = None) -> ThlRecord:
    event = ThlEvent(seqno=seqno, epoch=epoch, source_id="s", event_id=f"f:{seqno}.{fragno};0",
                     shard_id="db", tstamp=0, fragno=fragno, last_frag=last,
                     data=data if data is not None else [_row(seqno * 100 + fragno)])
    return ThlRecord(offset, seqno, fragno, event, size=100)


def _row(key: int, table: str = "t", schema: str = "db", keyed: bool = True) -> RowChange:
    specs = [ColumnSpec(1, "id", "INT", primary_key=keyed), ColumnSpec(2, "v", "VARCHAR")]
    return RowChange(RowAction.INSERT, schema, table, column_specs=specs,
                     column_values=[[key, f"v{key}"]])


def _stored(seqno: int, fragno: int = 0, epoch: int = 0) -> Position:
    return Position(seqno=seqno, epoch=epoch, event_id=f"f:{seqno}.{fragno};0", source_id="s",
                    fragno=fragno)


class MemoryFeed:
    """The THL as a list of records."""

    def __init__(self, records: list[ThlRecord]) -> None:
        self.records = records
        self.at = 0
        self.committed: list[int] = []

    def record_at(self, seqno: int, fragno: int = 0) -> ThlRecord | None:
        return next((r for r in self.records if (r.seqno, r.fragno) >= (seqno, fragno)), None)

    def first_seqno(self) -> int | None:
        return self.records[0].seqno if self.records else None

    def seek(self, seqno: int) -> None:
        self.at = next((i for i, r in enumerate(self.records) if r.seqno >= seqno),
                       len(self.records))

    def follows(self, rec: ThlRecord) -> None:
        self.followed = rec

    def poll(self, timeout: float) -> ThlRecord | None:
        if self.at >= len(self.records):
            time.sleep(min(timeout, 0.01))
            return None
        self.at += 1
        return self.records[self.at - 1]

    def commit(self, next_offset: int) -> None:
        self.committed.append(next_offset)

    def flush_offset(self) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryControl:
    """The control znodes; ``broken`` makes every ZooKeeper call fail as if it were away."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.wanted = Desired()
        self.broken = 0

    def _zk(self) -> None:
        if self.broken:
            self.broken -= 1
            raise ConnectionLoss("ZooKeeper away (test)")

    def publish_status(self, status: dict[str, Any]) -> None:
        self._zk()
        self.status = status

    def mark_alive(self, identity: str) -> None:
        self._zk()

    def watch_desired(self, on_change: Callable[[Desired], None]) -> None:
        self._zk()
        on_change(self.wanted)

    def desired(self) -> Desired:
        self._zk()
        return self.wanted

    def update_desired(self, change: Callable[[Desired], None]) -> Desired:
        self._zk()
        change(self.wanted)
        return self.wanted


class HeldLead:
    """A group lock that is granted at once; a test may take it away or break ZooKeeper."""

    def __init__(self) -> None:
        self.lost = threading.Event()
        self.held = False
        self.acquired = 0
        self.broken = 0

    def acquire(self, timeout: float) -> bool:
        if self.broken:
            self.broken -= 1
            raise ConnectionLoss("ZooKeeper away (test)")
        if not self.held:
            self.lost.clear()
            self.held = True
            self.acquired += 1
        return True

    def release(self) -> None:
        self.held = False

    def still_held(self) -> bool:
        return self.held and not self.lost.is_set()


class MemoryPositions:
    def __init__(self) -> None:
        self.mirrored: list[int] = []
        self.lead = HeldLead()

    def write_position(self, component: str, pos: Any) -> None:
        self.mirrored.append(pos.seqno)

    mirror_position = write_position

    def leadership(self, component: str, identity: str) -> HeldLead:
        return self.lead


def _group(**settings: Any) -> GroupConfig:
    return GroupConfig(target={"type": "memory"}, **{"block_commit_ms": 50, **settings})


def _run(records: list[ThlRecord], until: Callable[[MemoryApplier, MemoryControl], bool],
         stored: Position | None = None, target: MemoryApplier | None = None,
         positions: MemoryPositions | None = None, control: MemoryControl | None = None,
         group: GroupConfig | None = None, feed: MemoryFeed | None = None,
         ) -> tuple[MemoryApplier, MemoryControl, MemoryFeed]:
    feed, control = feed or MemoryFeed(records), control or MemoryControl()
    target = target or MemoryApplier(MemoryTarget())
    target.store.position = stored
    runtime = ConsumerRuntime(
        "g", group or _group(), FeedSettings({}, "thl.t", "grp", "t", TRACKING), target,
        control, positions or MemoryPositions(),  # type: ignore[arg-type]
        feed_factory=lambda _: feed)  # type: ignore[arg-type,return-value]
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not until(target, control):
        assert thread.is_alive(), "the runtime thread died"
        assert time.monotonic() < deadline, (target.store.blocks, control.status)
        time.sleep(0.01)
    runtime.stop()
    thread.join(10)
    assert not thread.is_alive()
    return target, control, feed


def _at(seqno: int) -> Callable[[MemoryApplier, MemoryControl], bool]:
    return lambda t, _: t.store.position is not None and t.store.position.seqno == seqno


def _in_error(_: MemoryApplier, c: MemoryControl) -> bool:
    return c.status.get("state") == "OFFLINE:ERROR"


def _seqnos(target: MemoryApplier) -> list[int]:
    return [s for b in target.store.blocks for s, f in b if f == 0]


def test_fragments_join_one_block_and_blocks_hold_ten_seqnos() -> None:
    records = [_rec(0, 0), _rec(1, 1, 0, last=False), _rec(2, 1, 1, last=False),
               _rec(3, 1, 2)] + [_rec(i + 2, i) for i in range(2, 25)]
    target, _, feed = _run(records, _at(24))
    assert [len({s for s, _ in b}) for b in target.store.blocks][:2] == [10, 10]
    assert target.store.blocks[0][:4] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert _seqnos(target) == list(range(25))
    assert set(target.store.applied.values()) == {1}
    assert feed.committed[-1] == 27  # the record after the last one applied


def test_block_limits_by_rows_and_bytes_close_blocks_early() -> None:
    records = [_rec(i, i) for i in range(12)]
    target, _, _ = _run(records, _at(11), group=_group(block_commit_rows=3))
    assert [len(b) for b in target.store.blocks] == [3, 3, 3, 3]
    target, _, _ = _run(records, _at(11), group=_group(block_commit_bytes=200))
    assert [len(b) for b in target.store.blocks] == [2] * 6


class TrickleFeed(MemoryFeed):
    """A log whose records after ``hold`` arrive only once ``release`` is set."""

    def __init__(self, records: list[ThlRecord], hold: int) -> None:
        super().__init__(records)
        self.hold = hold
        self.release = threading.Event()

    def poll(self, timeout: float) -> ThlRecord | None:
        if self.at >= self.hold and not self.release.is_set():
            self.release.wait(timeout)
            return None
        return super().poll(timeout)


def _blocks_of_a_trickle(group: GroupConfig) -> list[int]:
    """Blocks (in seqnos) of 3 records at once, then 3 more 0.3 s later."""
    records = [_rec(i, i) for i in range(6)]
    feed = TrickleFeed(records, hold=3)
    threading.Timer(0.3, feed.release.set).start()
    target, _, _ = _run(records, _at(5), group=group, feed=feed)
    return [len(b) for b in target.store.blocks]


def test_idle_commit_closes_a_block_as_soon_as_nothing_waits() -> None:
    # A block open for up to 2 s: with idle commits the first three seqnos do not wait
    # for the next three; without, all six wait in one block.
    assert _blocks_of_a_trickle(_group(block_commit_ms=2000, block_commit_idle=True)) == [3, 3]
    assert _blocks_of_a_trickle(_group(block_commit_ms=2000, block_commit_idle=False)) == [6]


def test_restart_resumes_after_the_stored_seqno_and_skips_nothing() -> None:
    records = [_rec(i, i) for i in range(8)]
    target, _, _ = _run(records, _at(7), stored=_stored(4))
    assert _seqnos(target) == [5, 6, 7]


def test_restart_right_after_a_fragmented_seqno_checks_its_last_fragment() -> None:
    records = [_rec(0, 0), _rec(1, 1, 0, last=False), _rec(2, 1, 1, last=False),
               _rec(3, 1, 2), _rec(4, 2)]
    target, _, _ = _run(records, _at(2), stored=_stored(1, fragno=2))
    assert _seqnos(target) == [2]


def test_a_gap_stops_at_the_missing_seqno() -> None:
    records = [_rec(0, 0), _rec(1, 1), _rec(2, 3)]
    target, control, _ = _run(records, _in_error)
    assert control.status["pendingErrorCode"] == "GAP"
    assert control.status["pendingErrorSeqno"] == 2
    assert target.store.position is not None and target.store.position.seqno == 1


def test_an_epoch_mismatch_refuses_the_log() -> None:
    records = [_rec(i, i, epoch=0) for i in range(5)]
    target, control, _ = _run(records, _in_error, stored=_stored(3, epoch=2))
    message = control.status["pendingExceptionMessage"]
    assert "Log epoch numbers do not match" in message
    assert "server epoch number=0 client epoch number=2" in message
    assert target.store.blocks == []


def test_a_stored_fragment_the_log_does_not_have_is_a_mismatch() -> None:
    records = [_rec(0, 0), _rec(1, 1), _rec(2, 2)]
    _, control, _ = _run(records, _in_error, stored=_stored(1, fragno=3))
    assert "server has no fragment 3 of seqno 1" in control.status["pendingExceptionMessage"]


def test_a_missing_fragment_stops_the_consumer() -> None:
    records = [_rec(0, 0), _rec(1, 1, 0, last=False), _rec(2, 2)]
    target, control, _ = _run(records, _in_error)
    assert "seqno 1 is missing fragment 1" in control.status["pendingExceptionMessage"]
    assert target.store.position is not None and target.store.position.seqno == 0


def test_filters_and_the_tracking_schema_never_reach_the_applier() -> None:
    heartbeat_specs = [ColumnSpec(1, "id", "BIGINT", primary_key=True),
                       ColumnSpec(2, "source_tstamp", "TIMESTAMP"),
                       ColumnSpec(3, "salt", "BIGINT"), ColumnSpec(4, "name", "VARCHAR")]
    beat = RowChange(RowAction.INSERT, TRACKING, "heartbeat", column_specs=heartbeat_specs,
                     column_values=[[1, "2026-01-01 00:00:00", 7, "MASTER"]])
    other = RowChange(RowAction.INSERT, TRACKING, "trep_commit_seqno",
                      column_specs=heartbeat_specs[:1], column_values=[[0]])
    records = [_rec(0, 0, data=[_row(1), _row(2, table="skip_me"), beat, other]),
               _rec(1, 1, data=[_row(3, schema="elsewhere")])]
    target, _, _ = _run(records, _at(1),
                        group=_group(filters={"ignore": ["db.skip_me", "elsewhere"]}))
    assert target.rows("db", "t") == [{"id": 1, "v": "v1"}]
    assert target.rows("db", "skip_me") == [] and target.rows("elsewhere", "t") == []
    assert not any(schema == TRACKING for schema, _ in target.store.tables)
    hb = target.store.heartbeats[1]
    assert (hb.name, hb.salt, hb.seqno) == ("MASTER", 7, 0)
    assert hb.source_tstamp == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert hb.lag_millis is not None and hb.lag_millis > 0


def test_statements_follow_the_applier_policy() -> None:
    records = [_rec(0, 0, data=[Statement("ALTER TABLE db.t ADD c INT"), _row(1)]),
               _rec(1, 1)]
    target, _, _ = _run(records, _at(1))  # the memory applier skips statements
    assert target.rows("db", "t")[0] == {"id": 1, "v": "v1"}


def test_a_truncate_empties_the_table_in_a_block_of_its_own() -> None:
    truncate = Statement("TRUNCATE TABLE db.t", schema_changes=[
        SchemaChange(ChangeKind.TRUNCATE, "db", "t")])
    ignored = Statement("TRUNCATE TABLE db.other", schema_changes=[
        SchemaChange(ChangeKind.TRUNCATE, "db", "other")])
    records = [_rec(0, 0, data=[_row(1), _row(2, table="other")]), _rec(1, 1),
               _rec(2, 2, data=[truncate]), _rec(3, 3, data=[ignored]), _rec(4, 4)]
    target, _, _ = _run(records, _at(4), group=_group(filters={"ignore": ["db.other"]}))
    assert target.rows("db", "t") == [{"id": 400, "v": "v400"}]
    assert target.store.tables.get(("db", "other")) is None  # never applied, never emptied
    # Everything before it committed first; the truncate's block holds no row change.
    assert target.store.blocks[:2] == [[(0, 0), (1, 0)], []]
    assert set(target.store.applied.values()) == {1}


def _restructure(*changes: SchemaChange) -> Statement:
    return Statement("ALTER ...", schema_changes=list(changes))


def test_renames_and_drops_follow_the_mode_in_blocks_of_their_own() -> None:
    """lenient: a renamed table keeps its rows, a renamed column is added beside the old
    one (filled from it), a dropped table stays; evolve renames and drops."""
    rename = _restructure(SchemaChange(ChangeKind.RENAME_TABLE, "db", "t", new_name="t2",
                                       new_schema="db"))
    column = _restructure(SchemaChange(ChangeKind.RENAME_COLUMN, "db", "t2", column="v",
                                       new_name="w"))
    drop = _restructure(SchemaChange(ChangeKind.DROP_TABLE, "db", "other"))
    records = [_rec(0, 0, data=[_row(1), _row(2, table="other")]), _rec(1, 1, data=[rename]),
               _rec(2, 2, data=[column]), _rec(3, 3, data=[drop])]
    target, _, _ = _run(records, _at(3))
    assert target.rows("db", "t") == []
    assert target.rows("db", "t2") == [{"id": 1, "v": "v1", "w": "v1"}]
    assert target.rows("db", "other") == [{"id": 2, "v": "v2"}]
    assert target.store.blocks[1:] == [[], [], []]  # each in a block of its own
    target, _, _ = _run(records, _at(3), group=_group(schema_changes="evolve"))
    assert target.rows("db", "t2") == [{"id": 1, "w": "v1"}]
    assert ("db", "other") not in target.store.tables


def test_a_dropped_column_leaves_stored_rows_only_under_evolve() -> None:
    drop = _restructure(SchemaChange(ChangeKind.DROP_COLUMN, "db", "t", column="v"))
    records = [_rec(0, 0, data=[_row(1)]), _rec(1, 1, data=[drop])]
    target, _, _ = _run(records, _at(1))
    assert target.rows("db", "t") == [{"id": 1, "v": "v1"}]  # lenient keeps it
    target, _, _ = _run(records, _at(1), group=_group(schema_changes="evolve"))
    assert target.rows("db", "t") == [{"id": 1}]


def test_schema_changes_exception_stops_at_the_change_and_ignore_keeps_the_rows() -> None:
    alter = Statement("ALTER TABLE db.t ADD c INT", schema_changes=[
        SchemaChange(ChangeKind.ADD_COLUMN, "db", "t", column="c", column_type="INT")])
    records = [_rec(0, 0), _rec(1, 1, data=[alter]), _rec(2, 2)]
    target, control, _ = _run(records, _in_error, group=_group(schema_changes="exception"))
    assert control.status["pendingErrorSeqno"] == 1
    assert "add_column db.t.c INT" in control.status["pendingExceptionMessage"]
    assert target.store.position is not None and target.store.position.seqno == 0
    truncate = Statement("TRUNCATE TABLE db.t", schema_changes=[
        SchemaChange(ChangeKind.TRUNCATE, "db", "t")])
    records = [_rec(0, 0), _rec(1, 1, data=[truncate]), _rec(2, 2)]
    target, _, _ = _run(records, _at(2), group=_group(schema_changes="ignore"))
    assert [r["id"] for r in target.rows("db", "t")] == [0, 200]


def test_keyless_tables_are_refused_where_the_applier_cannot_address_rows() -> None:
    records = [_rec(0, 0), _rec(1, 1, data=[_row(5, table="loose", keyed=False)]), _rec(2, 2)]
    target, control, _ = _run(records, _in_error,
                              target=MemoryApplier(MemoryTarget(keyless_tables=False)))
    assert control.status["pendingErrorSeqno"] == 1
    assert "db.loose has no primary key" in control.status["pendingExceptionMessage"]
    assert target.store.position is not None and target.store.position.seqno == 0


def test_transient_commit_failures_converge_with_each_seqno_applied_once() -> None:
    records = [_rec(i, i) for i in range(40)]
    target = MemoryApplier(MemoryTarget(transient_failure_rate=0.3, seed=3))
    done, _, _ = _run(records, _at(39), target=target, group=_group(block_commit_events=3))
    assert sorted(done.store.applied) == list(range(40))
    assert set(done.store.applied.values()) == {1}


class LosingTarget(MemoryApplier):
    """Loses the group's lock while the fourth seqno is being applied."""

    def __init__(self, lead: HeldLead) -> None:
        super().__init__(MemoryTarget())
        self.lead = lead
        self.rolled_back: list[list[int]] = []

    def apply(self, event: ThlEvent) -> None:
        super().apply(event)
        if event.seqno == 3 and self.lead.acquired == 1:
            self.lead.lost.set()

    def rollback(self) -> None:
        if self._open:
            self.rolled_back.append([e.seqno for e in self._open])
        super().rollback()


def test_losing_the_lock_abandons_the_block_and_resumes_from_the_target() -> None:
    positions = MemoryPositions()
    target = LosingTarget(positions.lead)
    _run([_rec(i, i) for i in range(8)], _at(7), target=target, positions=positions)
    # The block open when the lock went is not committed; after taking the lock again the
    # runtime starts from the target's position, so every seqno is applied exactly once.
    assert target.rolled_back and target.rolled_back[0][-1] == 3
    assert _seqnos(target) == list(range(8))
    assert positions.lead.acquired == 2


class ConflictTarget(MemoryApplier):
    """Another writer moved the stored position: every commit is refused."""

    def commit(self, position: Position) -> None:
        raise PositionConflict("trep_commit_seqno moved under this consumer",
                               seqno=position.seqno)


def test_a_position_conflict_while_holding_the_lock_is_an_error() -> None:
    _, control, _ = _run([_rec(0, 0)], _in_error, target=ConflictTarget(MemoryTarget()))
    assert control.status["pendingErrorCode"] == "CONFLICT"
    assert "moved under this consumer" in control.status["pendingExceptionMessage"]


class FailingOnceTarget(MemoryApplier):
    """Refuses seqno 2 in its block and again alone, then takes it (fixed by hand)."""

    def __init__(self) -> None:
        super().__init__(MemoryTarget())
        self.refusals = 2

    def apply(self, event: ThlEvent) -> None:
        if event.seqno == 2 and self.refusals:
            self.refusals -= 1
            raise DataError("refused", seqno=2)
        super().apply(event)


def test_a_data_error_commits_the_seqnos_before_it_then_stops_there() -> None:
    target = MemoryApplier(MemoryTarget(refuse_seqnos=[4]))
    target, control, _ = _run([_rec(i, i) for i in range(8)], _in_error, target=target)
    assert control.status["pendingErrorSeqno"] == 4
    assert target.store.position is not None and target.store.position.seqno == 3


def test_a_new_lead_starts_clean_after_an_error_of_the_previous_one() -> None:
    positions = MemoryPositions()

    def until(target: MemoryApplier, control: MemoryControl) -> bool:
        if control.status.get("state") == "OFFLINE:ERROR" and positions.lead.acquired == 1:
            positions.lead.lost.set()  # the lock goes while the group sits in ERROR
        return _at(4)(target, control)

    target, _, _ = _run([_rec(i, i) for i in range(5)], until, target=FailingOnceTarget(),
                        positions=positions)
    assert positions.lead.acquired == 2
    assert _seqnos(target) == [0, 1, 2, 3, 4]


def test_zookeeper_away_at_start_and_while_taking_the_lock_is_waited_out() -> None:
    control, positions = MemoryControl(), MemoryPositions()
    control.broken = 3  # watch, then the first status publishes
    positions.lead.broken = 2
    target, control, _ = _run([_rec(i, i) for i in range(3)], _at(2), control=control,
                              positions=positions)
    assert _seqnos(target) == [0, 1, 2]


class ZooKeeperGoesAway(MemoryApplier):
    """Breaks ZooKeeper once the skipped seqno has been applied past."""

    def __init__(self, control: MemoryControl) -> None:
        super().__init__(MemoryTarget())
        self.control = control

    def commit(self, position: Position) -> None:
        super().commit(position)
        if position.seqno == 1:
            self.control.broken = 3


def test_a_skip_cleared_while_zookeeper_is_away_does_not_stop_the_group() -> None:
    control = MemoryControl()
    control.wanted = Desired(skip_seqnos=[1], request=1)
    records = [_rec(i, i) for i in range(6)]
    target, control, _ = _run(records, lambda t, c: _at(5)(t, c) and not c.wanted.skip_seqnos,
                              target=ZooKeeperGoesAway(control), control=control,
                              group=_group(block_commit_events=1))
    assert _seqnos(target) == [0, 2, 3, 4, 5]
    assert control.status["skippedSeqnos"] == [1]


class Buggy(MemoryApplier):
    def apply(self, event: ThlEvent) -> None:
        raise ZeroDivisionError("a bug")


def test_an_unexpected_failure_is_an_error_state_not_a_dead_thread() -> None:
    _, control, _ = _run([_rec(0, 0)], _in_error, target=Buggy(MemoryTarget()))
    assert "internal error: ZeroDivisionError: a bug" in \
        control.status["pendingExceptionMessage"]


def test_one_store_behind_two_appliers_refuses_the_stale_one() -> None:
    store = MemoryStore()
    a, b = MemoryApplier(MemoryTarget(), store=store), MemoryApplier(MemoryTarget(), store=store)
    a.position()
    b.position()
    a.begin()
    a.commit(_stored(0))
    b.begin()
    try:
        b.commit(_stored(1))
    except PositionConflict as exc:
        assert "moved from None to 0" in str(exc)
    else:
        raise AssertionError("the stale applier committed")


class OtherHolds(HeldLead):
    """A lock another process holds for the first ``busy`` tries, then gives up."""

    def __init__(self, busy: int) -> None:
        super().__init__()
        self.busy = busy

    def acquire(self, timeout: float) -> bool:
        if self.busy:
            self.busy -= 1
            return False
        return super().acquire(timeout)


class WarmingTarget(MemoryApplier):
    """Counts warm-ups (and fails the first ``failing`` of them)."""

    def __init__(self, failing: int = 0) -> None:
        super().__init__(MemoryTarget())
        self.warmed = 0
        self.failing = failing
        self.connected_warm: list[int] = []

    def warm_up(self) -> None:
        self.warmed += 1
        if self.failing:
            self.failing -= 1
            raise RuntimeError("no engine (test)")

    def connect(self) -> None:
        self.connected_warm.append(self.warmed)
        super().connect()


@pytest.mark.parametrize("failing", [0, 1])
def test_a_standby_warms_up_once_before_it_takes_over(failing: int) -> None:
    positions = MemoryPositions()
    positions.lead = OtherHolds(busy=3)
    target = WarmingTarget(failing)
    _run([_rec(i, i) for i in range(3)], _at(2), target=target, positions=positions)
    assert target.warmed == 1  # once, however long the standby waits
    assert target.connected_warm[0] == 1  # before the takeover connected
    assert _seqnos(target) == [0, 1, 2]  # a failed warm-up only costs a cold start


def test_a_process_that_leads_at_once_does_not_warm_up() -> None:
    target = WarmingTarget()
    _run([_rec(i, i) for i in range(2)], _at(1), target=target)
    assert target.warmed == 0


def test_cascades_reach_child_rows_of_the_same_block_and_ignore_leaves_them(
        caplog: pytest.LogCaptureFixture) -> None:
    """The child rows are written in the block before the process knows the table is a
    child (the parent's delete carries the rules): the block is applied again, once, and
    the cascade finds them; ``foreign_keys: ignore`` keeps them."""
    child = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "t_id", "INT")]
    rules = CascadeRules(
        rules=[ForeignKey("fk", ("db", "t"), ("id",), ("db", "c"), ("t_id",),
                          Referential.CASCADE, Referential.RESTRICT)],
        tables={("db", "c"): child})
    delete = RowChange(RowAction.DELETE, "db", "t", key_specs=_row(0).column_specs,
                       key_values=[[0, "v0"]])
    records = [_rec(0, 0, data=[_row(0), RowChange(RowAction.INSERT, "db", "c", child,
                                                   column_values=[[1, 0], [2, 5]])]),
               _rec(1, 1, data=[delete]), _rec(2, 2)]
    parent = records[1].event
    assert parent is not None
    parent.metadata[META_FOREIGN_KEYS] = rules.encode()
    target, _, _ = _run(records, _at(2))
    assert target.rows("db", "c") == [{"id": 2, "t_id": 5}]
    assert "db.c is a child table this block wrote before it was known" in caplog.text
    assert set(target.store.applied.values()) == {1}
    target, _, _ = _run(records, _at(2), group=_group(foreign_keys="ignore"))
    assert len(target.rows("db", "c")) == 2
