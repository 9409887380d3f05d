"""What a component (the extractor, a consumer group) shows in ZooKeeper: that its process is
alive, and its status for ``trepctl status``, with the states of ``replicator.state``.

Showing is best effort: ZooKeeper may be away while the component goes on working, so a
status that could not be written is marked stale and sent again with the next one (or when
the component is idle). Unforced publishes are throttled to one every half second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import KazooException

from replicator.control import ComponentNodes
from replicator.state import State, Status
from replicator.zk import ZkHealth

#: Unforced publishes closer together than this wait for the next one (or for idle time).
THROTTLE_S = 0.5


@dataclass(eq=False)
class StatusPublisher:
    """Publishes one component's ``status`` to its control znodes.

    ``name`` starts every log line (``logger`` is the component's). ``nodes`` may come later
    (``attach``): until then nothing is written. ``extra_status``: more fields for every
    status (the channels', with ``channels: N``); ``on_state``: called on every state set,
    before it is published (a consumer group counts and logs its states).
    """

    name: str
    status: Status
    logger: logging.Logger
    nodes: ComponentNodes | None = None
    zk_health: ZkHealth | None = None
    extra_status: Callable[[], dict[str, Any]] | None = None
    on_state: Callable[[State], None] | None = None
    #: When the status was last published (monotonic seconds).
    last_publish: float = field(default=0.0, init=False)
    #: The published status is behind the component's: publish again when idle.
    stale: bool = field(default=False, init=False)

    def attach(self, nodes: ComponentNodes, zk_health: ZkHealth | None) -> None:
        """The control znodes, once the component has a ZooKeeper session."""
        self.nodes = nodes
        self.zk_health = zk_health

    def mark_alive(self, identity: str) -> None:
        """The ephemeral ``alive`` node (best effort: it is made again with a new session)."""
        if self.nodes is None:
            return
        try:
            self.nodes.mark_alive(identity)
        except KazooException as exc:
            self.logger.warning("%s: cannot mark this process alive yet: %s", self.name, exc)

    def publish(self, force: bool = True) -> None:
        """Publish the status; unforced publishes are throttled and caught up when idle."""
        now = time.monotonic()
        if not force and now - self.last_publish < THROTTLE_S:
            self.stale = True
            return
        self.last_publish, self.stale = now, False
        if self.nodes is None:
            return
        if self.zk_health is not None:
            self.status.zookeeperDisconnects = self.zk_health.disconnects
        status = self.status.to_json()
        if self.extra_status is not None:
            status.update(self.extra_status())
        try:
            self.nodes.publish_status(status)
        except Exception as exc:  # a status is never worth stopping for; ZK may be down
            self.stale = True  # sent again once ZooKeeper answers
            self.logger.warning("%s: cannot publish status: %s", self.name, exc)

    def set_state(self, state: State, force: bool = True) -> None:
        """Move to ``state`` and show it."""
        self.status.set_state(state)
        if self.on_state is not None:
            self.on_state(state)
        self.publish(force)

    def retrying(self, exc: BaseException | None) -> None:
        """A transient failure, retried: GOING-ONLINE:SYNCHRONIZING, with what failed."""
        self.status.pendingExceptionMessage = f"retrying: {exc}"
        self.set_state(State.SYNCHRONIZING)

    def failed(self, error: str, code: str, seqno: int, message: str,
               event_id: str | None = None) -> None:
        """A failure no retry mends: OFFLINE:ERROR, with the pending error an operator reads
        (``event_id`` None: the component does not know the event; the field stays)."""
        s = self.status
        s.pendingError = error
        s.pendingErrorCode = code
        s.pendingErrorSeqno = seqno
        if event_id is not None:
            s.pendingErrorEventId = event_id
        s.pendingExceptionMessage = message
        self.set_state(State.ERROR)
