"""trepctl's seqno lists, the desired-state document, liveness across ZooKeeper sessions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError

from replicator.control import ComponentNodes, Desired, parse_seqno_ranges
from replicator.zk import flag_session_loss, zk_call

from .fake_zk import Done, answer


def test_skip_seqno_lists_and_ranges() -> None:
    assert parse_seqno_ranges("5") == [5]
    assert parse_seqno_ranges("7-9,5, 8") == [5, 7, 8, 9]


@pytest.mark.parametrize("bad", ["", "x", "5-", "9-7", "-3", "1-200000"])
def test_bad_seqno_lists_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_seqno_ranges(bad)


def test_desired_ignores_unknown_fields_and_defaults_to_online() -> None:
    assert Desired.from_json(b"") == Desired()
    d = Desired.from_json(b'{"state": "OFFLINE", "request": 3, "future": 1}')
    assert (d.state, d.request, d.skip_seqnos) == ("OFFLINE", 3, [])


class _SessionClient:
    """Just enough of KazooClient: ephemeral nodes that a session loss takes away."""

    def spawn(self, fn: Callable[[], None]) -> None:
        fn()

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.listeners: list[Callable[[str], None]] = []
        self.handler = self
        self.connected = True

    def create(self, path: str, data: bytes, ephemeral: bool = False,
               makepath: bool = False) -> None:
        if path in self.nodes:
            raise NodeExistsError
        self.nodes[path] = data

    def set(self, path: str, data: bytes) -> None:
        self.nodes[path] = data

    def create_async(self, path: str, data: bytes, ephemeral: bool = False,
                     makepath: bool = False) -> Done:
        return answer(self.create, path, data, ephemeral, makepath)

    def set_async(self, path: str, data: bytes) -> Done:
        return answer(self.set, path, data)

    def expire(self) -> None:
        self.nodes.clear()
        for state in (KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED):
            for listener in self.listeners:
                listener(state)


def test_alive_node_comes_back_with_a_new_session() -> None:
    client = _SessionClient()
    nodes = ComponentNodes(client, "/t", "svc", "consumers/g")
    nodes.mark_alive("host:1")
    nodes.mark_alive("host:1")  # again (a new leadership): still one listener
    assert client.nodes == {"/t/svc/consumers/g/alive": b"host:1"}
    assert len(client.listeners) == 1
    client.expire()
    assert client.nodes == {"/t/svc/consumers/g/alive": b"host:1"}


def test_session_loss_is_flagged_until_cleared() -> None:
    client = _SessionClient()
    lost = flag_session_loss(client)
    for listener in client.listeners:
        listener(KazooState.SUSPENDED)
    assert not lost.is_set()  # a suspended session may still come back whole
    client.expire()
    assert lost.is_set()


class _Slow:
    """A request kazoo queued while it reconnects: no answer comes."""

    def get(self, block: bool = True, timeout: float | None = None) -> None:
        raise KazooTimeoutError("no answer")


def test_zookeeper_requests_fail_fast_instead_of_waiting() -> None:
    client = _SessionClient()
    client.connected = False
    nodes = ComponentNodes(client, "/t", "svc", "consumers/g")
    with pytest.raises(ConnectionLoss, match="no connection"):
        nodes.publish_status({"state": "ONLINE"})
    client.connected = True
    with pytest.raises(ConnectionLoss, match="no answer from ZooKeeper"):
        zk_call(client, lambda: _Slow())
