"""A process killed with SIGKILL: the one restarted in its place ends its ZooKeeper session
at once, so the locks it held are free long before the session would time out."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from replicator.config import ZooKeeperConfig
from replicator.zk_session_slot import claim_slot
from stack.services.zookeeper import ZooKeeper
from stack.settings import REPO_ROOT

from ..harness.processes import bare_env

#: Far longer than the test may take: a lock freed within it was freed by the slot.
SESSION_TIMEOUT = 40.0

HOLDER = textwrap.dedent("""
    import sys, time
    from replicator.zk import connect
    from replicator.config import ZooKeeperConfig
    from replicator.zk_session_slot import claim_slot
    hosts, root, service, slots, lock = sys.argv[1:6]
    slot = claim_slot(ZooKeeperConfig(hosts=hosts, root=root, timeout_s=40.0,
                                      session_dir=slots), service, "consumers")
    zk = connect(hosts, 40.0)
    slot.follow(zk)
    zk.Lock(lock, "holder").acquire(timeout=10)
    print("holding", flush=True)
    time.sleep(600)
""")


def test_a_restarted_process_frees_the_locks_of_its_killed_predecessor(
        zookeeper: ZooKeeper, tmp_path: Path) -> None:
    hosts = f"127.0.0.1:{zookeeper.port}"
    root, service = f"/slot-{uuid.uuid4().hex[:8]}", "svc"
    lock_path = f"{root}/{service}/consumers/g/lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, hosts, root, service, str(tmp_path), lock_path],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env=bare_env())
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=10)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        assert len(client.get_children(lock_path)) == 1
        # The holder has its slot; a second live process gets another one and ends nothing.
        settings = ZooKeeperConfig(hosts=hosts, root=root, timeout_s=10,
                                   session_dir=str(tmp_path))
        neighbour = claim_slot(settings, service, "consumers")
        assert neighbour is not None and neighbour.path.name.endswith("-1.zk")
        assert len(client.get_children(lock_path)) == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        # Without the slot the lock would stay for SESSION_TIMEOUT seconds.
        assert len(client.get_children(lock_path)) == 1
        started = time.monotonic()
        heir = claim_slot(settings, service, "consumers")
        assert heir is not None and heir.path.name.endswith("-0.zk")
        deadline = time.monotonic() + 5
        while client.get_children(lock_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get_children(lock_path) == []
        assert time.monotonic() - started < SESSION_TIMEOUT / 4
        # The dead session's record is gone: nothing to end a second time.
        assert heir.predecessor() is None
        heir.release()
        neighbour.release()
    finally:
        if holder.poll() is None:
            holder.kill()
        client.delete(root, recursive=True)
        client.stop()
        client.close()
