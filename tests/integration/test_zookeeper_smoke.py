"""ZooKeeper: nodes written, watched and changed through kazoo."""

from __future__ import annotations

import threading
import uuid

from kazoo.client import KazooClient

from stack.services.zookeeper import ZooKeeper


def test_nodes_written_and_watched(zookeeper: ZooKeeper) -> None:
    client = KazooClient(hosts=f"127.0.0.1:{zookeeper.port}", timeout=10)
    client.start(timeout=10)
    # A root of its own, so a concurrent run never deletes another run's nodes.
    root = f"/smoke-{uuid.uuid4().hex[:8]}"
    path = f"{root}/position"
    data_seen: list[bytes | None] = []
    children_seen: list[list[str]] = []
    data_changed, child_added = threading.Event(), threading.Event()
    try:
        client.create(path, b"one", makepath=True)

        @client.DataWatch(path)  # type: ignore[untyped-decorator]
        def on_data(data: bytes | None, _stat: object) -> None:
            data_seen.append(data)
            if data == b"two":
                data_changed.set()

        @client.ChildrenWatch(root)  # type: ignore[untyped-decorator]
        def on_children(children: list[str]) -> None:
            children_seen.append(sorted(children))
            if "lock" in children:
                child_added.set()

        client.set(path, b"two")
        client.create(f"{root}/lock", b"", ephemeral=True)
        assert data_changed.wait(10), f"data watch did not fire: {data_seen}"
        assert child_added.wait(10), f"children watch did not fire: {children_seen}"
        assert data_seen == [b"one", b"two"]
        assert children_seen == [["position"], ["lock", "position"]]
        assert client.get(path)[0] == b"two"
        assert zookeeper.four_letter("ruok") == "imok"
        assert zookeeper.version().startswith("3.9.")
    finally:
        client.delete(root, recursive=True)
        client.stop()
        client.close()
