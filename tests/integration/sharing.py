"""The local stack's servers, shared by every pytest process that runs at once.

``make test`` runs the integration tests in several pytest-xdist workers, and a contributor
may run a second pytest beside it: all of them use the one stack under ``.run/``. Two rules
keep them out of each other's way:

- a server is started under a file lock (two workers never launch the same one) and is
  stopped only by the process that owns the whole run (see ``conftest.py``);
- a test that takes a shared server down (Kafka, ZooKeeper, the source, a target) is marked
  ``exclusive``: it waits until no other test runs and no other test starts until it ends.
  Every other integration test holds the gate shared. Waiting exclusive tests go first, so
  a steady stream of shared tests cannot starve them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from stack.settings import RUN_DIR

_DIR = RUN_DIR / "tests"


def _open(name: str) -> int:
    _DIR.mkdir(parents=True, exist_ok=True)
    return os.open(_DIR / name, os.O_RDWR | os.O_CREAT, 0o644)


@contextlib.contextmanager
def _flock(name: str, mode: int) -> Iterator[None]:
    fd = _open(name)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def starting() -> contextlib.AbstractContextManager[None]:
    """Held while a server is checked and started."""
    return _flock("start.lock", fcntl.LOCK_EX)


def _pending() -> Path:
    return _DIR / f"exclusive-waiting.{os.getpid()}"


def _someone_waits() -> bool:
    """An exclusive test of a live process waits for the gate."""
    for marker in _DIR.glob("exclusive-waiting.*"):
        pid = int(marker.suffix[1:])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            marker.unlink(missing_ok=True)  # left by a process that died waiting
            continue
        except PermissionError:
            pass
        if pid != os.getpid():
            return True
    return False


#: Whether this process holds the gate (flock locks of two descriptors of one process
#: would wait for each other: a server fixture set up inside a test must not lock again).
_held = False


@contextlib.contextmanager
def gate(exclusive: bool) -> Iterator[None]:
    """Hold the test gate for one test: alone if ``exclusive``, else beside other tests."""
    global _held
    if _held:
        yield
        return
    _held = True
    try:
        with _gate(exclusive):
            yield
    finally:
        _held = False


@contextlib.contextmanager
def _gate(exclusive: bool) -> Iterator[None]:
    if exclusive:
        _DIR.mkdir(parents=True, exist_ok=True)
        marker = _pending()
        marker.touch()
        try:
            with _flock("gate.lock", fcntl.LOCK_EX):
                marker.unlink(missing_ok=True)
                yield
        finally:
            marker.unlink(missing_ok=True)
        return
    while _someone_waits():
        time.sleep(0.2)
    with _flock("gate.lock", fcntl.LOCK_SH):
        yield
