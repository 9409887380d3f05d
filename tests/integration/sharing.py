"""The local stack's servers, shared by every pytest process that runs at once.

``make test`` runs the integration tests in several pytest-xdist workers, and a contributor
may run a second pytest beside it: all of them use the one stack under ``.run/``. Two rules
keep them out of each other's way:

- a server is started under a file lock (two workers never launch the same one) and is
  stopped only by the process that owns the whole run (see ``conftest.py``);
- a test that takes a shared server down is marked ``exclusive``. One that takes down a
  server every test needs (``exclusive()`` with no names, or naming ZooKeeper, Kafka or the
  source) waits until no other test runs, and no other test starts until it ends. One that
  takes down a target (``exclusive("elasticsearch")``, by server fixture name) waits only
  for the tests that use that server, and keeps them waiting until it ends: the rest of the
  suite runs beside it. A test uses the servers its fixtures reach (and those a ``uses``
  marker names, for fixtures that ask for servers at run time). Waiting exclusive tests go
  first, so a steady stream of shared tests cannot starve them.
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


def _owner() -> int:
    """The process that owns this run: xdist's controller (every worker's parent), or this
    process when there are no workers."""
    return os.getppid() if "PYTEST_XDIST_WORKER" in os.environ else os.getpid()


def _started_file(owner: int) -> Path:
    return _DIR / f"started.{owner}"


def started(name: str) -> None:
    """This run started server ``name`` (under ``starting()``): its owner stops it at the
    end. Only those: a run beside it (unit tests, another file) leaves them alone."""
    with _started_file(_owner()).open("a", encoding="utf-8") as out:
        out.write(name + "\n")


def take_started() -> set[str]:
    """The servers this run (this process owns it) started, forgotten once taken."""
    path = _started_file(os.getpid())
    with starting():
        try:
            names = set(path.read_text(encoding="utf-8").split())
        except FileNotFoundError:
            return set()
        path.unlink()
    return names


#: Servers every test needs: taking one down stops the whole suite.
CORE = frozenset({"zookeeper", "kafka", "kafka_sasl", "mariadb_source"})
#: Server fixtures with a gate of their own (a test taking one down waits for its users).
SERVERS = frozenset({"mariadb_target", "postgresql", "elasticsearch", "ferretdb", "spark",
                     "apicurio", "spark_standalone", "spark_connect", "mariadb_scratch",
                     "zookeeper_scratch", "kafka_scratch"})


def _pending(lock: str = "gate") -> Path:
    return _DIR / f"exclusive-waiting.{lock}.{os.getpid()}"


def _someone_waits(lock: str = "gate") -> bool:
    """An exclusive test of a live process waits for ``lock``."""
    for marker in _DIR.glob(f"exclusive-waiting.{lock}.*"):
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
def gate(exclusive: bool, takes: frozenset[str] = frozenset(),
         uses: frozenset[str] = frozenset()) -> Iterator[None]:
    """Hold the gates of one test: ``exclusive`` of every test if it takes down no named
    server or a core one, else of the users of the servers it ``takes`` down; shared of
    the servers it ``uses``."""
    global _held
    if _held:
        yield
        return
    _held = True
    try:
        alone = exclusive and (not takes or bool(takes & CORE))
        with contextlib.ExitStack() as stack:
            stack.enter_context(_gate("gate", alone))
            if not alone:
                # One order for every process: two tests never wait for each other.
                for server in sorted((takes if exclusive else frozenset()) | uses):
                    stack.enter_context(_gate(server, exclusive and server in takes))
            yield
    finally:
        _held = False


@contextlib.contextmanager
def _gate(lock: str, exclusive: bool) -> Iterator[None]:
    if exclusive:
        _DIR.mkdir(parents=True, exist_ok=True)
        marker = _pending(lock)
        marker.touch()
        try:
            with _flock(f"{lock}.lock", fcntl.LOCK_EX):
                marker.unlink(missing_ok=True)
                yield
        finally:
            marker.unlink(missing_ok=True)
        return
    while _someone_waits(lock):
        time.sleep(0.2)
    with _flock(f"{lock}.lock", fcntl.LOCK_SH):
        yield
