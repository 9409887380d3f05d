"""Session slots without ZooKeeper: who may claim a slot, and what a dead owner leaves."""

from __future__ import annotations

import os
from pathlib import Path

from replicator.zk_session_slot import SessionSlot


def _claim(tmp_path: Path, service: str = "svc", role: str = "consumers") -> SessionSlot:
    slot = SessionSlot.claim(tmp_path, "zk:2181", "/tungsten", service, role)
    assert slot is not None
    return slot


def test_a_live_owner_keeps_its_slot_and_the_next_process_takes_the_next_one(
        tmp_path: Path) -> None:
    first = _claim(tmp_path)
    second = _claim(tmp_path)
    assert first.path != second.path
    assert first.path.name.endswith("-consumers-0.zk")
    assert second.path.name.endswith("-consumers-1.zk")
    # Other roles, services and ZooKeeper roots have slots of their own.
    assert _claim(tmp_path, role="extractor").path.name.endswith("-extractor-0.zk")
    assert _claim(tmp_path, service="other").path.name.endswith("-consumers-0.zk")
    other_root = SessionSlot.claim(tmp_path, "zk:2181", "/elsewhere", "svc", "consumers")
    assert other_root is not None and other_root.path.name.endswith("-consumers-0.zk")
    assert other_root.path != first.path


def test_a_dead_owner_leaves_its_session_to_the_next_claimant(tmp_path: Path) -> None:
    dead = _claim(tmp_path)
    dead.record((0x1234ABCD, b"\x00\x01secret"))
    assert (dead.path.stat().st_mode & 0o777) == 0o600  # the password is in there
    os.close(dead._fd)  # what the kernel does when the process dies, however it dies
    heir = _claim(tmp_path)
    assert heir.path == dead.path
    assert heir.predecessor() == (0x1234ABCD, b"\x00\x01secret")


def test_a_clean_stop_leaves_nothing_to_end(tmp_path: Path) -> None:
    slot = _claim(tmp_path)
    slot.record((42, b"pw"))
    slot.release()
    heir = _claim(tmp_path)
    assert heir.path == slot.path
    assert heir.predecessor() is None


def test_garbage_in_a_slot_is_ignored(tmp_path: Path) -> None:
    slot = _claim(tmp_path)
    os.pwrite(slot._fd, b"{not json", 0)
    assert slot.predecessor() is None
