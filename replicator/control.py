"""The ZooKeeper control plane: trepctl writes a desired state, services publish their status.

Layout under ``<root>/<service>``::

    extractor/status             JSON status of the active extractor (persistent)
    extractor/alive              ephemeral: an extractor process holds the service
    consumers/<group>/desired    JSON Desired, written by trepctl
    consumers/<group>/status     JSON status, written by the consumer
    consumers/<group>/alive      ephemeral: a consumer process runs this group
    consumers/<group>/position   the position mirror (replicator.zk)
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as _BadVersion
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from replicator.state import State
from replicator.zk import zk_call

log = logging.getLogger(__name__)


@dataclass
class Desired:
    """What an operator wants from a consumer group."""

    #: ``ONLINE`` or ``OFFLINE``.
    state: str = "ONLINE"
    #: Seqnos to move past without applying (``online --skip-seqno``); consumed when passed.
    skip_seqnos: list[int] = field(default_factory=list)
    #: Next seqno to apply, ignoring the stored position (``online --from-seqno``); one-shot.
    from_seqno: int | None = None
    #: Clear the stored position when next OFFLINE (``reset``); one-shot.
    reset: bool = False
    #: Bumped by every trepctl command, so a repeated ``online`` is a new request.
    request: int = 0

    @classmethod
    def from_json(cls, data: bytes) -> Desired:
        raw = json.loads(data) if data else {}
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


def parse_seqno_ranges(text: str) -> list[int]:
    """``"5,7-9"`` -> ``[5, 7, 8, 9]`` (trepctl's ``--skip-seqno`` syntax)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"not a seqno or seqno range: {part!r}")
        lo, hi = int(low), int(high) if dash else int(low)
        if hi < lo:
            raise ValueError(f"empty seqno range: {part!r}")
        if hi - lo > 100_000:
            raise ValueError(f"seqno range too large to skip one by one: {part!r}")
        out.extend(range(lo, hi + 1))
    if not out:
        raise ValueError("no seqno given")
    return sorted(set(out))


class ComponentNodes:
    """The control znodes of one component (``extractor`` or ``consumers/<group>``)."""

    def __init__(self, client: KazooClient, root: str, service: str, component: str) -> None:
        self.client = client
        self.path = f"{root.rstrip('/')}/{service}/{component}"
        self._identity = ""
        self._listening = False
        self._session_lost = False

    # -- written by the service -------------------------------------------------------------

    def publish_status(self, status: dict[str, Any]) -> None:
        """Write the status (ConnectionLoss at once while ZooKeeper is away)."""
        _put(self.client, f"{self.path}/status", json.dumps(status).encode())

    def mark_alive(self, identity: str) -> None:
        """An ephemeral node that vanishes with this process's ZooKeeper session.

        A session that expires (a long pause, a partition) takes the node with it: it is
        created again as soon as kazoo has a new session, so trepctl still sees the process.
        """
        self._identity = identity
        self._create_alive()
        if not self._listening:
            self._listening = True
            self.client.add_listener(self._on_session_state)

    def _create_alive(self) -> None:
        path = f"{self.path}/alive"
        try:
            zk_call(self.client, self.client.create_async, path, self._identity.encode(),
                    ephemeral=True, makepath=True)
        except NodeExistsError:
            zk_call(self.client, self.client.set_async, path, self._identity.encode())

    def _on_session_state(self, state: str) -> None:
        # Listeners run on kazoo's connection thread and must not block it.
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.client.handler.spawn(self._recreate_alive)

    def _recreate_alive(self) -> None:
        try:
            self._create_alive()
            log.info("%s: new ZooKeeper session; marked alive again", self.path)
        except KazooException as exc:
            log.warning("%s: cannot mark alive after a new ZooKeeper session: %s",
                        self.path, exc)

    def watch_desired(self, on_change: Callable[[Desired], None]) -> None:
        """Call ``on_change`` now and whenever trepctl changes the desired state."""
        path = f"{self.path}/desired"
        zk_call(self.client, self.client.ensure_path_async, self.path)

        def changed(data: bytes | None, _stat: object) -> None:
            on_change(Desired.from_json(data or b""))

        self.client.DataWatch(path, changed)

    # -- written by trepctl (and by a consumer consuming one-shot requests) -----------------

    def desired(self) -> Desired:
        try:
            data, _ = zk_call(self.client, self.client.get_async, f"{self.path}/desired")
        except NoNodeError:
            return Desired()
        return Desired.from_json(data)

    def update_desired(self, change: Callable[[Desired], None]) -> Desired:
        """Read-modify-write of the desired state, retried on a concurrent write."""
        path = f"{self.path}/desired"
        zk_call(self.client, self.client.ensure_path_async, self.path)
        while True:
            try:
                data, stat = zk_call(self.client, self.client.get_async, path)
                version = stat.version
            except NoNodeError:
                data, version = b"", -1
            desired = Desired.from_json(data)
            change(desired)
            payload = json.dumps(asdict(desired)).encode()
            try:
                if version < 0:
                    zk_call(self.client, self.client.create_async, path, payload,
                            makepath=True)
                else:
                    zk_call(self.client, self.client.set_async, path, payload,
                            version=version)
                return desired
            except (NodeExistsError, _BadVersion):
                continue

    def record_check(self, result: dict[str, Any]) -> None:
        """Add one check result (a range of a table) to the component's ``check`` node,
        which holds the results of the latest check request."""
        path = f"{self.path}/check"
        while True:
            try:
                data, stat = zk_call(self.client, self.client.get_async, path)
                version = stat.version
            except NoNodeError:
                data, version = b"", -1
            current = json.loads(data) if data else {}
            if current.get("request") != result["request"]:
                current = {"request": result["request"], "results": {}}
            name = f"{result['schema']}.{result['table']}"
            current["results"].setdefault(name, {})[str(result["range"])] = result
            payload = json.dumps(current).encode()
            try:
                if version < 0:
                    zk_call(self.client, self.client.create_async, path, payload,
                            makepath=True)
                else:
                    zk_call(self.client, self.client.set_async, path, payload,
                            version=version)
                return
            except (NodeExistsError, _BadVersion):
                continue

    def checks(self) -> dict[str, Any] | None:
        """The results of the latest check request, as ``record_check`` keeps them."""
        try:
            data, _ = zk_call(self.client, self.client.get_async, f"{self.path}/check")
        except NoNodeError:
            return None
        found: dict[str, Any] = json.loads(data)
        return found

    def status(self) -> dict[str, Any] | None:
        try:
            data, _ = zk_call(self.client, self.client.get_async, f"{self.path}/status")
        except NoNodeError:
            return None
        status: dict[str, Any] = json.loads(data)
        return status

    def alive(self) -> bool:
        return zk_call(self.client, self.client.exists_async, f"{self.path}/alive") is not None


def component_status(nodes: ComponentNodes) -> dict[str, Any]:
    """A component's published status, OFFLINE with ``process: not running`` when no process
    holds it (an OFFLINE:ERROR stays, with its error, for an operator to read)."""
    status = dict(nodes.status() or {"state": State.OFFLINE.value})
    alive = nodes.alive()
    if not alive and status.get("state") != State.ERROR.value:
        status["state"] = State.OFFLINE.value
    status["process"] = "running" if alive else "not running"
    return status


def request(nodes: ComponentNodes, change: Callable[[Desired], None]) -> Desired:
    """An operator's request (``trepctl``, the console): ``change`` the desired state and
    count the request, which the component acknowledges in its status."""
    def apply(d: Desired) -> None:
        change(d)
        d.request += 1
    return nodes.update_desired(apply)


def consumer_groups(client: KazooClient, root: str, service: str) -> list[str]:
    """Consumer groups that ever published anything for ``service``."""
    try:
        return sorted(client.get_children(f"{root.rstrip('/')}/{service}/consumers"))
    except NoNodeError:
        return []


def services(client: KazooClient, root: str) -> list[str]:
    """Every service known under ``root``."""
    try:
        return sorted(client.get_children(root.rstrip("/") or "/"))
    except NoNodeError:
        return []


def _put(client: KazooClient, path: str, data: bytes) -> None:
    try:
        zk_call(client, client.set_async, path, data)
    except NoNodeError:
        try:
            zk_call(client, client.create_async, path, data, makepath=True)
        except NodeExistsError:
            zk_call(client, client.set_async, path, data)


class Wakeup:
    """A flag a watcher thread sets and the service loop waits on."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        fired = self._event.wait(timeout)
        self._event.clear()
        return fired



