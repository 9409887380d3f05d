"""ZooKeeper: position mirrors and the leader locks, under ``<root>/<service>``."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException, LockTimeout, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry

from replicator.held_back import HeldBack

log = logging.getLogger(__name__)


#: Longest a request waits for ZooKeeper's answer before it counts as a lost connection.
REQUEST_TIMEOUT_S = 5.0


def zk_call(client: KazooClient, request: Callable[..., IAsyncResult], *args: Any,
            **kwargs: Any) -> Any:
    """One ZooKeeper request that fails fast (ConnectionLoss) instead of waiting.

    kazoo queues a request made while it reconnects, and its synchronous calls then wait
    for ZooKeeper to come back, however long that takes: a replicator thread must never
    hang on its control plane. ``request`` is one of the client's ``*_async`` methods.
    """
    if not client.connected:
        raise ConnectionLoss("no connection to ZooKeeper")
    try:
        return request(*args, **kwargs).get(timeout=REQUEST_TIMEOUT_S)
    except KazooTimeoutError as exc:
        raise ConnectionLoss(f"no answer from ZooKeeper within {REQUEST_TIMEOUT_S} s") from exc


@dataclass(frozen=True)
class ZkPosition:
    """A mirrored position: the last seqno completed, its epoch and event id."""

    seqno: int
    epoch: int
    event_id: str
    fragno: int = 0
    last_frag: bool = True
    #: The extractor's: XA transactions prepared and not decided at this position (xid ->
    #: EVENTID where the prepare starts), as the THL event's ``xa_open`` metadata.
    xa_open: dict[str, str] = field(default_factory=dict)


class ServiceNodes:
    """The znodes of one service."""

    def __init__(self, client: KazooClient, root: str, service: str) -> None:
        self.client = client
        self.base = f"{root.rstrip('/')}/{service}"
        self._mirrored: set[str] = set()

    def leadership(self, component: str, identity: str) -> Leadership:
        """The lock that keeps one process active per component (``extractor`` or
        ``consumers/<group>``)."""
        return Leadership(self.client, f"{self.base}/{component}/lock", identity)

    def _position_path(self, component: str) -> str:
        return f"{self.base}/{component}/position"

    def write_position(self, component: str, pos: ZkPosition) -> None:
        """Mirror a position (``extractor`` or ``consumers/<group>``)."""
        path = self._position_path(component)
        data = json.dumps(asdict(pos)).encode()
        if zk_call(self.client, self.client.exists_async, path) is None:
            zk_call(self.client, self.client.create_async, path, data, makepath=True)
        else:
            zk_call(self.client, self.client.set_async, path, data)

    def mirror_position(self, component: str, pos: ZkPosition) -> None:
        """Mirror a position without waiting for ZooKeeper's answer.

        For the hot path (after every target or Kafka commit): the position of record lives
        in the target (or the THL), the mirror is for operators, so a round trip per block
        is not worth its latency, and ZooKeeper being away must not stop replication. One
        session keeps its requests in order, so the last mirror written wins.
        """
        path = self._position_path(component)
        data = json.dumps(asdict(pos)).encode()
        try:
            if path not in self._mirrored:
                self.write_position(component, pos)
                self._mirrored.add(path)
                return
            self.client.set_async(path, data).rawlink(self._mirrored_or_not(path))
        except KazooException as exc:
            log.warning("cannot mirror the position to %s: %s", path, exc)

    def _mirrored_or_not(self, path: str) -> Callable[[IAsyncResult], None]:
        def done(result: IAsyncResult) -> None:
            if result.successful():
                return
            if isinstance(result.exception, NoNodeError):
                self._mirrored.discard(path)  # reset removed it: create it next time
            log.warning("cannot mirror the position to %s: %s", path, result.exception)
        return done

    def read_position(self, component: str) -> ZkPosition | None:
        try:
            data, _ = zk_call(self.client, self.client.get_async,
                              self._position_path(component))
        except NoNodeError:
            return None
        return ZkPosition(**json.loads(data))


#: While a component's positions follow each other, its ZooKeeper mirror is written at most
#: this often: each asynchronous write cost the group about 0.7 ms of CPU in kazoo's
#: connection thread (a selector made and closed per wake-up), one per block, about a
#: tenth of a MariaDB group's CPU on bench-compare's workload. The mirror is for operators
#: and THL retention (which then purges a little less); the position of record is the
#: target's.
MIRROR_EVERY_S = 1.0


class PositionMirror(HeldBack[ZkPosition]):
    """One component's position mirror, written at most once per ``every`` seconds while
    positions follow each other; ``flush`` writes the one held back (when the component is
    quiet, and when it stops)."""

    def __init__(self, nodes: ServiceNodes, component: str, every: float = MIRROR_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(partial(nodes.mirror_position, component), every, clock)

    mirror = HeldBack.offer


def connect(hosts: str, timeout: float) -> KazooClient:
    """A started kazoo client (raises kazoo's timeout error if ZooKeeper is unreachable).

    It reconnects at most 2 s apart: kazoo's default backoff grows to an hour, so after an
    outage longer than the session timeout the client would come back too late and lose a
    session (locks, ephemeral nodes) that ZooKeeper still kept for it.
    """
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0)
    client = KazooClient(hosts=hosts, timeout=timeout, connection_retry=retry)
    client.start(timeout=timeout)
    return client



class ZkHealth:
    """Whether a client is connected to ZooKeeper, and how often it lost the connection.

    A lost connection is not a lost session: ZooKeeper keeps the session (and its locks and
    ephemeral nodes) for its timeout, so a process rides out a short outage and only stops
    leading when the session itself expires.
    """

    def __init__(self, client: KazooClient) -> None:
        self.connected = client.connected
        self.disconnects = 0
        self._since: float | None = None if self.connected else time.monotonic()
        self._seconds = 0.0
        self._closing = False
        self._lock = threading.Lock()
        client.add_listener(self._changed)

    def closing(self) -> None:
        """The client is being stopped on purpose: its end is not an outage."""
        self._closing = True

    def _changed(self, state: str) -> None:
        if self._closing:
            return
        with self._lock:
            if state == KazooState.CONNECTED:
                if self._since is not None:
                    self._seconds += time.monotonic() - self._since
                    self._since = None
                    log.info("ZooKeeper connection back")
                self.connected = True
            elif self.connected:
                self.connected = False
                self.disconnects += 1
                self._since = time.monotonic()
                log.warning("ZooKeeper connection %s; replication goes on, mirrors and "
                            "status wait for it", state)

    def seconds_disconnected(self) -> float:
        """Total time without a ZooKeeper connection since this object was made."""
        with self._lock:
            current = time.monotonic() - self._since if self._since is not None else 0.0
            return self._seconds + current


def flag_session_loss(client: KazooClient) -> threading.Event:
    """An event set whenever ZooKeeper expires the client's session.

    kazoo reconnects with a new session by itself, but whatever the old one held is gone:
    ephemeral nodes, the leader lock. Whoever relied on them must notice and take them again.
    """
    lost = threading.Event()

    def listener(state: str) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(listener)
    return lost


class Leadership:
    """One component's ZooKeeper lock, and whether this process still holds it.

    The lock lives as long as the ZooKeeper session that took it. ``lost`` is set when that
    session expires; the holder must then stop at its next transaction boundary and take
    the lock again before going on (whoever took it meanwhile may have moved on).
    """

    def __init__(self, client: KazooClient, path: str, identity: str) -> None:
        self.client = client
        self.path = path
        self.identity = identity
        self.lost = flag_session_loss(client)
        self._lock: Lock | None = None

    def acquire(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the lock; True once it is held.

        ConnectionLoss at once while ZooKeeper is away (nobody can take the lock then).
        """
        if not self.client.connected:
            raise ConnectionLoss("no connection to ZooKeeper")
        if self._lock is None:
            # A new lock node, in the current session: forget losses of earlier ones.
            self.lost.clear()
            self._lock = self.client.Lock(self.path, self.identity)
        try:
            return bool(self._lock.acquire(timeout=timeout))
        except LockTimeout:
            return False

    def release(self) -> None:
        """Give the lock up (a lock whose session expired is already gone)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if not self.client.connected:
            # kazoo would wait here for ZooKeeper to come back: release in the background
            # instead (a session that expired meanwhile has taken the node already).
            log.info("releasing %s once ZooKeeper answers", self.path)
            threading.Thread(target=self._release_later, args=(lock,), daemon=True,
                             name=f"release {self.path}").start()
            return
        try:
            lock.release()
        except KazooException as exc:
            log.debug("releasing %s: %s", self.path, exc)

    def _release_later(self, lock: Lock) -> None:
        try:
            lock.release()
        except KazooException as exc:
            log.debug("releasing %s: %s", self.path, exc)

    def still_held(self) -> bool:
        """Whether ZooKeeper still lists this process first among the contenders."""
        if self.lost.is_set() or self._lock is None:
            return False
        if not self.client.connected:
            # Unknown: a writer that cannot confirm its lock stops writing and takes the
            # lock again once ZooKeeper answers.
            return False
        try:
            contenders = self._lock.contenders()
        except KazooException as exc:
            log.warning("cannot read the lock %s: %s", self.path, exc)
            return False
        return bool(contenders) and contenders[0] == self.identity
