"""ZooKeeper: a node written, watched and changed through kazoo."""

from __future__ import annotations

import threading
import uuid

from kazoo.client import KazooClient

from stack.services.zookeeper import ZooKeeper


def test_node_written_and_watched(zookeeper: ZooKeeper) -> None:
    client = KazooClient(hosts=f"127.0.0.1:{zookeeper.port}", timeout=10)
    client.start(timeout=10)
    path = f"/smoke/{uuid.uuid4().hex[:8]}"
    seen: list[bytes | None] = []
    changed = threading.Event()
    try:
        client.create(path, b"one", makepath=True)

        @client.DataWatch(path)  # type: ignore[untyped-decorator]
        def watch(data: bytes | None, _stat: object) -> None:
            seen.append(data)
            if data == b"two":
                changed.set()

        client.set(path, b"two")
        assert changed.wait(10), f"watch did not fire: {seen}"
        assert seen[0] == b"one" and seen[-1] == b"two"
        assert client.get(path)[0] == b"two"
        assert zookeeper.four_letter("ruok") == "imok"
    finally:
        client.delete("/smoke", recursive=True)
        client.stop()
        client.close()
