"""The position mirror: synchronous once (creates the node), then fire-and-forget; a busy
component's mirror at most once per period (``PositionMirror``)."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss, NoNodeError

from replicator.zk import PositionMirror, ServiceNodes, ZkPosition

from .fake_zk import Done, answer


class _Client:
    """Records calls; answers set_async with the next queued outcome."""

    connected = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.outcomes: list[Exception | None] = []

    def exists(self, path: str) -> object:
        self.calls.append(("exists", path))
        return None

    def exists_async(self, path: str) -> Done:
        return answer(self.exists, path)

    def create_async(self, path: str, data: bytes, makepath: bool = False) -> Done:
        self.calls.append(("create", path))
        return Done()

    def set_async(self, path: str, data: bytes) -> Done:
        self.calls.append(("set_async", path))
        outcome = self.outcomes.pop(0) if self.outcomes else None
        return Done(exception=outcome)


def test_first_mirror_creates_the_node_then_sets_without_waiting() -> None:
    client = _Client()
    nodes = ServiceNodes(client, "/tungsten", "svc")
    for seqno in range(3):
        nodes.mirror_position("consumers/g", ZkPosition(seqno, 0, "f:4"))
    path = "/tungsten/svc/consumers/g/position"
    assert client.calls == [("exists", path), ("create", path), ("set_async", path),
                            ("set_async", path)]


def test_a_removed_node_is_created_again_and_other_failures_are_only_logged() -> None:
    client = _Client()
    nodes = ServiceNodes(client, "/tungsten", "svc")
    nodes.mirror_position("extractor", ZkPosition(1, 0, "f:4"))
    client.outcomes = [ConnectionLoss(), NoNodeError()]
    nodes.mirror_position("extractor", ZkPosition(2, 0, "f:5"))  # lost: logged
    nodes.mirror_position("extractor", ZkPosition(3, 0, "f:6"))  # node gone
    nodes.mirror_position("extractor", ZkPosition(4, 0, "f:7"))  # created again
    assert [c for c, _ in client.calls] == ["exists", "create", "set_async", "set_async",
                                            "exists", "create"]


def test_zookeeper_away_on_the_first_mirror_is_logged_and_tried_again() -> None:
    client = _Client()
    calls = 0

    def exists(path: str) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionLoss()
        return None

    client.exists = exists  # type: ignore[method-assign]
    nodes = ServiceNodes(client, "/tungsten", "svc")
    nodes.mirror_position("extractor", ZkPosition(1, 0, "f:4"))
    nodes.mirror_position("extractor", ZkPosition(2, 0, "f:5"))
    assert [c for c, _ in client.calls] == ["create"]


class _Nodes:
    """Records the positions a ``PositionMirror`` writes."""

    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []

    def mirror_position(self, component: str, pos: ZkPosition) -> None:
        self.written.append((component, pos.seqno))


def test_a_busy_component_is_mirrored_at_most_once_per_period_and_flushed_when_quiet() -> None:
    clock = [100.0]
    nodes = _Nodes()
    mirror = PositionMirror(nodes, "consumers/g", every=1.0,  # type: ignore[arg-type]
                            clock=lambda: clock[0])
    mirror.mirror(ZkPosition(1, 0, "f:1"))  # the first goes at once
    for seqno in (2, 3, 4):
        clock[0] += 0.3
        mirror.mirror(ZkPosition(seqno, 0, f"f:{seqno}"))
    assert nodes.written == [("consumers/g", 1)]
    clock[0] += 0.2  # 1.1 s after the first: this one goes
    mirror.mirror(ZkPosition(5, 0, "f:5"))
    mirror.mirror(ZkPosition(6, 0, "f:6"))  # held back
    assert nodes.written == [("consumers/g", 1), ("consumers/g", 5)]
    mirror.flush()  # quiet or stopping: the last one goes, once
    mirror.flush()
    assert nodes.written == [("consumers/g", 1), ("consumers/g", 5), ("consumers/g", 6)]
