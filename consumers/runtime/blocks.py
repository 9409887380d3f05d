"""The block loop: one loop applies fragments in blocks on one applier, for the single
stream of a group (``stream``) and for each of its channels (``channel_workers``).

A block is one target transaction of whole seqnos. The fragments of a seqno go into the
open block (opened at the first fragment it gets); the block commits, with the position of
its last seqno, on a seqno boundary: when it is full (the limits' events, rows or bytes),
when its time (``ms``) is up, at once when nothing waits (``idle``), and before and after a
seqno that must be applied alone (``Fragment.alone``).

The loop's two users differ in where fragments come from (``receive``), in what they do
between seqnos and while nothing comes, and in three points of timing, which each states
as a class attribute: ``tick``, ``due_between_seqnos``, ``patient_until_first_seqno``.

Overlapped commits (``overlaps_commits``, with a ``Pipelined`` applier): a block's commit is
sent (``commit_begin``) and the next block is read and applied while the target works on
it; the commit is finished (``settle``) when the next block commits, when nothing comes,
before a seqno that goes alone, and before the loop stops. Only a finished commit counts:
``committed`` (status, mirror, offsets) and the ``apply-committed`` crash point come after
``finish``; an error of the pending commit stops the loop as the error of its own block,
and the runtime's rollback abandons both blocks (neither committed).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from consumers.applier import Applier, BlockLimits, PendingCommit, Pipelined
from consumers.errors import ConsumerError
from consumers.position import Position
from replicator import crashpoints
from thl_topics.event import ThlEvent

log = logging.getLogger(__package__)


@dataclass
class Block:
    """The open block: how many whole seqnos it holds, the last one's event (its position is
    made once, at the commit: one per seqno was a measurable share of a block's CPU), and
    what counts against its limits."""

    seqnos: int = 0
    opened: float = 0.0
    rows: int = 0
    bytes: int = 0
    skipped: list[int] = field(default_factory=list)
    _last: tuple[ThlEvent, int] | None = None

    def add_seqno(self, event: ThlEvent, offset: int) -> None:
        """``event`` (a seqno's last fragment, at THL ``offset``) is the block's last."""
        self.seqnos += 1
        self._last = (event, offset)

    @property
    def last(self) -> Position:
        """The position of the block's last whole seqno."""
        if self._last is None:
            raise RuntimeError("a block without a whole seqno has no position")
        return Position.of(*self._last)

    def full(self, limits: BlockLimits) -> bool:
        """True once any of ``limits`` is reached."""
        return self.seqnos >= limits.events \
            or (limits.rows is not None and self.rows >= limits.rows) \
            or (limits.bytes is not None and self.bytes >= limits.bytes)


@dataclass(slots=True)
class Fragment:
    """One fragment of a seqno for a block loop (not changed once made; not ``frozen``,
    whose ``__init__`` costs three times as much, as ``ThlRecord``'s)."""

    event: ThlEvent
    offset: int
    size: int
    #: The operator asked to skip this seqno: move past it without applying it.
    skip: bool = False
    #: Apply this seqno in a block of its own: commit what the block holds before it and
    #: commit right after it (critical, isolated, or careful mode after a data error).
    alone: bool = False


class Quiet(enum.Enum):
    """What ``BlockLoop.receive`` gives when it has no fragment to apply."""

    #: Nothing came within the wait.
    NOTHING = "nothing"
    #: Something came and was dealt with (a record applied before, a flush).
    HANDLED = "handled"


class Applying(Protocol):
    """How fragments reach an applier (``preparation.Preparation``)."""

    def apply(self, applier: Applier, event: ThlEvent) -> None: ...

    def block_begun(self, applier: Applier) -> None: ...


class BlockLoop:
    """Applies fragments in blocks on ``applier`` while ``running()``; ``who`` names the
    loop in its messages. Every fragment goes through ``prep.apply`` (or is skipped), a
    committed block's rows through ``count_rows``; every commit comes after
    ``before_commit``, which may raise to stop it."""

    #: Seconds of the longest wait for a fragment.
    tick: float
    #: True: a block whose time is up commits at the next seqno boundary however busy the
    #: source is; False: only once nothing comes within a wait.
    due_between_seqnos: bool
    #: True: while the open block holds no whole seqno yet, the loop waits a whole tick
    #: for the next fragment; False: only until the block's time is up.
    patient_until_first_seqno: bool
    #: True: with a ``Pipelined`` applier, a block's commit overlaps the next block.
    overlaps_commits: bool = False

    def __init__(self, who: str, applier: Applier, limits: BlockLimits,
                 prep: Applying,
                 count_rows: Callable[[int], None],
                 before_commit: Callable[[], None]) -> None:
        self.who = who
        self.applier = applier
        self.limits = limits
        self._prep = prep
        self._count_rows = count_rows
        self._before_commit = before_commit
        self._block_s = limits.ms / 1000
        #: The open block (None: no transaction begun).
        self.block: Block | None = None
        #: The seqno whose fragments are going in (None: on a seqno boundary).
        self.in_seqno: int | None = None
        #: The applier, where its commits overlap the next block.
        self._pipelined = applier if self.overlaps_commits and isinstance(applier, Pipelined) \
            else None
        #: Blocks whose commit was sent and not yet finished, with those commits, oldest
        #: first: one, or two where the older one's COMMIT rides the newer one's round trip.
        self._pending: list[tuple[PendingCommit, Block]] = []

    # -- what the users of the loop say ----------------------------------------------------

    def running(self) -> bool:
        return True

    def between_seqnos(self) -> None:
        """On a seqno boundary, before the next fragment is awaited (may commit, raise)."""

    def receive(self, wait: float) -> Fragment | Quiet:
        """The next fragment, waiting at most ``wait`` seconds for it."""
        raise NotImplementedError

    def quiet(self) -> None:
        """Nothing came within a wait, and no block was committed for it."""

    def opened(self) -> None:
        """A block was opened (its transaction begun)."""

    def committed(self, block: Block) -> None:
        """``block`` was committed with the position of its last seqno."""
        raise NotImplementedError

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        while self.running():
            if self.in_seqno is None:
                self.between_seqnos()
                if self.due_between_seqnos and self._due():
                    self.commit()
            got = self.receive(self._wait())
            if isinstance(got, Fragment):
                self._add(got)
            elif got is Quiet.NOTHING:
                # Nothing to overlap the pending commit with: finish it now.
                self.settle()
                if self.block is not None and self.in_seqno is None and (
                        self.limits.idle or (not self.due_between_seqnos and self._due())):
                    self.commit()  # nothing waits: the block need not wait either
                else:
                    self.quiet()
        self.settle()

    def _wait(self) -> float:
        """How long to wait for the next fragment: a tick at most, no longer than the open
        block has left, not at all where an idle block commits on a seqno boundary."""
        block = self.block
        if block is None and self._pending:
            return 0.0  # only a look: nothing waiting finishes the pending commit
        if block is None or (self.patient_until_first_seqno and not block.seqnos):
            return self.tick
        if self.limits.idle and self.in_seqno is None:
            return 0.0
        return max(0.0, min(self.tick, block.opened + self._block_s - time.monotonic()))

    def _due(self) -> bool:
        """The open block's time is up."""
        return self.block is not None and \
            time.monotonic() - self.block.opened >= self._block_s

    def _add(self, fragment: Fragment) -> None:
        """One fragment into the open block (opened at a seqno's first fragment, after a
        commit of what the block held if the seqno goes alone)."""
        event = fragment.event
        if self.in_seqno is None:
            if fragment.alone:
                # Everything before a seqno that goes alone is committed, and counted.
                self.commit()
                self.settle()
            if self.block is None:
                self.applier.begin()
                self._prep.block_begun(self.applier)
                self.block = Block(opened=time.monotonic())
                self.opened()
            self.in_seqno = event.seqno
        elif self.block is None:
            raise RuntimeError(f"{self.who}: fragment {event.fragno} of seqno "
                               f"{event.seqno} outside a block")
        block = self.block
        if fragment.skip:
            if event.last_frag:
                block.skipped.append(event.seqno)
                log.warning("%s: skipped seqno %d (%s) as the operator asked: its data is "
                            "not applied", self.who, event.seqno, event.event_id)
        else:
            self._prep.apply(self.applier, event)
        block.rows += event.row_count
        block.bytes += fragment.size
        if not event.last_frag:
            crashpoints.reached("apply-between-fragments")
            return
        block.add_seqno(event, fragment.offset)
        self.in_seqno = None
        if block.full(self.limits) or fragment.alone:
            self.commit()

    def commit(self) -> None:
        """Commit the open block (if it holds a whole seqno) with its last seqno's position;
        overlapped, only begin its commit (and finish the one before)."""
        block = self.block
        if block is None or not block.seqnos:
            return
        # Another process may hold the lock by now: its work, not this block, counts.
        self._before_commit()
        last = block.last
        previous, self._pending = self._pending, []
        pending: PendingCommit | None = None
        try:
            if self._pipelined is not None:
                # The applier finishes ``previous`` itself before it sends this block (or
                # reads its answers and sends its COMMIT ahead of this block's statements).
                pending = self._pipelined.commit_begin(last)
            else:
                self.applier.commit(last)
        except ConsumerError as exc:
            for sent in previous:
                self._finished(*sent)  # their own errors first, if they have one
            _blame(exc, block)
            raise
        self.block = None
        for i, (earlier, earlier_block) in enumerate(previous):
            if earlier.rides:
                # Its outcome comes with this block's answers: both wait for the next commit.
                self._pending = previous[i:]
                break
            self._finished(earlier, earlier_block)
        if pending is None:
            self.settle()  # nothing can be pending behind a commit that is done
            crashpoints.reached("apply-committed")
            self._counted(block)
        else:
            self._pending.append((pending, block))
            crashpoints.reached("apply-commit-sent")

    def settle(self) -> None:
        """Finish the pending commits, if any, oldest first, and count them as committed."""
        while self._pending:
            pending = self._pending.pop(0)
            self._finished(*pending)

    def _finished(self, pending: PendingCommit, block: Block) -> None:
        try:
            pending.finish()
        except ConsumerError as exc:
            _blame(exc, block)
            raise
        crashpoints.reached("apply-committed")
        self._counted(block)

    def _counted(self, block: Block) -> None:
        """``block`` is committed: its rows are counted (once a block, not a fragment: a
        counter's lock each event was measurable), then ``committed``."""
        self._count_rows(block.rows)
        self.committed(block)


def _blame(exc: ConsumerError, block: Block) -> None:
    """An error of a block's commit without a seqno: the block's last seqno (batched rows
    are sent at commit, so the culprit is somewhere in the block; careful mode, one seqno
    per block, pins it down)."""
    if exc.seqno < 0:
        last = block.last
        exc.seqno, exc.event_id = last.seqno, last.event_id
