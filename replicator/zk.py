"""ZooKeeper: position mirrors and the extractor's leader lock, under ``<root>/<service>``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.lock import Lock


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

    def extractor_lock(self, identifier: str) -> Lock:
        """The lock that keeps one extractor active per service."""
        return self.client.Lock(f"{self.base}/extractor/lock", identifier)

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
