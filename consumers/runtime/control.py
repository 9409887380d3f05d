"""A consumer group's side of the control plane: the state the operator wants, the status
the group shows, and the lock that lets this process apply.

Every part of the runtime asks here whether it may go on (``wants_online``, ``check_lead``
on seqno boundaries) and waits here (``wait_for``), so an ``offline`` request, a ``stop()``
or a lost lock is seen wherever the group happens to be. ZooKeeper calls the group cannot
go on without fail transiently (``zk``); status publishing is best effort and throttled
(``replicator.status_publisher``, as the extractor's).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.exceptions import KazooException

from consumers.errors import TransientError
from consumers.metrics import ConsumerMetrics
from replicator.control import ComponentNodes, Desired, Wakeup
from replicator.lifecycle import LockLost, check_lock
from replicator.state import State, Status
from replicator.status_publisher import StatusPublisher
from replicator.zk import Leadership, ZkHealth

log = logging.getLogger(__package__)

_T = TypeVar("_T")


class GoOffline(Exception):
    """The operator asked for OFFLINE (or the process is stopping) on a seqno boundary."""


class LeadLost(LockLost):
    """This process no longer holds the group's lock: another one may be applying."""


class GroupControl:
    """What the operator wants of one group, what the group shows, and whether it may apply.

    ``extra_status``: more fields for every published status (the channels', with
    ``channels: N``).
    """

    def __init__(self, name: str, auto_online: bool, nodes: ComponentNodes, status: Status,
                 metrics: ConsumerMetrics, lead: Leadership, zk_health: ZkHealth | None,
                 extra_status: Callable[[], dict[str, Any]] | None = None) -> None:
        self.name = name
        self._auto_online = auto_online
        #: The group's control znodes (desired state, status, check results).
        self.nodes = nodes
        self.status = status
        self.metrics = metrics
        self.lead = lead
        #: The group's status in ZooKeeper, as the extractor publishes its own.
        self.publisher = StatusPublisher(name, status, log, nodes, zk_health, extra_status,
                                         on_state=self._on_state)
        self._stop = threading.Event()
        self.wakeup = Wakeup()
        self._desired = Desired(state="ONLINE" if auto_online else "OFFLINE")
        self._desired_lock = threading.Lock()
        #: The request id an error happened under: stay in ERROR until a newer request.
        self.error_request: int | None = None
        #: Skipped seqnos passed and committed, still to be cleared from the desired state.
        self.skips_done: list[int] = []

    # -- what the operator wants -------------------------------------------------------------

    def stop(self) -> None:
        """Stop at the next transaction boundary."""
        self._stop.set()
        self.wakeup.set()

    def stopped(self) -> bool:
        """``stop()`` was called: the process is stopping."""
        return self._stop.is_set()

    def on_desired(self, desired: Desired) -> None:
        with self._desired_lock:
            if desired.request == 0 and not desired.skip_seqnos and desired.from_seqno is None \
                    and not desired.reset and not self._auto_online:
                desired.state = "OFFLINE"  # nobody ever asked: honour auto_online=False
            self._desired = desired
        self.wakeup.set()

    def desired(self) -> Desired:
        # No lock: ``on_desired`` makes the new request whole before it replaces the
        # reference, and a reference is read at once (asked on every seqno boundary).
        return self._desired

    def wants_online(self) -> bool:
        d = self.desired()
        return d.state == "ONLINE" and not self._stop.is_set() and \
            (self.error_request is None or d.request != self.error_request)

    def check_lead(self) -> None:
        """On seqno boundaries: stop applying once the group's lock has gone."""
        check_lock(self.lead, LeadLost, "the group's lock")

    def wait_for(self, probe: Callable[[], int | None]) -> int:
        while True:
            value = probe()
            if value is not None:
                return value
            self.check_lead()
            if not self.wants_online():
                raise GoOffline
            self.wakeup.wait(0.5)

    def consume_skips(self, done: list[int]) -> None:
        self.status.skippedSeqnos = sorted({*self.status.skippedSeqnos, *done})[-100:]
        pending = self.skips_done = sorted({*self.skips_done, *done})

        def drop(d: Desired) -> None:
            d.skip_seqnos = [s for s in d.skip_seqnos if s not in pending]
        try:
            self.nodes.update_desired(drop)
            self.skips_done = []
        except KazooException as exc:
            # Skipped and committed already: clearing the request can wait for ZooKeeper.
            log.warning("%s: cannot clear skipped seqnos %s from the desired state yet: %s",
                        self.name, pending, exc)

    # -- ZooKeeper -----------------------------------------------------------------------------

    def zk(self, call: Callable[[], _T], doing: str) -> _T:
        """A ZooKeeper call the group cannot go on without: its failure is transient."""
        try:
            return call()
        except KazooException as exc:
            raise TransientError(f"ZooKeeper: {doing}: {type(exc).__name__} {exc}") from exc

    def until_stopped(self, call: Callable[[], _T], doing: str) -> _T | None:
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

    # -- what the group shows ------------------------------------------------------------------

    @property
    def stale(self) -> bool:
        """The published status is behind the group's: publish again when idle."""
        return self.publisher.stale

    def publish(self, force: bool = True) -> None:
        """Publish the status; unforced publishes are throttled and caught up when idle."""
        self.publisher.publish(force)

    def set_state(self, state: State) -> None:
        self.publisher.set_state(state)

    def _on_state(self, state: State) -> None:
        self.metrics.state(state)
        log.info("%s: %s", self.name, state.value)
