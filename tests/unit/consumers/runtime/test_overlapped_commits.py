"""The block loop with an applier that commits in two steps (``Pipelined``): the next block
is applied before the last one's commit is finished, a block counts as committed only once
it is, and a failure of a pending commit stops the group at that block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from consumers.errors import ConsumerError, DataError, TransientError
from consumers.memory.applier import MemoryApplier
from consumers.memory.config import MemoryTarget
from consumers.position import Position
from thl_topics.event import ThlEvent

from .test_runtime import MemoryPositions, _at, _group, _in_error, _rec, _run, _seqnos


@dataclass
class Pending:
    """A block ``TwoStepCommits.commit_begin`` set aside; ``finish`` writes it."""

    applier: TwoStepCommits
    position: Position
    block: tuple[Any, ...]
    finished: bool = False
    error: Exception | None = None
    rides: bool = False

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.applier.write(self)
        if self.error is not None:
            raise self.error


class TwoStepCommits(MemoryApplier):
    """A memory applier (or one derived from it) that commits in two steps (``Pipelined``):
    ``commit_begin`` sets the block aside, ``finish`` writes it with the next class's
    one-step commit; a failure there rolls the open block back too, as the contract
    says."""

    pending: Pending | None = None

    def commit(self, position: Position) -> None:
        self.commit_begin(position).finish()

    def commit_begin(self, position: Position) -> Pending:
        if self.pending is not None:
            self.pending.finish()  # the contract: the earlier one first
        block = (self._open, self._beats, self._restructures)
        self._open = None
        self.pending = Pending(self, position, block)
        return self.pending

    def write(self, pending: Pending) -> None:
        """Write ``pending``'s block (unless it failed already)."""
        self.pending = None
        if pending.error is None:
            current = (self._open, self._beats, self._restructures)
            self._open, self._beats, self._restructures = pending.block
            try:
                super().commit(pending.position)
            except ConsumerError as exc:
                pending.error = exc
            finally:
                self._open, self._beats, self._restructures = current
        if pending.error is not None:
            self.rollback()

    def rollback(self) -> None:
        if self.pending is not None:
            self.pending.error = TransientError("abandoned with the block after it")
            self.pending.finished = True
            self.pending = None
        super().rollback()


class OverlappingTarget(TwoStepCommits):
    """The memory applier in two steps; ``log`` holds what happened, in order."""

    def __init__(self, refuse_finish: set[int] | None = None, flaky: int = 0) -> None:
        super().__init__(MemoryTarget())
        self.log: list[tuple[str, int]] = []
        #: Blocks (by last seqno) whose commit fails as data, each time.
        self.refuse_finish = refuse_finish or set()
        #: This many commits fail as transient first.
        self.flaky = flaky

    def apply(self, event: ThlEvent) -> None:
        self.log.append(("apply", event.seqno))
        super().apply(event)

    def commit_begin(self, position: Position) -> Pending:
        pending = super().commit_begin(position)
        self.log.append(("sent", position.seqno))
        return pending

    def write(self, pending: Pending) -> None:
        seqno = pending.position.seqno
        self.log.append(("finish", seqno))
        if seqno in self.refuse_finish:
            pending.error = DataError(f"refused at commit: block up to {seqno}")
        elif self.flaky:
            self.flaky -= 1
            pending.error = TransientError("commit lost (test)")
        super().write(pending)


class CheckedPositions(MemoryPositions):
    """Fails the test if a position is mirrored before the target holds it."""

    def __init__(self, target: OverlappingTarget) -> None:
        super().__init__()
        self.target = target

    def write_position(self, component: str, pos: Any) -> None:
        stored = self.target.store.position
        assert stored is not None and stored.seqno >= pos.seqno, (pos, stored)
        super().write_position(component, pos)

    mirror_position = write_position


def test_the_next_block_is_applied_before_the_last_commit_finishes() -> None:
    target = OverlappingTarget()
    records = [_rec(i, i) for i in range(25)]
    _, control, feed = _run(records, _at(24), target=target,
                            positions=CheckedPositions(target),
                            group=_group(block_commit_events=10))
    assert _seqnos(target) == list(range(25))
    assert set(target.store.applied.values()) == {1}
    log = target.log
    # Block 0..9 was sent, then seqno 10 applied, and only then was 0..9 finished.
    assert log.index(("sent", 9)) < log.index(("apply", 10)) < log.index(("finish", 9))
    assert feed.committed[-1] == 25
    assert control.status["appliedLastSeqno"] == 24


def test_a_pending_commit_is_finished_when_nothing_more_comes() -> None:
    target = OverlappingTarget()
    _, control, _ = _run([_rec(i, i) for i in range(3)], _at(2), target=target,
                         positions=CheckedPositions(target))
    assert target.log[-1] == ("finish", 2)
    assert target.pending is None
    assert control.status["appliedLastSeqno"] == 2


def test_a_refused_pending_commit_stops_the_group_at_its_own_seqno() -> None:
    target = OverlappingTarget(refuse_finish={9})
    positions = CheckedPositions(target)
    _, control, _ = _run([_rec(i, i) for i in range(25)], _in_error, target=target,
                         positions=positions, group=_group(block_commit_events=10))
    # The block 0..9 failed at commit while 10.. was open: careful mode committed 0..8
    # one by one, then 9 alone failed again.
    assert control.status["pendingErrorSeqno"] == 9
    assert target.store.position is not None and target.store.position.seqno == 8
    assert _seqnos(target) == list(range(9))
    assert max(positions.mirrored) == 8


def test_lost_commits_are_applied_again_once_each() -> None:
    target = OverlappingTarget(flaky=2)
    _run([_rec(i, i) for i in range(40)], _at(39), target=target,
         positions=CheckedPositions(target), group=_group(block_commit_events=4))
    assert sorted(target.store.applied) == list(range(40))
    assert set(target.store.applied.values()) == {1}


class RidingTarget(OverlappingTarget):
    """Like the MariaDB applier: a pending block's COMMIT rides the next block's round trip
    (``rides``), so it is written only when that next block is finished; finishing the
    later one finishes the earlier one first."""

    riding: Pending | None = None

    def commit_begin(self, position: Position) -> Pending:
        if self.riding is not None:
            self.riding.finish()  # at most one rides
        earlier = self.pending
        if earlier is not None and not earlier.finished:
            self.pending = None
            earlier.rides = True
            self.riding = earlier
            self.log.append(("rides", earlier.position.seqno))
        return super().commit_begin(position)

    def write(self, pending: Pending) -> None:
        if pending is self.riding:
            self.riding = None
            pending.rides = False
            carrier, self.pending = self.pending, None
            super().write(pending)
            if pending.error is None:
                self.pending = carrier
            elif carrier is not None:
                carrier.error = TransientError("abandoned with the commit before it")
                carrier.finished = True
            return
        if self.riding is not None:
            self.riding.finish()
            if pending.error is not None:
                return
        super().write(pending)

    def rollback(self) -> None:
        if self.riding is not None:
            self.riding.error = TransientError("abandoned: its outcome is the target's")
            self.riding.finished, self.riding.rides, self.riding = True, False, None
        super().rollback()


def test_a_commit_riding_the_next_block_counts_only_once_that_block_is_answered() -> None:
    target = RidingTarget()
    records = [_rec(i, i) for i in range(45)]
    _, control, feed = _run(records, _at(44), target=target,
                            positions=CheckedPositions(target),
                            group=_group(block_commit_events=10))
    assert _seqnos(target) == list(range(45))
    assert set(target.store.applied.values()) == {1}
    log = target.log
    # Block 0..9 rode block 10..19's round trip: finished only after that one was sent,
    # and the loop applied the block after it meanwhile.
    assert log.index(("sent", 19)) < log.index(("apply", 20)) < log.index(("finish", 9))
    assert ("rides", 9) in log
    assert feed.committed[-1] == 45
    assert control.status["appliedLastSeqno"] == 44


def test_a_refused_riding_commit_stops_the_group_at_its_own_seqno() -> None:
    target = RidingTarget(refuse_finish={19})
    positions = CheckedPositions(target)
    _, control, _ = _run([_rec(i, i) for i in range(45)], _in_error, target=target,
                         positions=positions, group=_group(block_commit_events=10))
    assert control.status["pendingErrorSeqno"] == 19
    assert target.store.position is not None and target.store.position.seqno == 18
    assert _seqnos(target) == list(range(19))
    assert max(positions.mirrored) == 18


def test_lost_riding_commits_are_applied_again_once_each() -> None:
    target = RidingTarget(flaky=3)
    _run([_rec(i, i) for i in range(60)], _at(59), target=target,
         positions=CheckedPositions(target), group=_group(block_commit_events=4))
    assert sorted(target.store.applied) == list(range(60))
    assert set(target.store.applied.values()) == {1}
