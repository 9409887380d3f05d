"""The channels of a parallel consumer group: one thread, one applier, one queue each.

The runtime's stream thread reads the THL, routes each seqno (``shards``, ``dispatch``)
and hands its fragments to a channel's queue; each channel runs blocks on its own applier
(its own connection, transaction and ``trep_commit_seqno`` row) in the block loop of the
single stream (``blocks``), and reports every commit back. The stream thread keeps every
status, mirror and offset, so ZooKeeper and Kafka are only ever touched from one thread.

What a channel may write as its position (see ``shards``): the last seqno of its last
committed block, or, when it is idle with nothing queued, the last seqno the
stream thread *passed* (``ChannelSet.passed``): every seqno routed to the channel up to
that one was queued before it was passed, and an idle channel has committed all it was
given. Queues are bounded, which also bounds how far one channel runs ahead of another.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from consumers.applier import Applier, BlockLimits
from consumers.position import Position
from consumers.runtime.blocks import Applying, Block, BlockLoop, Fragment, Quiet
from replicator import crashpoints

log = logging.getLogger(__package__)

#: Seconds between looks at the stop flag while a thread waits on a queue.
_TICK = 0.1


@dataclass(frozen=True)
class _Flush:
    """Commit the open block; then, if the channel's position is below ``sync``, move it
    there with a block of its own (nothing but the position)."""

    sync: Position | None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Committed:
    """A channel committed a block."""

    channel: int
    position: Position
    #: Seqnos the block applied (0: it only moved the position).
    events: int
    skipped: tuple[int, ...] = ()
    #: Row changes the block applied.
    rows: int = 0


class _Passed:
    """The last seqno the stream thread passed (routed, skipped or queued whole)."""

    def __init__(self, position: Position | None) -> None:
        self._lock = threading.Lock()
        self._position = position

    def get(self) -> Position | None:
        with self._lock:
            return self._position

    def set(self, position: Position) -> None:
        with self._lock:
            self._position = position


class ChannelWorker(BlockLoop):
    """One channel: applies the fragments queued for it in blocks on its own applier."""

    tick = _TICK
    due_between_seqnos = False
    patient_until_first_seqno = False
    overlaps_commits = True

    def __init__(self, number: int, name: str, applier: Applier, limits: BlockLimits,
                 position: Position | None, passed: _Passed,
                 prep: Applying,
                 before_commit: Callable[[], None], report: Callable[[Committed], None],
                 count_rows: Callable[[int], None], queue_size: int) -> None:
        super().__init__(f"channel {number}", applier, limits, prep, count_rows,
                         before_commit)
        self.number = number
        #: The channel's stored position (last committed).
        self.position = position
        self.queue: queue.Queue[Fragment | _Flush] = queue.Queue(maxsize=queue_size)
        self.failure: BaseException | None = None
        self.events = 0
        self.state = "idle"
        self._passed = passed
        self._report = report
        self._stop = threading.Event()
        #: Since when the channel has had no open block (or last synced its position).
        self._idle_since = 0.0
        self.thread = threading.Thread(target=self._run, name=f"{name} channel {number}",
                                       daemon=True)

    # -- the stream thread's side -------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    # -- the channel's thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._idle_since = time.monotonic()
            self.run()
            self.state = "stopped"
        except BaseException as exc:
            self.failure = exc
            self.state = "failed"
        finally:
            self.applier.rollback()

    def running(self) -> bool:
        return not self._stop.is_set()

    def receive(self, wait: float) -> Fragment | Quiet:
        try:
            msg = self.queue.get(timeout=wait)
        except queue.Empty:
            return Quiet.NOTHING
        if isinstance(msg, _Flush):
            if self.in_seqno is not None:
                raise RuntimeError(f"channel {self.number}: flush inside seqno {self.in_seqno}")
            self.commit()
            self.settle()  # the stream thread waits for this flush to be counted
            self._sync(msg.sync)
            self._idle_since = time.monotonic()
            msg.done.set()
            return Quiet.HANDLED
        return msg

    def quiet(self) -> None:
        if self.block is None and self.position is not None and \
                time.monotonic() - self._idle_since >= self._block_s:
            # Idle for a block's time: bring the position up to what was passed.
            # Read it first, then find the queue empty: whatever was routed here
            # up to it was queued before it was passed, so it is all committed.
            # (A channel without a row leaves creating it to ChannelSet.drain:
            # concurrent first inserts deadlock on InnoDB's gap locks.)
            passed = self._passed.get()
            if self.queue.empty():
                self._sync(passed)
            self._idle_since = time.monotonic()

    def opened(self) -> None:
        self.state = "applying"

    def committed(self, block: Block) -> None:
        last = block.last
        self.position = last
        self.events += block.seqnos
        self.state = "idle"
        self._report(Committed(self.number, last, block.seqnos, tuple(block.skipped),
                               block.rows))
        self._idle_since = time.monotonic()

    def _sync(self, target: Position | None) -> None:
        """Move the position (nothing else) up to ``target`` if it is below it."""
        if target is None or (self.position is not None
                              and self.position.seqno >= target.seqno):
            return
        self._before_commit()
        self.applier.begin()
        self.applier.commit(target)
        crashpoints.reached("apply-committed")
        self.position = target
        self._report(Committed(self.number, target, 0))


class ChannelSet:
    """The channels of one online session; the stream thread's handle on them."""

    def __init__(self, name: str, appliers: Sequence[Applier], limits: BlockLimits,
                 positions: Sequence[Position | None],
                 prep: Applying,
                 before_commit: Callable[[], None],
                 count_rows: Callable[[int], None]) -> None:
        self.reports: queue.SimpleQueue[Committed] = queue.SimpleQueue()
        known = [p for p in positions if p is not None]
        lowest = min(known, key=lambda p: p.seqno) if known else None
        #: The highest stored position at the start: a clean stop must pass it first.
        self.highest = max((p.seqno for p in known), default=-1)
        self._passed = _Passed(lowest)
        size = max(4 * limits.events, 64)
        self.workers = [
            ChannelWorker(c, name, a, limits, positions[c], self._passed, prep,
                          before_commit, self.reports.put, count_rows, size)
            for c, a in enumerate(appliers)]

    def start(self) -> None:
        for w in self.workers:
            w.thread.start()

    @property
    def positioned(self) -> bool:
        """Every channel has a stored position (a fresh group has none until its first
        critical seqno, after which every channel is moved to it)."""
        return all(w.position is not None for w in self.workers)

    @property
    def passed(self) -> Position | None:
        return self._passed.get()

    def pass_seqno(self, position: Position) -> None:
        """The stream thread is done with this seqno (queued whole, or nothing to queue)."""
        self._passed.set(position)

    def check(self) -> None:
        """Raise the first failure of a channel (what stopped it), if any."""
        for w in self.workers:
            if w.failure is not None:
                raise w.failure

    def put(self, channel: int, fragment: Fragment, tick: Callable[[], None]) -> None:
        """Queue a fragment (waits while the channel's queue is full)."""
        self._put(self.workers[channel], fragment, tick)

    def _put(self, worker: ChannelWorker, msg: Fragment | _Flush,
             tick: Callable[[], None]) -> None:
        while True:
            self.check()
            try:
                worker.queue.put(msg, timeout=_TICK)
                return
            except queue.Full:
                tick()

    def drain(self, tick: Callable[[], None], sync: bool = False) -> None:
        """Until every channel committed everything it was given (and, with ``sync``, moved
        its position up to the last passed seqno).

        Channels that have no position row yet are synced one after the other: their first
        inserts into trep_commit_seqno would deadlock on InnoDB's gap locks side by side.
        """
        target = self.passed if sync else None
        one_by_one = sync and not self.positioned
        flushes = []
        for w in self.workers:
            flush = _Flush(target)
            flushes.append(flush)
            self._put(w, flush, tick)
            if one_by_one:
                self._wait(flush, tick)
        for flush in flushes:
            self._wait(flush, tick)
        self.check()

    def _wait(self, flush: _Flush, tick: Callable[[], None]) -> None:
        while not flush.done.wait(_TICK):
            self.check()
            tick()

    def stop(self) -> None:
        """Stop every channel (an open block is rolled back) and wait for them."""
        for w in self.workers:
            w.stop()
        for w in self.workers:
            if w.thread.is_alive():
                w.thread.join(60)
            if w.thread.is_alive():
                log.warning("channel %d did not stop within 60 s", w.number)

    def lowest(self) -> Position | None:
        """The group's restart point: the lowest channel position (None: a channel has none)."""
        positions = [w.position for w in self.workers]
        if any(p is None for p in positions):
            return None
        return min((p for p in positions if p is not None), key=lambda p: p.seqno)
