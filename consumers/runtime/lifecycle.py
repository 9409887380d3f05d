"""The life of a consumer group in one process: standby until it holds the group's lock,
then the states the operator asks for (OFFLINE, ONLINE), with sessions retried with
backoff through transient failures and OFFLINE:ERROR at the seqno of any other.

The state machine (see ``consumers.runtime`` for the whole runtime):

- Without the group's ZooKeeper lock the process waits as standby (warming its appliers
  up once) and publishes nothing; with it, it serves the desired state.
- ONLINE runs sessions (``sessions``) under a retry policy: exponential backoff from
  0.5 s to 10 s, for at most ``retry_limit_s`` (0: forever) per outage; a session that
  committed something before it failed starts a fresh count.
- OFFLINE:ERROR keeps the error until a newer request (``online``, ``offline``).
- ``reset`` clears the stored position (target, mirrors, the Kafka group's offsets).

The standby loop, the retry policy and the status are the extractor's too
(``replicator.lifecycle``, ``replicator.status_publisher``); what is the group's alone
(desired states, warm-up, errors at a seqno) is here.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kazoo.exceptions import KazooException

from consumers.applier import Applier, WarmsUp
from consumers.config import GroupConfig
from consumers.errors import ConsumerError, PositionConflict, TerminalError, TransientError
from consumers.feed import ThlFeed, forget_group_offsets
from consumers.metrics import ConsumerMetrics
from consumers.provisioning import PendingProvisioning
from consumers.runtime.checks import RangeChecks
from consumers.runtime.control import GoOffline, GroupControl, LeadLost
from consumers.runtime.group import ChannelBook, Group
from consumers.runtime.preparation import Preparation
from consumers.runtime.sessions import Progressed, Sessions
from replicator.config import ConfigError
from replicator.control import ComponentNodes, Desired
from replicator.filters import ReplicateFilter, build_chain
from replicator.lifecycle import LockLost, backoff, lead_until_stopped
from replicator.requests import request_path_under
from replicator.state import State, Status
from replicator.zk import ServiceNodes, ZkHealth, ZkPosition

log = logging.getLogger(__package__)


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
        replicate = ReplicateFilter(cfg.filters.replicate, cfg.filters.ignore)
        chain = build_chain(cfg.filters.chain)
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
        #: The standby warm-up ran (once per process).
        self._warmed = False
        self._channel_book = ChannelBook(name, cfg.channels)
        self._ctl = GroupControl(
            name, cfg.auto_online, control, self.status, self.metrics, self.lead, zk_health,
            self._extra_status)
        pending = (PendingProvisioning(positions.client, request_path_under(positions.base))
                   if isinstance(positions, ServiceNodes) else None)
        prep = Preparation(replicate, chain, feed.tracking_schema, applier,
                           RangeChecks(name, replicate, self.capabilities, control), pending,
                           cfg.schema_changes, cfg.foreign_keys, self.metrics)
        self._group = Group(name, self.appliers, self.limits, self._ctl, prep,
                            self.metrics, positions, self._channel_book)
        self._sessions = Sessions(self._group, feed.topic,
                                  lambda: self._feed_factory(self.feed_settings))

    def _extra_status(self) -> dict[str, Any]:
        """Fields of the published status beyond ``Status``: the channels' (parallel
        apply) and the triggers found on target tables."""
        extra: dict[str, Any] = {"targetTriggers": self.metrics.trigger_notes()}
        if self._parallel:
            extra.update(self._channel_book.status())
        return extra

    def stop(self) -> None:
        """Stop at the next transaction boundary."""
        self._ctl.stop()

    def desired(self) -> Desired:
        return self._ctl.desired()

    # -- main loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Serve desired states until ``stop()``, while this process holds the group's lock.

        Without the lock it waits as standby and publishes nothing; losing the lock (the
        ZooKeeper session expired) abandons the open block and goes back to waiting. Nothing
        but ``stop()`` ends this loop: ZooKeeper being away is waited out, and an unexpected
        failure puts the group in OFFLINE:ERROR, where trepctl shows it.
        """
        try:
            self._ctl.until_stopped(lambda: self.control.watch_desired(self._ctl.on_desired),
                                    "watching the desired state")
            # _lead returns only once stopped: losing the lock is the only way back here.
            lead_until_stopped(self.lead, self._ctl.stopped, self._acquire, self._lead,
                               self._lost)
        finally:
            for applier in self.appliers:
                applier.close()

    def _acquire(self) -> bool:
        """Wait as standby until the group's lock is ours (False: stopped while waiting)."""
        standby_logged = False
        while not self._ctl.stopped():
            if self._ctl.until_stopped(lambda: self.lead.acquire(timeout=1.0),
                                       "taking the group's lock"):
                return True
            if not standby_logged and not self._ctl.stopped():
                log.info("%s: standby: another process applies this group; waiting "
                         "for its lock", self.name)
                standby_logged = True
                self._warm_up()
        return False

    def _lost(self, exc: LockLost) -> None:
        self.metrics.error("lock_lost")
        log.warning("%s: %s; waiting for the group's lock again", self.name, exc)

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

    def _lead(self) -> None:
        self._ctl.publisher.mark_alive(self.status.host)
        # A new lead starts clean, as a restarted process would: an error from an earlier
        # lead may have been dealt with by whoever held the lock meanwhile.
        self._ctl.error_request = None
        self.status.clear_error()
        self._ctl.set_state(State.OFFLINE)
        while not self._ctl.stopped():
            self._ctl.check_lead()
            desired = self.desired()
            if desired.reset and self.status.state != State.ONLINE.value:
                self._reset()
                continue
            if not self._ctl.wants_online():
                if self._ctl.error_request is not None and \
                        self._ctl.desired().request != self._ctl.error_request:
                    self._ctl.error_request = None  # e.g. `offline` clears the error
                    self.status.clear_error()
                    self._ctl.set_state(State.OFFLINE)
                self._ctl.wakeup.wait(1.0)
                if self._ctl.stale:
                    self._ctl.publish(force=False)
                continue
            self._ctl.error_request = None
            self.status.clear_error()
            self._go_online()
        if self.status.state != State.ERROR.value:
            self._ctl.set_state(State.OFFLINE)

    def _go_online(self) -> None:
        request = self._ctl.desired().request
        try:
            while True:
                # Backoff and retry_limit_s count one outage: a session that committed
                # something before it failed starts a fresh count.
                retrying = backoff(self.cfg.retry_limit_s, _transient, self._sleep,
                                   self._log_failure)
                try:
                    retrying(self._sessions.run)
                except Progressed as progressed:
                    self._log_failure(progressed.cause, 1)
                    self._sleep(0.5)
        except GoOffline:
            self._ctl.set_state(State.OFFLINE)
        except PositionConflict as exc:
            if not self.lead.still_held():
                raise LeadLost(str(exc)) from exc
            self._fail(exc, request)
        except ConsumerError as exc:
            self._fail(exc, request)
        except (LeadLost, KeyboardInterrupt):
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
            self._ctl.check_lead()
            if not self._ctl.wants_online():
                raise GoOffline
            self._ctl.wakeup.wait(min(0.5, deadline - time.monotonic()))
        if not self._ctl.wants_online():
            raise GoOffline

    def _log_failure(self, exc: BaseException | None, attempt: int) -> None:
        self.metrics.error("transient")
        log.warning("%s: %s; retrying (attempt %d)", self.name, exc, attempt)
        self._ctl.publisher.retrying(exc)

    def _fail(self, exc: ConsumerError, request: int, kind: str | None = None) -> None:
        self.metrics.error(kind or exc.code.lower())
        log.error("%s: OFFLINE:ERROR at seqno %d: %s", self.name, exc.seqno, exc)
        self._ctl.error_request = request
        self._ctl.publisher.failed(f"Event application failed: seqno={exc.seqno}", exc.code,
                                   exc.seqno, str(exc), event_id=exc.event_id or "NONE")

    def _reset(self) -> None:
        log.info("%s: reset: clearing the stored position", self.name)
        try:
            self.applier.connect()
            self.applier.reset()
            self._ctl.zk(lambda: self.positions.write_position(
                f"consumers/{self.name}", ZkPosition(-1, -1, "")), "clearing the mirror")
            for c in range(self.cfg.channels if self._parallel else 0):
                self._ctl.zk(partial(self.positions.write_position,
                                     self._channel_book.component(c), ZkPosition(-1, -1, "")),
                             "clearing the channel mirrors")
            self._channel_book.start = self._channel_book.now = [None] * self.cfg.channels
        except ConsumerError as exc:
            self._fail(exc, self._ctl.desired().request)
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
            self._ctl.on_desired(self.control.desired())
        except KazooException as exc:
            # The position is cleared; a reset request left in place clears it again.
            log.warning("%s: reset done, but the request stays until ZooKeeper answers: %s",
                        self.name, exc)
            self._ctl.wakeup.wait(1.0)
            return
        self._ctl.set_state(State.OFFLINE)


def _transient(exc: BaseException) -> bool:
    """What the retry policy retries: target, broker or ZooKeeper away."""
    return isinstance(exc, TransientError)


def _clear_reset(d: Desired) -> None:
    d.reset = False
