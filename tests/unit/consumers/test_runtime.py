"""The runtime's ordering logic with an in-memory log and target: blocks, fragments, gaps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from consumers.errors import DataError, PositionConflict
from consumers.runtime import ConsumerRuntime, FeedSettings
from replicator.config import ConsumerConfig
from replicator.control import Desired
from replicator.tracking import CommitSeqno
from thl_topics.event import Statement, ThlEvent
from thl_topics.reader import ThlRecord


def _rec(offset: int, seqno: int, fragno: int = 0, last: bool = True, epoch: int = 0
         ) -> ThlRecord:
    event = ThlEvent(seqno=seqno, epoch=epoch, source_id="s", event_id=f"f:{seqno};0",
                     shard_id="db", tstamp=0, fragno=fragno, last_frag=last,
                     data=[Statement(f"-- {seqno}.{fragno}")])
    return ThlRecord(offset, seqno, fragno, event)


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

    def poll(self, timeout: float) -> ThlRecord | None:
        if self.at >= len(self.records):
            time.sleep(min(timeout, 0.01))
            return None
        self.at += 1
        return self.records[self.at - 1]

    def commit(self, next_offset: int) -> None:
        self.committed.append(next_offset)

    def close(self) -> None:
        pass


class MemoryTarget:
    """An applier keeping applied fragments and committed blocks in lists."""

    target = "memory"

    def __init__(self) -> None:
        self.stored: CommitSeqno | None = None
        self.open: list[tuple[int, int]] = []
        self.blocks: list[list[tuple[int, int]]] = []

    def connect(self) -> None:
        pass

    def position(self) -> CommitSeqno | None:
        return self.stored

    def isolates(self, event: ThlEvent) -> bool:
        return False

    def begin(self) -> None:
        self.open = []

    def apply(self, event: ThlEvent) -> None:
        self.open.append((event.seqno, event.fragno))

    def skip(self, event: ThlEvent) -> None:
        pass

    def commit(self, last: ThlEvent) -> None:
        self.blocks.append(self.open)
        self.stored = CommitSeqno(seqno=last.seqno, epoch=last.epoch, eventid=last.event_id,
                                  fragno=last.fragno,
                                  source_id=last.source_id)

    def rollback(self) -> None:
        self.open = []

    def reset(self) -> None:
        self.stored = None

    def close(self) -> None:
        pass


class MemoryControl:
    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.wanted = Desired()

    def publish_status(self, status: dict[str, Any]) -> None:
        self.status = status

    def mark_alive(self, identity: str) -> None:
        pass

    def watch_desired(self, on_change: Callable[[Desired], None]) -> None:
        on_change(self.wanted)

    def desired(self) -> Desired:
        return self.wanted

    def update_desired(self, change: Callable[[Desired], None]) -> Desired:
        change(self.wanted)
        return self.wanted


class HeldLead:
    """A group lock that is granted at once; a test may take it away."""

    def __init__(self) -> None:
        self.lost = threading.Event()
        self.held = False
        self.acquired = 0

    def acquire(self, timeout: float) -> bool:
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


def _run(records: list[ThlRecord], until: Callable[[MemoryTarget, MemoryControl], bool],
         stored: CommitSeqno | None = None, target: MemoryTarget | None = None,
         positions: MemoryPositions | None = None,
         ) -> tuple[MemoryTarget, MemoryControl, MemoryFeed]:
    feed, control = MemoryFeed(records), MemoryControl()
    target = target or MemoryTarget()
    target.stored = stored
    runtime = ConsumerRuntime(
        "g", ConsumerConfig(url="mysql+pymysql://x@h/", block_commit_events=10,
                            block_commit_ms=50),
        FeedSettings("b", "thl.t", "grp", "t"), target,
        control, positions or MemoryPositions(),  # type: ignore[arg-type]
        feed_factory=lambda _: feed)  # type: ignore[arg-type,return-value]
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not until(target, control):
        assert time.monotonic() < deadline, (target.blocks, control.status)
        time.sleep(0.01)
    runtime.stop()
    thread.join(10)
    assert not thread.is_alive()
    return target, control, feed


def test_fragments_join_one_block_and_blocks_hold_ten_seqnos() -> None:
    records = [_rec(0, 0), _rec(1, 1, 0, last=False), _rec(2, 1, 1, last=False),
               _rec(3, 1, 2)] + [_rec(i + 2, i) for i in range(2, 25)]
    target, _, feed = _run(records, lambda t, _: t.stored is not None
                           and t.stored.seqno == 24)
    assert [len({s for s, _ in b}) for b in target.blocks][:2] == [10, 10]
    assert target.blocks[0][:4] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    applied = [s for b in target.blocks for s, f in b if f == 0]
    assert applied == list(range(25))
    assert feed.committed[-1] == 27  # the record after the last one applied


def test_restart_resumes_after_the_stored_seqno_and_skips_nothing() -> None:
    records = [_rec(i, i) for i in range(8)]
    stored = CommitSeqno(seqno=4, epoch=0, eventid="f:4;0", source_id="s")
    target, _, _ = _run(records, lambda t, _: t.stored is not None and t.stored.seqno == 7,
                        stored=stored)
    assert [s for b in target.blocks for s, _ in b] == [5, 6, 7]


def test_a_gap_stops_at_the_missing_seqno() -> None:
    records = [_rec(0, 0), _rec(1, 1), _rec(2, 3)]
    target, control, _ = _run(records, lambda _, c: c.status.get("state") == "OFFLINE:ERROR")
    assert control.status["pendingErrorCode"] == "GAP"
    assert control.status["pendingErrorSeqno"] == 2
    assert target.stored is not None and target.stored.seqno == 1


def test_an_epoch_mismatch_refuses_the_log() -> None:
    records = [_rec(i, i, epoch=0) for i in range(5)]
    stored = CommitSeqno(seqno=3, epoch=2, eventid="f:3;0", source_id="s")
    target, control, _ = _run(records, lambda _, c: c.status.get("state") == "OFFLINE:ERROR",
                              stored=stored)
    message = control.status["pendingExceptionMessage"]
    assert "Log epoch numbers do not match" in message
    assert "server epoch number=0 client epoch number=2" in message
    assert target.blocks == []


def test_a_missing_fragment_stops_the_consumer() -> None:
    records = [_rec(0, 0), _rec(1, 1, 0, last=False), _rec(2, 2)]
    target, control, _ = _run(records, lambda _, c: c.status.get("state") == "OFFLINE:ERROR")
    assert "seqno 1 is missing fragment 1" in control.status["pendingExceptionMessage"]
    assert target.stored is not None and target.stored.seqno == 0


class LosingTarget(MemoryTarget):
    """Loses the group's lock while the fourth seqno is being applied."""

    def __init__(self, lead: HeldLead) -> None:
        super().__init__()
        self.lead = lead
        self.rolled_back: list[list[tuple[int, int]]] = []

    def apply(self, event: ThlEvent) -> None:
        super().apply(event)
        if event.seqno == 3 and self.lead.acquired == 1:
            self.lead.lost.set()

    def rollback(self) -> None:
        if self.open:
            self.rolled_back.append(self.open)
        super().rollback()


def test_losing_the_lock_abandons_the_block_and_resumes_from_the_target() -> None:
    positions = MemoryPositions()
    target = LosingTarget(positions.lead)
    records = [_rec(i, i) for i in range(8)]
    _run(records, lambda t, _: t.stored is not None and t.stored.seqno == 7,
         target=target, positions=positions)
    # The block open when the lock went is not committed; after taking the lock again the
    # runtime starts from the target's position, so every seqno is applied exactly once.
    assert target.rolled_back and target.rolled_back[0][-1] == (3, 0)
    assert [s for b in target.blocks for s, _ in b] == list(range(8))
    assert positions.lead.acquired == 2


class ConflictTarget(MemoryTarget):
    """Another writer moved the stored position: every commit is refused."""

    def commit(self, last: ThlEvent) -> None:
        raise PositionConflict("trep_commit_seqno moved under this consumer", seqno=last.seqno)


def test_a_position_conflict_while_holding_the_lock_is_an_error() -> None:
    _, control, _ = _run([_rec(0, 0)],
                              lambda _, c: c.status.get("state") == "OFFLINE:ERROR",
                              target=ConflictTarget())
    assert control.status["pendingErrorCode"] == "CONFLICT"
    assert "moved under this consumer" in control.status["pendingExceptionMessage"]


class FailingOnceTarget(MemoryTarget):
    """Refuses seqno 2 in its block and again alone, then takes it (fixed by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals = 2

    def apply(self, event: ThlEvent) -> None:
        if event.seqno == 2 and self.refusals:
            self.refusals -= 1
            raise DataError("refused", seqno=2)
        super().apply(event)


def test_a_new_lead_starts_clean_after_an_error_of_the_previous_one() -> None:
    positions = MemoryPositions()

    def until(target: MemoryTarget, control: MemoryControl) -> bool:
        if control.status.get("state") == "OFFLINE:ERROR" and positions.lead.acquired == 1:
            positions.lead.lost.set()  # the lock goes while the group sits in ERROR
        return target.stored is not None and target.stored.seqno == 4

    target, _, _ = _run([_rec(i, i) for i in range(5)], until, target=FailingOnceTarget(),
                        positions=positions)
    assert positions.lead.acquired == 2
    assert [s for b in target.blocks for s, _ in b] == [0, 1, 2, 3, 4]
