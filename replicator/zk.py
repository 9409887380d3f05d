"""ZooKeeper: position mirrors and the leader locks, under ``<root>/<service>``."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.recipe.lock import Lock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZkPosition:
    """A mirrored position: the last seqno completed, its epoch and event id."""

    seqno: int
    epoch: int
    event_id: str
    fragno: int = 0
    last_frag: bool = True


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
        if self.client.exists(path) is None:
            self.client.create(path, data, makepath=True)
        else:
            self.client.set(path, data)

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
            data, _ = self.client.get(self._position_path(component))
        except NoNodeError:
            return None
        return ZkPosition(**json.loads(data))


def connect(hosts: str, timeout: float) -> KazooClient:
    """A started kazoo client (raises kazoo's timeout error if ZooKeeper is unreachable)."""
    client = KazooClient(hosts=hosts, timeout=timeout)
    client.start(timeout=timeout)
    return client



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
        """Wait up to ``timeout`` seconds for the lock; True once it is held."""
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
        try:
            lock.release()
        except KazooException as exc:
            log.debug("releasing %s: %s", self.path, exc)

    def still_held(self) -> bool:
        """Whether ZooKeeper still lists this process first among the contenders."""
        if self.lost.is_set() or self._lock is None:
            return False
        try:
            contenders = self._lock.contenders()
        except KazooException as exc:
            log.warning("cannot read the lock %s: %s", self.path, exc)
            return False
        return bool(contenders) and contenders[0] == self.identity
