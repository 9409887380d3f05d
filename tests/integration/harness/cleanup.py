"""Services a test made, cleaned up when it ends, however it ends."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from kazoo.client import KazooClient

from .processes import kill_leftovers


class Cleaned(Protocol):
    def cleanup(self) -> None: ...


S = TypeVar("S", bound=Cleaned)


def cleaned(svc: S) -> Iterator[S]:
    """A fixture's body (``yield from``) that hands over ``svc`` and cleans it up after."""
    try:
        yield svc
    finally:
        svc.cleanup()


def made(make: Callable[..., S]) -> Iterator[Callable[..., S]]:
    """A fixture's body (``yield from``) that hands over a factory; every service it made
    is cleaned up after the test, in the order made."""
    services: list[S] = []

    def tracked(*args: object, **kwargs: object) -> S:
        svc = make(*args, **kwargs)
        services.append(svc)
        return svc

    yield tracked
    for svc in services:
        svc.cleanup()


def tear_down(procs: list[subprocess.Popen[bytes]], stop: Callable[[], None],
              drop: Callable[[], None], zk: KazooClient) -> None:
    """The end of a service: its leftover processes killed and its runner stopped, then,
    even when that failed, ``drop`` (what it made on the servers) and its ZooKeeper client
    closed. No process may see its schemas dropped under it."""
    try:
        kill_leftovers(procs)
        stop()
    finally:
        drop()
        zk.stop()
        zk.close()
