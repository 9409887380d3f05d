"""The consumer runtime shared by every applier: position, handshake, order, blocks, states.

One runtime drives one consumer group. Its loop:

1. Wait for the group's ZooKeeper lock (another process may apply the group: standby), then
   until the desired state (ZooKeeper, written by ``trepctl``) is ONLINE.
2. GOING-ONLINE:SYNCHRONIZING: connect the target, read its stored position, wait until the
   THL holds that seqno's last fragment and check that it has the stored epoch and event id
   (the epoch handshake), then seek to the next seqno with a binary search.
3. ONLINE: stream records. The runtime prepares each fragment for the target: the group's
   filters run, heartbeat rows become ``Heartbeat`` records, statements follow the applier's
   policy, keyless tables are refused where the applier cannot address their rows. Fragments
   of a seqno go into one block; a block closes at the applier's limits (events, rows, bytes,
   milliseconds; the group may override them) and commits with its position. After the
   commit: ZooKeeper mirror, Kafka offset commit, status.
4. Transient failures (target, broker or ZooKeeper down) retry with backoff from the stored
   position; data and log failures go to OFFLINE:ERROR at their seqno until an operator acts.

With ``channels: N`` (parallel apply, ``shards``) step 3 routes each seqno to
a channel by shard; the channels apply side by side on their own appliers
(``channel_workers``), critical seqnos apply alone, and the group's position is the
lowest channel's. Everything else (states, retries, handshake, mirrors) stays here.

ZooKeeper is the control plane, never the position of record: while it is away the group
goes on applying (the target holds the position), mirrors and statuses are sent again when it
is back, and only the lock matters: a process whose ZooKeeper session expired stops at the
next seqno boundary and waits for the lock again.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar, cast

from kazoo.exceptions import KazooException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

from consumers.applier import Applier, StatementPolicy, WarmsUp
from consumers.check import CheckingApplier, CheckRange, CheckResult, check_of, now_text
from consumers.config import GroupConfig
from consumers.errors import (
    ConsumerError,
    DataError,
    EpochMismatch,
    PositionConflict,
    Purged,
    SeqnoGap,
    TerminalError,
    TransientError,
)
from consumers.feed import ThlFeed, forget_group_offsets
from consumers.heartbeat import HEARTBEAT_TABLE, Heartbeat, heartbeats
from consumers.metrics import ConsumerMetrics
from consumers.position import Position
from consumers.runtime.blocks import Block
from consumers.runtime.channel_workers import ChannelSet, Fragment
from consumers.runtime.shards import ChannelApplier, ChannelError, ShardMap, plan_channels
from replicator import crashpoints
from replicator.config import ConfigError
from replicator.control import ComponentNodes, Desired, Wakeup
from replicator.filters import FilterError, ReplicateFilter, build_chain
from replicator.sql_names import is_transactional
from replicator.state import State, Status
from replicator.zk import ServiceNodes, ZkHealth, ZkPosition
from thl_topics.checksum import range_digest
from thl_topics.event import DataItem, RowChange, Statement, ThlEvent
from thl_topics.reader import ThlRecord
from thl_topics.records import META_CHECK

log = logging.getLogger(__package__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class FeedSettings:
    """Where the THL is and who reads it."""

    #: librdkafka settings of the cluster (bootstrap servers, security).
    kafka: dict[str, Any]
    topic: str
    group_id: str
    service: str
    #: ``tungsten_<service>``: rows of this schema are the replicator's, not data.
    tracking_schema: str = field(default="")


class _GoOffline(Exception):
    """The operator asked for OFFLINE (or the process is stopping) on a seqno boundary."""


class _LeadLost(Exception):
    """This process no longer holds the group's lock: another one may be applying."""


class _Progressed(Exception):
    """A session committed blocks, then failed transiently: retry as a new outage."""

    def __init__(self, cause: TransientError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class ConsumerRuntime:
    """Runs one consumer group until ``stop()``; ``run()`` blocks."""

    def __init__(self, name: str, cfg: GroupConfig, feed: FeedSettings, applier: Applier,
                 control: ComponentNodes, positions: ServiceNodes,
                 metrics: ConsumerMetrics | None = None,
                 feed_factory: Callable[[FeedSettings], ThlFeed] | None = None,
                 zk_health: ZkHealth | None = None,
                 channel_appliers: Sequence[Applier] = ()) -> None:
        """``channel_appliers``: with ``channels: N``, the appliers of channels 1 to N-1
        (``applier`` is channel 0's)."""
        self.name = name
        self.cfg = cfg
        self.feed_settings = feed
        self.applier = applier
        self.capabilities = applier.capabilities
        #: One applier per channel (parallel apply), channel 0 first.
        self.appliers = [applier, *channel_appliers]
        if cfg.channels > 1 and not self.capabilities.channels:
            raise ConfigError(
                f"consumer group {name}: channels: {cfg.channels} needs a target that "
                f"applies in parallel, and {applier.target} does not; set channels: 1")
        if len(self.appliers) != cfg.channels:
            raise ConfigError(f"consumer group {name}: channels: {cfg.channels} needs "
                              f"{cfg.channels} appliers, got {len(self.appliers)}")
        self._parallel = cfg.channels > 1
        self.limits = cfg.block_limits(applier.capabilities.block)
        self.filter = ReplicateFilter(cfg.filters.replicate, cfg.filters.ignore)
        self.chain = build_chain(cfg.filters.chain)
        self.control = control
        self.positions = positions
        self.metrics = metrics or ConsumerMetrics.disabled()
        self.zk_health = zk_health
        self._feed_factory = feed_factory or (
            lambda f: ThlFeed(f.kafka, f.topic, f.group_id))
        self.status = Status(serviceName=feed.service, role=f"consumer:{name}",
                             host=socket.gethostname())
        #: One process applies a group at a time; others wait as standby.
        self.lead = positions.leadership(f"consumers/{name}",
                                         f"{self.status.host}:{os.getpid()}")
        self._stop = threading.Event()
        self._wakeup = Wakeup()
        #: The standby warm-up ran (once per process).
        self._warmed = False
        self._desired = Desired(state="ONLINE" if cfg.auto_online else "OFFLINE")
        self._desired_lock = threading.Lock()
        #: The request id an error happened under: stay in ERROR until a newer request.
        self._error_request: int | None = None
        #: After a data error inside a multi-seqno block: commit seqno by seqno up to here.
        self._careful_until = -1
        #: The expected seqno at which a gap was seen once (then re-checked by handshake).
        self._gap_checked = -1
        #: Skipped seqnos passed and committed, still to be cleared from the desired state.
        self._skips_done: list[int] = []
        self._last_publish = 0.0
        self._stale = False
        #: Parallel apply: the channels of the running session, their shards, and the
        #: stored position of each channel when the session started.
        self._channels: ChannelSet | None = None
        self._shards: ShardMap | None = None
        self._channel_start: list[Position | None] = [None] * cfg.channels
        #: ... and where each channel is now (for status).
        self._channel_pos: list[Position | None] = [None] * cfg.channels
        #: Critical seqnos applied alone since the process started.
        self._critical = 0
        #: Blocks committed (any channel): a session that committed one made progress.
        self._commits = 0

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

    def _zk(self, call: Callable[[], _T], doing: str) -> _T:
        """A ZooKeeper call the group cannot go on without: its failure is transient."""
        try:
            return call()
        except KazooException as exc:
            raise TransientError(f"ZooKeeper: {doing}: {type(exc).__name__} {exc}") from exc

    def _publish(self, force: bool = True) -> None:
        """Publish the status; unforced publishes are throttled and caught up when idle."""
        now = time.monotonic()
        if not force and now - self._last_publish < 0.5:
            self._stale = True
            return
        self._last_publish, self._stale = now, False
        if self.zk_health is not None:
            self.status.zookeeperDisconnects = self.zk_health.disconnects
        status = self.status.to_json()
        if self._parallel:
            status.update(self._channel_status())
        try:
            self.control.publish_status(status)
        except Exception as exc:  # status is best effort; ZK may be down
            self._stale = True
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
        ZooKeeper session expired) abandons the open block and goes back to waiting. Nothing
        but ``stop()`` ends this loop: ZooKeeper being away is waited out, and an unexpected
        failure puts the group in OFFLINE:ERROR, where trepctl shows it.
        """
        try:
            self._until_stopped(lambda: self.control.watch_desired(self._on_desired),
                                "watching the desired state")
            standby_logged = False
            while not self._stop.is_set():
                held = self._until_stopped(lambda: self.lead.acquire(timeout=1.0),
                                           "taking the group's lock")
                if not held:
                    if not standby_logged and not self._stop.is_set():
                        log.info("%s: standby: another process applies this group; waiting "
                                 "for its lock", self.name)
                        standby_logged = True
                        self._warm_up()
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
            for applier in self.appliers:
                applier.close()

    def _warm_up(self) -> None:
        """As a standby, once per process: pay what a takeover would (the warehouse's Spark
        start), so that taking over costs seconds, not a cold start."""
        if self._warmed:
            return
        self._warmed = True
        for applier in self.appliers:
            if not isinstance(applier, WarmsUp):
                continue
            started = time.monotonic()
            try:
                applier.warm_up()
            except Exception as exc:  # the takeover's connect() reports it properly
                log.warning("%s: standby warm-up failed (a takeover starts cold): %s",
                            self.name, exc)
                continue
            log.info("%s: standby warmed up in %.1f s", self.name, time.monotonic() - started)

    def _until_stopped(self, call: Callable[[], _T], doing: str) -> _T | None:
        """``call()``, tried again every second while ZooKeeper fails (None once stopped)."""
        logged = False
        while not self._stop.is_set():
            try:
                return call()
            except KazooException as exc:
                if not logged:
                    log.warning("%s: ZooKeeper: %s: %s; trying again every second",
                                self.name, doing, exc)
                    logged = True
                self._stop.wait(1.0)
        return None

    def _lead(self) -> None:
        try:
            self.control.mark_alive(self.status.host)
        except KazooException as exc:
            log.warning("%s: cannot mark this process alive yet: %s", self.name, exc)
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
                if self._stale:
                    self._publish(force=False)
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
        request = self.desired().request
        try:
            while True:
                # Backoff and retry_limit_s count one outage: a session that committed
                # something before it failed starts a fresh count.
                limit = self.cfg.retry_limit_s
                retrying = Retrying(
                    retry=retry_if_exception_type(TransientError),
                    wait=wait_exponential(multiplier=0.5, max=10),
                    stop=stop_after_delay(limit) if limit else stop_never,
                    sleep=self._sleep, before_sleep=self._log_retry, reraise=True)
                try:
                    retrying(self._session)
                except _Progressed as progressed:
                    self._log_failure(progressed.cause, 1)
                    self._sleep(0.5)
        except _GoOffline:
            self._set_state(State.OFFLINE)
        except PositionConflict as exc:
            if not self.lead.still_held():
                raise _LeadLost(str(exc)) from exc
            self._fail(exc, request)
        except ConsumerError as exc:
            self._fail(exc, request)
        except (_LeadLost, KeyboardInterrupt):
            raise
        except Exception as exc:
            # A bug, not a condition of the target or the log: stop where trepctl shows it
            # rather than let the thread die behind a process that looks alive.
            log.exception("%s: unexpected failure", self.name)
            self._fail(TerminalError(f"internal error: {type(exc).__name__}: {exc}",
                                     seqno=self.status.appliedLastSeqno + 1), request,
                       kind="internal")

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
        self._log_failure(state.outcome.exception() if state.outcome else None,
                          state.attempt_number)

    def _log_failure(self, exc: BaseException | None, attempt: int) -> None:
        self.metrics.error("transient")
        log.warning("%s: %s; retrying (attempt %d)", self.name, exc, attempt)
        self.status.pendingExceptionMessage = f"retrying: {exc}"
        self._set_state(State.SYNCHRONIZING)

    def _fail(self, exc: ConsumerError, request: int, kind: str | None = None) -> None:
        self.metrics.error(kind or exc.code.lower())
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
            self._zk(lambda: self.positions.write_position(
                f"consumers/{self.name}", ZkPosition(-1, -1, "")), "clearing the mirror")
            for c in range(self.cfg.channels if self._parallel else 0):
                self._zk(partial(self.positions.write_position, self._channel_component(c),
                                 ZkPosition(-1, -1, "")), "clearing the channel mirrors")
            self._channel_start = self._channel_pos = [None] * self.cfg.channels
        except ConsumerError as exc:
            self._fail(exc, self.desired().request)
            return
        try:
            forget_group_offsets(self.feed_settings.kafka, self.feed_settings.group_id)
        except TransientError as exc:
            # Informational only (the target holds the position): the next commit after
            # `online` overwrites it anyway.
            log.warning("%s: reset: %s", self.name, exc)
        self.status.appliedLastSeqno = -1
        self.status.appliedLastEventId = ""
        self.status.appliedLastEpoch = -1
        try:
            self.control.update_desired(_clear_reset)
            self._on_desired(self.control.desired())
        except KazooException as exc:
            # The position is cleared; a reset request left in place clears it again.
            log.warning("%s: reset done, but the request stays until ZooKeeper answers: %s",
                        self.name, exc)
            self._wakeup.wait(1.0)
            return
        self._set_state(State.OFFLINE)

    # -- one online session ------------------------------------------------------------------

    def _session(self) -> None:
        self._set_state(State.SYNCHRONIZING)
        feed = self._feed_factory(self.feed_settings)
        try:
            for applier in self.appliers:
                # One after the other: channel 0 creates the tracking schema.
                applier.connect()
            start = self._handshake(feed)
            if start is not None:
                feed.seek(start)
            else:
                first = self._wait_for(feed.first_seqno)
                feed.seek(first)
            self.status.pendingExceptionMessage = "NONE"
            self._set_state(State.ONLINE)
            committed = self._commits
            try:
                if self._parallel:
                    self._stream_parallel(feed, start)
                else:
                    self._stream(feed, start)
            except TransientError as exc:
                if self._commits != committed:
                    raise _Progressed(exc) from exc
                raise
        except (DataError, TerminalError) as exc:
            self.applier.rollback()
            if exc.seqno > self._careful_until and not isinstance(exc, EpochMismatch
                                                                  | ChannelError):
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
            # Replay really means replay: drop the stored position first.
            self.applier.reset()
            if self.capabilities.channels:
                self._stored_position()  # every channel's row is gone: start them afresh
            self._zk(lambda: self.control.update_desired(_clear_from),
                     "clearing the --from-seqno request")
            self._on_desired(self.control.desired())
            return start
        stored = self._stored_position()
        crashpoints.reached("apply-handshake")
        if stored is None:
            first = self._wait_for(feed.first_seqno)
            if first > 0:
                raise Purged(
                    f"the THL topic {self.feed_settings.topic} starts at seqno {first}: the "
                    "events before it were purged (or the topic was recreated), and this "
                    "target never applied anything. Provision the target (trepctl provision), "
                    f"then `trepctl online -group {self.name} --from-seqno {first}`.",
                    seqno=0)
            return None
        self.status.appliedLastSeqno = stored.seqno
        self.status.appliedLastEventId = stored.event_id
        self.status.appliedLastEpoch = stored.epoch
        self._verify(feed, stored)
        # Parallel apply: every channel's position must be in this log too, before any
        # channel applies anything.
        for pos in {(p.seqno, p.fragno, p.epoch, p.event_id): p
                    for p in self._channel_start if p is not None}.values():
            if pos.seqno != stored.seqno:
                self._verify(feed, pos)
        return stored.seqno + 1

    def _stored_position(self) -> Position | None:
        """The stored position the group starts from: the applier's or, with channels, the
        lowest channel's, after the stored channel count was checked against ours."""
        store = None
        if self.capabilities.channels:
            store = cast(ChannelApplier, self.applier).channel_store()
            plan_channels(store, self.cfg.channels, self.name, self.applier.target)
        if not self._parallel or store is None:
            return self.applier.position()
        # Each applier reads its own row: what its next commit expects to replace.
        positions = [a.position() for a in self.appliers]
        if None in positions and any(p is not None for p in positions):
            raise ChannelError(
                f"{self.applier.target}: trep_commit_seqno lacks the rows of channel(s) "
                f"{', '.join(str(c) for c, p in enumerate(positions) if p is None)} of "
                f"consumer group {self.name} while others have one: another process may be "
                "writing them. Stop every process of the group, then start one.")
        self._channel_start, self._channel_pos = positions, list(positions)
        self._shards = ShardMap(self.cfg.channels, store.assignments(),
                                store.critical_shards(), store.assign,
                                where=f"{self.applier.target}: ")
        known = [p for p in positions if p is not None]
        return min(known, key=lambda p: p.seqno) if known else None

    def _verify(self, feed: ThlFeed, stored: Position) -> None:
        """The THL holds ``stored`` (epoch and event id): the epoch handshake."""
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
        kept = feed.first_seqno()
        if not same and kept is not None and kept > stored.seqno:
            raise Purged(
                f"seqno {stored.seqno + 1}, the next one this group needs, was purged from "
                f"the THL topic {self.feed_settings.topic} (it starts at seqno {kept}). "
                "Re-provision the target (trepctl provision) and restart it with `trepctl "
                f"reset -group {self.name}` and `online -group {self.name} --from-seqno "
                f"{kept}`.", seqno=stored.seqno + 1)
        if same and rec.event is None:
            raise TerminalError(f"THL record of seqno {stored.seqno} cannot be read: "
                                f"{rec.error}", seqno=stored.seqno)
        server = rec.event if same else None
        if server is None or server.epoch != stored.epoch \
                or server.event_id != stored.event_id:
            # No such fragment, or another epoch or event id there: another log.
            found = (self._differs(server, stored) if server is not None else
                     f"server has no fragment {stored.fragno} of seqno {stored.seqno} (next "
                     f"record: seqno {rec.seqno} fragment {rec.fragno}) client epoch "
                     f"number={stored.epoch}")
            raise self._epoch_mismatch(stored, found)

    @staticmethod
    def _differs(server: ThlEvent, stored: Position) -> str:
        return (f"server epoch number={server.epoch} client epoch number={stored.epoch} "
                f"(server event id {server.event_id}, client event id {stored.event_id})")

    def _epoch_mismatch(self, stored: Position, found: str) -> EpochMismatch:
        return EpochMismatch(
            "Client handshake failure: Client response validation failed: Log epoch "
            f"numbers do not match: client source ID={stored.source_id} "
            f"seqno={stored.seqno} {found}. The THL topic {self.feed_settings.topic} "
            "is not the log this target was applied from; compare the THL and the "
            "target, then `trepctl reset` and `online --from-seqno N`.",
            seqno=stored.seqno, event_id=stored.event_id)

    # -- preparing events for the target -----------------------------------------------------

    def _prepare(self, event: ThlEvent) -> tuple[ThlEvent, list[Heartbeat]]:
        """What of ``event`` this target gets, and the heartbeats it carries.

        In order: the replicator's own rows come out (heartbeats are kept aside), the
        group's replicate/ignore filter, its filter chain, then what the applier declared:
        its statement policy and whether it takes tables without a key (a pkey filter in
        the chain may have given them one).
        """
        kept: list[DataItem] = []
        beats: list[Heartbeat] = []
        for item in event.data:
            if isinstance(item, RowChange):
                if item.schema == self.feed_settings.tracking_schema:
                    if item.table == HEARTBEAT_TABLE:
                        beats.extend(heartbeats(item, event.seqno, event.event_id))
                    continue  # the replicator's own bookkeeping, never data
                if self.filter.keeps(item.schema, item.table):
                    kept.append(item)
            elif self.filter.keeps_item(item):
                kept.append(item)
        if len(kept) != len(event.data):
            event = replace(event, data=kept)
        if self.chain and event.data:
            try:
                filtered = self.chain(event)
            except FilterError as exc:
                raise DataError(str(exc), seqno=event.seqno, event_id=event.event_id) from exc
            event = filtered if filtered is not None else replace(event, data=[])
        if any(not self._admits(item, event) for item in event.data):
            event = replace(event, data=[i for i in event.data if self._admits(i, event)])
        return event, beats

    def _admits(self, item: DataItem, event: ThlEvent) -> bool:
        """Whether the applier gets ``item`` (DataError where it declared it cannot take it)."""
        if isinstance(item, RowChange):
            if not self.capabilities.keyless_tables and not any(
                    c.primary_key for c in item.column_specs or item.key_specs):
                raise DataError(
                    f"table {item.schema}.{item.table} has no primary key and "
                    f"{self.applier.target} cannot address its rows (seqno {event.seqno}); "
                    "add a key on the source or with a pkey filter, filter the table out of "
                    "this group, or skip the seqno", seqno=event.seqno,
                    event_id=event.event_id)
            return True
        policy = self.capabilities.statements
        if policy is StatementPolicy.APPLY:
            return True
        if policy is StatementPolicy.ERROR:
            raise DataError(
                f"seqno {event.seqno} holds a statement event, which {self.applier.target} "
                f"does not run: {item.sql[:200]!r}. Set this target's `statements: skip` to "
                "leave statements out, or skip the seqno.", seqno=event.seqno,
                event_id=event.event_id)
        return False

    def _isolates(self, event: ThlEvent) -> bool:
        """A statement the target commits by itself (DDL) is applied in a block of its own,
        and so is a check: it must see every earlier seqno committed."""
        if META_CHECK in event.metadata:
            return True
        return self.capabilities.statements is StatementPolicy.APPLY and any(
            isinstance(item, Statement) and not is_transactional(item.sql)
            for item in event.data)

    # -- streaming ---------------------------------------------------------------------------

    def _stream(self, feed: ThlFeed, start: int | None) -> None:
        expected = start
        block = Block()
        in_seqno: int | None = None
        next_frag = 0
        skips = set(self.desired().skip_seqnos)
        block_s = self.limits.ms / 1000
        idle = self.limits.idle

        def commit() -> None:
            nonlocal block
            if not block.positions:
                return
            # Another process may hold the lock by now: its work, not this block, counts.
            self._check_lead()
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
            self._committed(block, feed)
            block = Block()

        while True:
            if in_seqno is None:
                self._check_lead()
                if not self._wants_online():
                    commit()
                    raise _GoOffline
                if block.positions and time.monotonic() - block.opened >= block_s:
                    commit()
            wait = 0.2 if not block.positions else 0.0 if idle and in_seqno is None else max(
                0.0, min(0.2, block.opened + block_s - time.monotonic()))
            rec = feed.poll(wait)
            if rec is None:
                if idle and block.positions and in_seqno is None:
                    commit()  # nothing waits: the block need not wait either
                    continue
                if self._stale:
                    self._publish(force=False)  # idle: let the last commit show
                if self._skips_done:
                    self._consume_skips([])
                continue
            if rec.event is None:
                raise TerminalError(f"{rec.error}; the consumer stops here", seqno=rec.seqno)
            event = rec.event
            if in_seqno is None:
                if not self._starts_seqno(event, rec, expected):
                    continue
                isolated = event.seqno not in skips and self._isolates(event)
                if block.positions and isolated:
                    commit()
                if not block.positions:
                    self.applier.begin()
                    block.opened = time.monotonic()
                in_seqno, next_frag = event.seqno, 0
            else:
                self._continues_seqno(event, rec, in_seqno, next_frag)
            if event.seqno in skips:
                if event.last_frag:
                    block.skipped.append(event.seqno)
                    log.warning("%s: skipped seqno %d (%s) as the operator asked: its data "
                                "is not applied", self.name, event.seqno, event.event_id)
            else:
                self._apply(event)
            block.rows += sum(item.row_count for item in event.data
                              if isinstance(item, RowChange))
            block.bytes += rec.size
            self.metrics.rows(event)
            next_frag += 1
            if not event.last_frag:
                crashpoints.reached("apply-between-fragments")
                continue
            block.positions.append(Position.of(event, rec.offset))
            in_seqno, expected = None, event.seqno + 1
            if block.full(self.limits) or event.seqno <= self._careful_until or (
                    event.seqno not in skips and self._isolates(event)):
                commit()

    def _starts_seqno(self, event: ThlEvent, rec: ThlRecord, expected: int | None) -> bool:
        """Checks at the first record of a seqno; False: before the start, already applied."""
        if expected is not None and event.seqno < expected:
            log.debug("%s: seqno %d already applied", self.name, event.seqno)
            return False
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
        return True

    @staticmethod
    def _continues_seqno(event: ThlEvent, rec: ThlRecord, in_seqno: int,
                         next_frag: int) -> None:
        """Checks at a later record of a seqno: its next fragment, nothing else."""
        if event.seqno != in_seqno or event.fragno != next_frag:
            raise TerminalError(
                f"seqno {in_seqno} is missing fragment {next_frag}: found seqno "
                f"{event.seqno} fragment {event.fragno} at offset {rec.offset}",
                seqno=in_seqno)

    def _apply(self, event: ThlEvent, applier: Applier | None = None) -> None:
        """One fragment into the open block of ``applier`` (default: the group's; with
        channels, the channel's), with the seqno on any error it raises."""
        applier = applier or self.applier
        check = check_of(event)
        if check is not None:
            self._check(check, event, applier)
            return
        try:
            prepared, beats = self._prepare(event)
            if prepared.data:
                applier.apply(prepared)
            for beat in beats:
                applier.heartbeat(beat)
        except ConsumerError as exc:
            if exc.seqno < 0:
                exc.seqno, exc.event_id = event.seqno, event.event_id
            raise

    def _check(self, check: CheckRange, event: ThlEvent, target: Applier) -> None:
        """Compare the target's rows of a checked range with the source's, record both."""
        if not self.filter.keeps(check.schema, check.table):
            return
        if not self.capabilities.checks:
            self._publish_check({"request": check.request, "schema": check.schema,
                                 "table": check.table, "range": check.range,
                                 "unsupported": True})
            return
        applier = cast(CheckingApplier, target)
        try:
            count, digest = range_digest(check.specs, applier.read_range(check))
            result = CheckResult(
                request=check.request, schema=check.schema, table=check.table,
                range=check.range, limit=check.limit, lo=check.lo, hi=check.hi,
                source_count=check.count, source_digest=check.digest, target_count=count,
                target_digest=digest, method=check.method, seqno=event.seqno,
                checked_at=now_text())
            applier.record_check(result)
        except ConsumerError as exc:
            if exc.seqno < 0:
                exc.seqno, exc.event_id = event.seqno, event.event_id
            raise
        if not result.equal:
            log.warning("%s: check %s: %s.%s range %d differs: source %d rows %s, target %d "
                        "rows %s", self.name, check.request, check.schema, check.table,
                        check.range, check.count, check.digest[:12], count, digest[:12])
        self._publish_check(result.to_json())

    def _publish_check(self, result: dict[str, Any]) -> None:
        """Mirror a check result to ZooKeeper for ``trepctl check -status`` (best effort)."""
        try:
            self.control.record_check(result)
        except KazooException as exc:
            log.warning("%s: check result not mirrored to ZooKeeper: %s", self.name, exc)

    def _committed(self, block: Block, feed: ThlFeed) -> None:
        last = block.positions[-1]
        s = self.status
        s.appliedLastSeqno, s.appliedLastEventId = last.seqno, last.event_id
        s.appliedLastEpoch = last.epoch
        s.appliedLatency = round(max(0.0, time.time() - last.tstamp / 1e6), 3)
        self.metrics.applied(len(block.positions), last.seqno, s.appliedLatency)
        self.positions.mirror_position(f"consumers/{self.name}",
                                       ZkPosition(last.seqno, last.epoch, last.event_id,
                                                  last.fragno, last.last_frag))
        if not self.capabilities.owns_offsets:
            feed.commit(last.offset + 1)
        if block.skipped or self._skips_done:
            self._consume_skips(block.skipped)
        self._commits += 1
        self._publish(force=False)

    # -- parallel apply (channels: N) ---------------------------------------------------------

    def _stream_parallel(self, feed: ThlFeed, start: int | None) -> None:
        """Stream with channels: the channels apply, this thread routes and keeps books."""
        if self._shards is None:
            raise RuntimeError("parallel stream before the handshake")
        channels = self._channels = ChannelSet(
            self.name, self.appliers, self.limits, self._channel_start,
            lambda applier, event: self._apply(event, applier), self._check_lead,
            self.metrics.rows)
        channels.start()
        try:
            self._dispatch(feed, start, channels, self._shards)
        finally:
            channels.stop()
            try:
                self._absorb(channels, feed, failures=False)  # what committed still counts
            except Exception as exc:  # never hide why the session ended
                log.warning("%s: after the channels stopped: %s", self.name, exc)
            self._channels = None
            self._publish(force=False)

    def _dispatch(self, feed: ThlFeed, start: int | None, channels: ChannelSet,
                  shards: ShardMap) -> None:
        """Route every seqno to its channel, in THL order, until offline or a failure.

        A seqno goes to its shard's channel unless that channel applied it already (its
        stored position is at or after it: a restart from the lowest channel). A critical
        seqno waits for every channel to commit what it holds, is applied alone and
        committed before the next seqno is routed. A fresh group (no channel positions)
        applies its first seqno so, then moves every channel to it.
        """
        expected = start
        in_seqno: int | None = None
        next_frag = 0
        channel: int | None = None
        alone = False
        skips = set(self.desired().skip_seqnos)

        def tick() -> None:
            self._absorb(channels, feed)

        def waiting() -> None:
            # The stream waits for channels (a drain, a full queue): a blocked channel may
            # commit nothing for long, so show the channels as they are (throttled).
            tick()
            self._publish(force=False)

        while True:
            tick()
            if in_seqno is None:
                self._check_lead()
                passed = channels.passed
                if not self._wants_online() and (
                        passed is None or passed.seqno >= channels.highest):
                    # Tungsten's clean offline: every channel commits and moves its position
                    # to the last seqno passed, so they all stop at one seqno (the channel
                    # count may change now). After a crash, first read on to the highest
                    # channel position: below it some channels are ahead of others.
                    channels.drain(waiting, sync=True)
                    tick()
                    raise _GoOffline
            rec = feed.poll(0.2)
            if rec is None:
                if self._stale:
                    self._publish(force=False)
                if self._skips_done:
                    self._consume_skips([])
                continue
            if rec.event is None:
                raise TerminalError(f"{rec.error}; the consumer stops here", seqno=rec.seqno)
            event = rec.event
            if in_seqno is None:
                if not self._starts_seqno(event, rec, expected):
                    continue
                route = shards.route(event)
                channel = route.channel
                done = self._channel_start[channel] if channel is not None else None
                if channel is not None and done is not None and event.seqno <= done.seqno:
                    channel = None  # applied by its channel before the restart
                alone = channel is not None and (route.critical is not None
                                                 or not channels.positioned)
                if alone:
                    if route.critical is not None:
                        self._critical += 1
                        log.debug("%s: seqno %d is critical (%s): every channel commits, "
                                  "then it applies alone", self.name, event.seqno,
                                  route.critical)
                    channels.drain(waiting)
                in_seqno, next_frag = event.seqno, 0
            else:
                self._continues_seqno(event, rec, in_seqno, next_frag)
            if channel is not None:
                channels.put(channel, Fragment(
                    event, rec.offset, rec.size, skip=event.seqno in skips,
                    alone=alone or event.seqno <= self._careful_until), waiting)
            next_frag += 1
            if not event.last_frag:
                continue
            in_seqno, expected = None, event.seqno + 1
            channels.pass_seqno(Position.of(event, rec.offset))
            if alone:
                channels.drain(waiting, sync=not channels.positioned)
            elif channel is None:
                if event.seqno in skips:
                    self._consume_skips([event.seqno])  # nothing to apply there anyway
                if not channels.positioned:
                    channels.drain(waiting, sync=True)

    def _absorb(self, channels: ChannelSet, feed: ThlFeed, failures: bool = True) -> None:
        """The channels' commits since the last call: metrics and channel mirrors, then the
        group's position (the lowest channel's) in status, ZooKeeper and Kafka; a channel's
        failure is raised here (``failures``)."""
        reports = []
        while True:
            try:
                reports.append(channels.reports.get_nowait())
            except queue.Empty:
                break
        if reports:
            skipped: list[int] = []
            events = 0
            s = self.status
            for r in reports:
                pos = r.position
                self._channel_pos[r.channel] = pos
                self.metrics.channel_applied(r.channel, r.events, pos.seqno)
                self.positions.mirror_position(
                    self._channel_component(r.channel),
                    ZkPosition(pos.seqno, pos.epoch, pos.event_id, pos.fragno, pos.last_frag))
                skipped.extend(r.skipped)
                events += r.events
                if r.events:
                    s.appliedLatency = round(max(0.0, time.time() - pos.tstamp / 1e6), 3)
            self._commits += len(reports)
            low = channels.lowest()
            if low is not None and low.seqno > s.appliedLastSeqno:
                s.appliedLastSeqno, s.appliedLastEventId = low.seqno, low.event_id
                s.appliedLastEpoch = low.epoch
                self.positions.mirror_position(
                    f"consumers/{self.name}",
                    ZkPosition(low.seqno, low.epoch, low.event_id, low.fragno, low.last_frag))
                if not self.capabilities.owns_offsets and low.offset >= 0:
                    feed.commit(low.offset + 1)
            self.metrics.applied(events, s.appliedLastSeqno, s.appliedLatency)
            if skipped or self._skips_done:
                self._consume_skips(skipped)
            self._publish(force=False)
        if failures:
            channels.check()

    def _channel_component(self, channel: int) -> str:
        """Where a channel's position is mirrored in ZooKeeper."""
        return f"consumers/{self.name}/channels/{channel}"

    def _channel_status(self) -> dict[str, Any]:
        """What ``trepctl status -channels`` shows: each channel's seqno, state, shards."""
        channels = self._channels
        shards = self._shards.shards() if self._shards is not None else {}
        rows = []
        for c in range(self.cfg.channels):
            worker = channels.workers[c] if channels is not None else None
            pos = self._channel_pos[c]
            rows.append({
                "channel": c, "appliedLastSeqno": pos.seqno if pos is not None else -1,
                "appliedLastEventId": pos.event_id if pos is not None else "",
                "state": worker.state if worker is not None else "stopped",
                "appliedEvents": worker.events if worker is not None else 0,
                "queued": worker.queue.qsize() if worker is not None else 0,
                "shards": shards.get(c, [])})
        return {"channels": self.cfg.channels, "criticalEvents": self._critical,
                "channelStatus": rows}

    def _consume_skips(self, done: list[int]) -> None:
        self.status.skippedSeqnos = sorted({*self.status.skippedSeqnos, *done})[-100:]
        pending = self._skips_done = sorted({*self._skips_done, *done})

        def drop(d: Desired) -> None:
            d.skip_seqnos = [s for s in d.skip_seqnos if s not in pending]
        try:
            self.control.update_desired(drop)
            self._skips_done = []
        except KazooException as exc:
            # Skipped and committed already: clearing the request can wait for ZooKeeper.
            log.warning("%s: cannot clear skipped seqnos %s from the desired state yet: %s",
                        self.name, pending, exc)


def _clear_from(d: Desired) -> None:
    d.from_seqno = None


def _clear_reset(d: Desired) -> None:
    d.reset = False
