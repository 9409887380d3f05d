"""Session fixtures that bring up the real servers the integration tests ask for.

Each server starts at most once per pytest session (CPU is scarce: the JVM servers take
seconds of both cores to boot). A server that was already running is reused and left running;
one this session started is stopped at the end. A server that cannot start fails the test
with the stack's one-line error: integration tests never skip.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from stack import services
from stack.errors import StackError
from stack.service import Service

_started: list[Service] = []
_failed: dict[str, str] = {}


def _serve(name: str) -> Service:
    if name in _failed:
        pytest.fail(_failed[name], pytrace=False)
    svc = services.get(name)
    was_running = svc.running()
    try:
        svc.start()
    except StackError as exc:
        _failed[name] = str(exc)
        pytest.fail(str(exc), pytrace=False)
    if not was_running:
        _started.append(svc)
    return svc


@pytest.fixture(scope="session", autouse=True)
def _stop_what_this_session_started() -> Iterator[None]:
    yield
    for svc in reversed(_started):
        svc.stop()


@pytest.fixture(scope="session")
def zookeeper() -> Service:
    return _serve("zookeeper")


@pytest.fixture(scope="session")
def kafka(zookeeper: Service) -> Service:
    # Kafka runs KRaft and needs no ZooKeeper; the replicator needs both, so start them together.
    return _serve("kafka")


@pytest.fixture(scope="session")
def mariadb_source() -> Any:
    return _serve("mariadb-source")


@pytest.fixture(scope="session")
def mariadb_target() -> Any:
    return _serve("mariadb-target")


@pytest.fixture(scope="session")
def postgresql() -> Any:
    return _serve("postgresql")


@pytest.fixture(scope="session")
def elasticsearch() -> Any:
    return _serve("elasticsearch")


@pytest.fixture(scope="session")
def ferretdb() -> Any:
    return _serve("ferretdb")


@pytest.fixture(scope="session")
def spark() -> Any:
    return _serve("spark")


@pytest.fixture
def unused_port() -> int:
    """A TCP port nothing listens on at the moment (for a metrics endpoint)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
