"""The channels of a parallel consumer group: one thread, one applier, one queue each.

The runtime's stream thread reads the THL, routes each seqno (``shards``) and hands its
fragments to a channel's queue; each channel runs blocks on its own applier (its own
connection, transaction and ``trep_commit_seqno`` row) as the single-channel runtime does,
and reports every commit back. The stream thread keeps every status, mirror and
offset, so ZooKeeper and Kafka are only ever touched from one thread.

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
from consumers.errors import ConsumerError
from consumers.position import Position
from consumers.runtime.blocks import Block
from replicator import crashpoints
from thl_topics.event import RowChange, ThlEvent

log = logging.getLogger(__package__)

#: Seconds between looks at the stop flag while a thread waits on a queue.
_TICK = 0.1


@dataclass(frozen=True)
class Fragment:
    """One fragment of a seqno for a channel."""

    event: ThlEvent
    offset: int
    size: int
    #: The operator asked to skip this seqno: move past it without applying it.
    skip: bool = False
    #: Commit right after this seqno (critical, or careful mode after a data error).
    alone: bool = False


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


class ChannelWorker:
    """One channel: applies the fragments queued for it in blocks on its own applier."""

    def __init__(self, number: int, name: str, applier: Applier, limits: BlockLimits,
                 position: Position | None, passed: _Passed,
                 apply: Callable[[Applier, ThlEvent], None],
                 before_commit: Callable[[], None], report: Callable[[Committed], None],
                 count_rows: Callable[[ThlEvent], None], queue_size: int) -> None:
        self.number = number
        self.applier = applier
        self.limits = limits
        #: The channel's stored position (last committed).
        self.position = position
        self.queue: queue.Queue[Fragment | _Flush] = queue.Queue(maxsize=queue_size)
        self.failure: BaseException | None = None
        self.events = 0
        self.state = "idle"
        self._passed = passed
        self._apply = apply
        self._before_commit = before_commit
        self._report = report
        self._count_rows = count_rows
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"{name} channel {number}",
                                       daemon=True)

    # -- the stream thread's side -------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    # -- the channel's thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
            self.state = "stopped"
        except BaseException as exc:
            self.failure = exc
            self.state = "failed"
        finally:
            self.applier.rollback()

    def _loop(self) -> None:
        block: Block | None = None
        in_seqno: int | None = None
        idle_since = time.monotonic()
        block_s = self.limits.ms / 1000
        idle = self.limits.idle
        while not self._stop.is_set():
            wait = _TICK if block is None else 0.0 if idle and in_seqno is None else max(
                0.0, min(_TICK, block.opened + block_s - time.monotonic()))
            try:
                msg = self.queue.get(timeout=wait)
            except queue.Empty:
                if block is not None and in_seqno is None and (
                        idle or time.monotonic() - block.opened >= block_s):
                    self._commit(block)
                    block, idle_since = None, time.monotonic()
                elif block is None and self.position is not None and \
                        time.monotonic() - idle_since >= block_s:
                    # Idle for a block's time: bring the position up to what was passed.
                    # Read it first, then find the queue empty: whatever was routed here
                    # up to it was queued before it was passed, so it is all committed.
                    # (A channel without a row leaves creating it to ChannelSet.drain:
                    # concurrent first inserts deadlock on InnoDB's gap locks.)
                    passed = self._passed.get()
                    if self.queue.empty():
                        self._sync(passed)
                    idle_since = time.monotonic()
                continue
            if isinstance(msg, _Flush):
                if in_seqno is not None:
                    raise RuntimeError(f"channel {self.number}: flush inside seqno {in_seqno}")
                self._commit(block)
                block = None
                self._sync(msg.sync)
                idle_since = time.monotonic()
                msg.done.set()
                continue
            event = msg.event
            if in_seqno is None:
                if block is not None and msg.alone:
                    self._commit(block)
                    block = None
                if block is None:
                    self.applier.begin()
                    block = Block(opened=time.monotonic())
                    self.state = "applying"
                in_seqno = event.seqno
            elif block is None:
                raise RuntimeError(f"channel {self.number}: fragment {event.fragno} of seqno "
                                   f"{event.seqno} outside a block")
            if msg.skip:
                if event.last_frag:
                    block.skipped.append(event.seqno)
                    log.warning("channel %d: skipped seqno %d (%s) as the operator asked: its "
                                "data is not applied", self.number, event.seqno, event.event_id)
            else:
                self._apply(self.applier, event)
            block.rows += sum(item.row_count for item in event.data
                              if isinstance(item, RowChange))
            block.bytes += msg.size
            self._count_rows(event)
            if not event.last_frag:
                crashpoints.reached("apply-between-fragments")
                continue
            block.positions.append(Position.of(event, msg.offset))
            in_seqno = None
            if block.full(self.limits) or msg.alone:
                self._commit(block)
                block, idle_since = None, time.monotonic()

    def _commit(self, block: Block | None) -> None:
        """Commit ``block`` (if any) with the position of its last seqno."""
        if block is None:
            return
        if not block.positions:
            self.applier.rollback()
            self.state = "idle"
            return
        self._before_commit()
        last = block.positions[-1]
        try:
            self.applier.commit(last)
        except ConsumerError as exc:
            if exc.seqno < 0:
                # Batched rows are sent at commit: the culprit is somewhere in the block;
                # careful mode (one seqno per block) will pin it down.
                exc.seqno, exc.event_id = last.seqno, last.event_id
            raise
        crashpoints.reached("apply-committed")
        self.position = last
        self.events += len(block.positions)
        self.state = "idle"
        self._report(Committed(self.number, last, len(block.positions), tuple(block.skipped)))

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
                 apply: Callable[[Applier, ThlEvent], None],
                 before_commit: Callable[[], None],
                 count_rows: Callable[[ThlEvent], None]) -> None:
        self.reports: queue.SimpleQueue[Committed] = queue.SimpleQueue()
        known = [p for p in positions if p is not None]
        lowest = min(known, key=lambda p: p.seqno) if known else None
        #: The highest stored position at the start: a clean stop must pass it first.
        self.highest = max((p.seqno for p in known), default=-1)
        self._passed = _Passed(lowest)
        size = max(4 * limits.events, 64)
        self.workers = [
            ChannelWorker(c, name, a, limits, positions[c], self._passed, apply,
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
        worker = self.workers[channel]
        while True:
            self.check()
            try:
                worker.queue.put(fragment, timeout=_TICK)
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
            while True:
                self.check()
                try:
                    w.queue.put(flush, timeout=_TICK)
                    break
                except queue.Full:
                    tick()
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
