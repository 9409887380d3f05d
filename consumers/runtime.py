"""The consumer runtime shared by every applier: position, handshake, order, blocks, states.

One runtime drives one consumer group. Its loop:

1. Wait until the desired state (ZooKeeper, written by ``trepctl``) is ONLINE.
2. GOING-ONLINE:SYNCHRONIZING: connect the target, read its stored position, wait until the
   THL holds that seqno and check that the THL's event there has the stored epoch and event
   id (the epoch handshake), then seek to the next seqno with a binary search.
3. ONLINE: stream records; fragments of a seqno go into one target transaction; up to
   ``block_commit_events`` seqnos (or ``block_commit_ms``) share a transaction, which also
   writes the position. After the commit: ZooKeeper mirror, Kafka offset commit, status.
4. Transient failures (target or broker down) retry with backoff from the stored position;
   data and log failures go to OFFLINE:ERROR at their seqno until an operator acts.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

from consumers.applier import Applier
from consumers.errors import (
    ConsumerError,
    DataError,
    EpochMismatch,
    PositionConflict,
    SeqnoGap,
    TerminalError,
    TransientError,
)
from consumers.feed import ThlFeed, forget_group_offsets
from consumers.metrics import ConsumerMetrics
from replicator.config import ConsumerConfig
from replicator.control import ComponentNodes, Desired, Wakeup
from replicator.state import State, Status
from replicator.zk import ServiceNodes, ZkPosition
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeedSettings:
    """Where the THL is and who reads it."""

    bootstrap: str
    topic: str
    group_id: str
    service: str


class _GoOffline(Exception):
    """The operator asked for OFFLINE (or the process is stopping) on a seqno boundary."""


class _LeadLost(Exception):
    """This process no longer holds the group's lock: another one may be applying."""


class ConsumerRuntime:
    """Runs one consumer group until ``stop()``; ``run()`` blocks."""

    def __init__(self, name: str, cfg: ConsumerConfig, feed: FeedSettings, applier: Applier,
                 control: ComponentNodes, positions: ServiceNodes,
                 metrics: ConsumerMetrics | None = None,
                 feed_factory: Callable[[FeedSettings], ThlFeed] | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.feed_settings = feed
        self.applier = applier
        self.control = control
        self.positions = positions
        self.metrics = metrics or ConsumerMetrics.disabled()
        self._feed_factory = feed_factory or (
            lambda f: ThlFeed(f.bootstrap, f.topic, f.group_id))
        self.status = Status(serviceName=feed.service, role=f"consumer:{name}",
                             host=socket.gethostname())
        #: One process applies a group at a time; others wait as standby.
        self.lead = positions.leadership(f"consumers/{name}",
                                         f"{self.status.host}:{os.getpid()}")
        self._stop = threading.Event()
        self._wakeup = Wakeup()
        self._desired = Desired(state="ONLINE" if cfg.auto_online else "OFFLINE")
        self._desired_lock = threading.Lock()
        #: The request id an error happened under: stay in ERROR until a newer request.
        self._error_request: int | None = None
        #: After a data error inside a multi-seqno block: commit seqno by seqno up to here.
        self._careful_until = -1
        #: The expected seqno at which a gap was seen once (then re-checked by handshake).
        self._gap_checked = -1
        self._last_publish = 0.0
        self._stale = False

    # -- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop at the next transaction boundary."""
        self._stop.set()
        self._wakeup.set()

    def _on_desired(self, desired: Desired) -> None:
        with self._desired_lock:
            if desired.request == 0 and not desired.skip_seqnos and desired.from_seqno is None \
                    and not desired.reset and not self.cfg.auto_online:
                desired.state = "OFFLINE"  # nobody ever asked: honour auto_online=False
            self._desired = desired
        self._wakeup.set()

    def desired(self) -> Desired:
        with self._desired_lock:
            return self._desired

    def _wants_online(self) -> bool:
        d = self.desired()
        return d.state == "ONLINE" and not self._stop.is_set() and \
            (self._error_request is None or d.request != self._error_request)

    def _publish(self, force: bool = True) -> None:
        """Publish the status; unforced publishes are throttled and caught up when idle."""
        now = time.monotonic()
        if not force and now - self._last_publish < 0.5:
            self._stale = True
            return
        self._last_publish, self._stale = now, False
        try:
            self.control.publish_status(self.status.to_json())
        except Exception as exc:  # status is best effort; ZK may be down
            log.warning("%s: cannot publish status: %s", self.name, exc)

    def _set_state(self, state: State) -> None:
        self.status.set_state(state)
        self.metrics.state(state)
        log.info("%s: %s", self.name, state.value)
        self._publish()

    # -- main loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Serve desired states until ``stop()``, while this process holds the group's lock.

        Without the lock it waits as standby and publishes nothing; losing the lock (the
        ZooKeeper session expired) abandons the open block and goes back to waiting.
        """
        self.control.watch_desired(self._on_desired)
        try:
            standby_logged = False
            while not self._stop.is_set():
                if not self.lead.acquire(timeout=1.0):
                    if not standby_logged:
                        log.info("%s: standby: another process applies this group; waiting "
                                 "for its lock", self.name)
                        standby_logged = True
                    continue
                standby_logged = False
                try:
                    self._lead()
                except _LeadLost as exc:
                    self.metrics.error("lock_lost")
                    log.warning("%s: %s; waiting for the group's lock again", self.name, exc)
                finally:
                    self.lead.release()
        finally:
            self.applier.close()

    def _lead(self) -> None:
        self.control.mark_alive(self.status.host)
        # A new lead starts clean, as a restarted process would: an error from an earlier
        # lead may have been dealt with by whoever held the lock meanwhile.
        self._error_request = None
        self.status.clear_error()
        self._set_state(State.OFFLINE)
        while not self._stop.is_set():
            self._check_lead()
            desired = self.desired()
            if desired.reset and self.status.state != State.ONLINE.value:
                self._reset()
                continue
            if not self._wants_online():
                if self._error_request is not None and \
                        self.desired().request != self._error_request:
                    self._error_request = None  # e.g. `offline` clears the error
                    self.status.clear_error()
                    self._set_state(State.OFFLINE)
                self._wakeup.wait(1.0)
                continue
            self._error_request = None
            self.status.clear_error()
            self._go_online()
        if self.status.state != State.ERROR.value:
            self._set_state(State.OFFLINE)

    def _check_lead(self) -> None:
        """On seqno boundaries: stop applying once the group's lock has gone."""
        if self.lead.lost.is_set():
            raise _LeadLost("the ZooKeeper session expired and the group's lock with it")

    def _go_online(self) -> None:
        limit = self.cfg.retry_limit_s
        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            wait=wait_exponential(multiplier=0.5, max=10),
            stop=stop_after_delay(limit) if limit else stop_never,
            sleep=self._sleep, before_sleep=self._log_retry, reraise=True)
        request = self.desired().request
        try:
            retrying(self._session)
        except _GoOffline:
            self._set_state(State.OFFLINE)
        except PositionConflict as exc:
            if not self.lead.still_held():
                raise _LeadLost(str(exc)) from exc
            self._fail(exc, request)
        except ConsumerError as exc:
            self._fail(exc, request)

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._check_lead()
            if not self._wants_online():
                raise _GoOffline
            self._wakeup.wait(min(0.5, deadline - time.monotonic()))
        if not self._wants_online():
            raise _GoOffline

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        self.metrics.error("transient")
        log.warning("%s: %s; retrying (attempt %d)", self.name, exc, state.attempt_number)
        self.status.pendingExceptionMessage = f"retrying: {exc}"
        self._set_state(State.SYNCHRONIZING)

    def _fail(self, exc: ConsumerError, request: int) -> None:
        self.metrics.error(exc.code.lower())
        log.error("%s: OFFLINE:ERROR at seqno %d: %s", self.name, exc.seqno, exc)
        self._error_request = request
        s = self.status
        s.pendingError = f"Event application failed: seqno={exc.seqno}"
        s.pendingErrorCode = exc.code
        s.pendingErrorSeqno = exc.seqno
        s.pendingErrorEventId = exc.event_id or "NONE"
        s.pendingExceptionMessage = str(exc)
        self._set_state(State.ERROR)

    def _reset(self) -> None:
        log.info("%s: reset: clearing the stored position", self.name)
        try:
            self.applier.connect()
            self.applier.reset()
        except ConsumerError as exc:
            self._fail(exc, self.desired().request)
            return
        self.positions.write_position(f"consumers/{self.name}", ZkPosition(-1, -1, ""))
        try:
            forget_group_offsets(self.feed_settings.bootstrap, self.feed_settings.group_id)
        except TransientError as exc:
            # Informational only (the target holds the position): the next commit after
            # `online` overwrites it anyway.
            log.warning("%s: reset: %s", self.name, exc)
        self.status.appliedLastSeqno = -1
        self.status.appliedLastEventId = ""
        self.status.appliedLastEpoch = -1
        self.control.update_desired(_clear_reset)
        self._on_desired(self.control.desired())
        self._set_state(State.OFFLINE)

    # -- one online session ------------------------------------------------------------------

    def _session(self) -> None:
        self._set_state(State.SYNCHRONIZING)
        feed = self._feed_factory(self.feed_settings)
        try:
            self.applier.connect()
            start = self._handshake(feed)
            if start is not None:
                feed.seek(start)
            else:
                first = self._wait_for(feed.first_seqno)
                feed.seek(first)
            self.status.pendingExceptionMessage = "NONE"
            self._set_state(State.ONLINE)
            self._stream(feed, start)
        except (DataError, TerminalError) as exc:
            self.applier.rollback()
            if exc.seqno > self._careful_until and not isinstance(exc, EpochMismatch):
                # The block rolled back whole: commit what precedes the bad seqno one by
                # one, then fail on it alone, so the stored position is right before it.
                log.info("%s: error at seqno %d inside a block; reapplying the block "
                         "one seqno at a time", self.name, exc.seqno)
                self._careful_until = exc.seqno
                raise TransientError(str(exc), seqno=exc.seqno) from exc
            raise
        except BaseException:
            self.applier.rollback()
            raise
        finally:
            feed.close()

    def _wait_for(self, probe: Callable[[], int | None]) -> int:
        while True:
            value = probe()
            if value is not None:
                return value
            self._check_lead()
            if not self._wants_online():
                raise _GoOffline
            self._wakeup.wait(0.5)

    def _handshake(self, feed: ThlFeed) -> int | None:
        """The next seqno to apply (None: from the THL's start), after the epoch check."""
        desired = self.desired()
        if desired.from_seqno is not None:
            start = desired.from_seqno
            log.info("%s: starting at seqno %d as the operator asked", self.name, start)
            self.control.update_desired(_clear_from)
            self._on_desired(self.control.desired())
            # Replay really means replay: drop the stored position first.
            self.applier.reset()
            return start
        stored = self.applier.position()
        if stored is None:
            return None
        self.status.appliedLastSeqno = stored.seqno
        self.status.appliedLastEventId = stored.eventid
        self.status.appliedLastEpoch = stored.epoch
        rec: ThlRecord | None = None
        while rec is None:
            # The position names the seqno's last fragment: each fragment has its own
            # event id, so compare with that one, not with fragment 0.
            rec = feed.record_at(stored.seqno, stored.fragno)
            if rec is None:
                self.status.pendingExceptionMessage = (
                    f"waiting for the THL to reach seqno {stored.seqno}")
                self._publish(force=False)
                self._check_lead()
                if not self._wants_online():
                    raise _GoOffline
                self._wakeup.wait(0.5)
        same = (rec.seqno, rec.fragno) == (stored.seqno, stored.fragno)
        if same and rec.event is None:
            raise TerminalError(f"THL record of seqno {stored.seqno} cannot be read: "
                                f"{rec.error}", seqno=stored.seqno)
        server = rec.event if same else None
        if server is None or server.epoch != stored.epoch \
                or server.event_id != stored.eventid:
            # No such fragment, or another epoch or event id there: another log.
            found = (f"server epoch number={server.epoch} client epoch number={stored.epoch} "
                     f"(server event id {server.event_id}, client event id {stored.eventid})"
                     if server is not None else
                     f"server has no fragment {stored.fragno} of seqno {stored.seqno} (next "
                     f"record: seqno {rec.seqno} fragment {rec.fragno}) client epoch "
                     f"number={stored.epoch}")
            raise EpochMismatch(
                "Client handshake failure: Client response validation failed: Log epoch "
                f"numbers do not match: client source ID={stored.source_id} "
                f"seqno={stored.seqno} {found}. The THL topic {self.feed_settings.topic} "
                "is not the log "
                "this target was applied from; compare the THL and the target, then "
                "`trepctl reset` and `online --from-seqno N`.",
                seqno=stored.seqno, event_id=stored.eventid)
        return stored.seqno + 1

    def _stream(self, feed: ThlFeed, start: int | None) -> None:
        expected = start
        block: list[ThlEvent] = []
        last_offset = -1
        opened = 0.0
        in_seqno: int | None = None
        next_frag = 0
        skips = set(self.desired().skip_seqnos)
        skipped: list[int] = []
        block_ms = self.cfg.block_commit_ms / 1000

        def commit() -> None:
            nonlocal block, skipped
            if not block:
                return
            # Another process may hold the lock by now: its work, not this block, counts.
            self._check_lead()
            try:
                self.applier.commit(block[-1])
            except ConsumerError as exc:
                if exc.seqno < 0:
                    # Batched rows are sent at commit: the culprit is somewhere in the block;
                    # careful mode (one seqno per block) will pin it down.
                    exc.seqno, exc.event_id = block[-1].seqno, block[-1].event_id
                raise
            self._committed(block, last_offset, feed)
            if skipped:
                self._consume_skips(skipped)
                skipped = []
            block = []

        while True:
            if in_seqno is None:
                self._check_lead()
                if not self._wants_online():
                    commit()
                    raise _GoOffline
                if block and time.monotonic() - opened >= block_ms:
                    commit()
            wait = 0.2 if not block else max(0.0, min(0.2, opened + block_ms - time.monotonic()))
            rec = feed.poll(wait)
            if rec is None:
                if self._stale:
                    self._publish(force=False)  # idle: let the last commit show
                continue
            if rec.event is None:
                raise TerminalError(f"{rec.error}; the consumer stops here", seqno=rec.seqno)
            event = rec.event
            if in_seqno is None:
                if expected is not None and event.seqno < expected:
                    log.debug("%s: seqno %d already applied", self.name, event.seqno)
                    continue
                if expected is not None and event.seqno > expected \
                        and self._gap_checked != expected:
                    # A hole, or another log under the same topic name (recreated): go back
                    # through the handshake once before calling it a gap.
                    self._gap_checked = expected
                    raise TransientError(f"seqno {event.seqno} follows {expected - 1} at "
                                         f"offset {rec.offset}; checking the log again",
                                         seqno=expected)
                if expected is not None and event.seqno > expected:
                    raise SeqnoGap(f"THL topic {self.feed_settings.topic} jumps from seqno "
                                   f"{expected - 1} to {event.seqno} at offset {rec.offset}: "
                                   "never applying past a hole", seqno=expected)
                if event.fragno != 0:
                    raise TerminalError(f"seqno {event.seqno} starts at fragment "
                                        f"{event.fragno} (offset {rec.offset})",
                                        seqno=event.seqno)
                if block and self.applier.isolates(event):
                    commit()
                if not block:
                    self.applier.begin()
                    opened = time.monotonic()
                in_seqno, next_frag = event.seqno, 0
            elif event.seqno != in_seqno or event.fragno != next_frag:
                raise TerminalError(
                    f"seqno {in_seqno} is missing fragment {next_frag}: found seqno "
                    f"{event.seqno} fragment {event.fragno} at offset {rec.offset}",
                    seqno=in_seqno)
            if event.seqno in skips:
                self.applier.skip(event)
                if event.last_frag:
                    skipped.append(event.seqno)
                    log.warning("%s: skipped seqno %d as the operator asked", self.name,
                                event.seqno)
            else:
                try:
                    self.applier.apply(event)
                except ConsumerError as exc:
                    if exc.seqno < 0:
                        exc.seqno, exc.event_id = event.seqno, event.event_id
                    raise
            self.metrics.rows(event)
            next_frag += 1
            if not event.last_frag:
                continue
            block.append(_position_only(event))
            last_offset = rec.offset
            in_seqno, expected = None, event.seqno + 1
            if len(block) >= self.cfg.block_commit_events or self.applier.isolates(event) \
                    or event.seqno <= self._careful_until:
                commit()

    def _committed(self, block: list[ThlEvent], last_offset: int, feed: ThlFeed) -> None:
        last = block[-1]
        s = self.status
        s.appliedLastSeqno, s.appliedLastEventId = last.seqno, last.event_id
        s.appliedLastEpoch = last.epoch
        s.appliedLatency = round(max(0.0, time.time() - last.tstamp / 1e6), 3)
        self.metrics.applied(block, s.appliedLatency)
        self.positions.mirror_position(f"consumers/{self.name}",
                                       ZkPosition(last.seqno, last.epoch, last.event_id))
        feed.commit(last_offset + 1)
        self._publish(force=False)

    def _consume_skips(self, done: list[int]) -> None:
        self.status.skippedSeqnos = sorted({*self.status.skippedSeqnos, *done})[-100:]

        def drop(d: Desired) -> None:
            d.skip_seqnos = [s for s in d.skip_seqnos if s not in done]
        self.control.update_desired(drop)


def _position_only(event: ThlEvent) -> ThlEvent:
    """The event without its rows: a block keeps positions, not data."""
    return ThlEvent(seqno=event.seqno, epoch=event.epoch, source_id=event.source_id,
                    event_id=event.event_id, shard_id=event.shard_id, tstamp=event.tstamp,
                    fragno=event.fragno, last_frag=event.last_frag, metadata=event.metadata)


def _clear_from(d: Desired) -> None:
    d.from_seqno = None


def _clear_reset(d: Desired) -> None:
    d.reset = False

