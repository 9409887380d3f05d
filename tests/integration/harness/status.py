"""Waiting on what a service's components publish: their status znodes, and the runner a
test starts in its own process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from extractor.service import Extractor
from replicator.control import ComponentNodes
from trep.config import ServiceConfig
from trep.runner import Runner


def component_status(zk: KazooClient, cfg: ServiceConfig, component: str) -> dict[str, Any]:
    """The status a component (``extractor`` or ``consumers/<group>``) published last.

    A test that runs the replicator in threads of its own process shares the GIL with it:
    applying a value of many MiB holds it for seconds in one C call (PyMySQL escaping 64 MiB
    takes 2.5 s on an idle core), so one request of the test's client can miss
    ``zk_call``'s 5 s while ZooKeeper is fine. Ask again for up to 60 s before failing.
    """
    nodes = ComponentNodes(zk, cfg.zookeeper.root, cfg.service, component)
    deadline = time.monotonic() + 60
    while True:
        try:
            return nodes.status() or {}
        except ConnectionLoss:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_state(status: Callable[[], dict[str, Any]], state: str, timeout: float, *,
               since: float | None = None, label: str = "",
               late: str = "not {state} in {timeout} s: {status}") -> dict[str, Any]:
    """Until ``status`` reports ``state`` (one that came ``since`` a time.time() or later,
    if given); that status. ``label`` and ``late`` make the message of a timeout."""
    deadline = time.monotonic() + timeout
    while True:
        found = status()
        if found.get("state") == state and (
                since is None or float(found.get("stateSince", 0)) >= since):
            return found
        assert time.monotonic() < deadline, \
            label + late.format(state=state, timeout=timeout, status=found)
        time.sleep(0.2)


def wait_applied(status: Callable[[str], dict[str, Any]], groups: Iterable[str], seqno: int,
                 timeout: float, late: str = "{group}: seqno {seqno} not applied: {status}",
                 detail: Callable[[], str] | None = None) -> None:
    """Until every group applied ``seqno`` (fails at once on a group stopped in error).

    ``late`` is the message of a group that took too long (``detail()`` is added to it).
    """
    deadline = time.monotonic() + timeout
    for group in groups:
        while True:
            found = status(group)
            assert found.get("state") != "OFFLINE:ERROR", found
            if found.get("appliedLastSeqno", -1) >= seqno:
                break
            assert time.monotonic() < deadline, \
                late.format(group=group, seqno=seqno, timeout=timeout, status=found) \
                + (detail() if detail is not None else "")
            time.sleep(0.2)


def wait_streaming(runner: Runner | None, extractor: Extractor, timeout: float = 60,
                   watch_failures: bool = True) -> None:
    """Until the extractor of a runner in this process streams (its binlog start is fixed);
    ``watch_failures``: fail at once when a component of the runner failed."""
    deadline = time.monotonic() + timeout
    while not extractor.streaming.is_set():
        if watch_failures and runner is not None:
            assert not runner.failures, runner.failures
        assert time.monotonic() < deadline, "extractor did not start streaming"
        time.sleep(0.1)


def stopped(runner: Runner) -> list[str]:
    """Stop a runner of this process and wait for it; what its components failed with."""
    runner.stop()
    runner.wait()
    return runner.failures
