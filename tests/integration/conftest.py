"""Session fixtures that bring up the real servers the integration tests ask for.

Each server starts at most once per run (CPU is scarce: the JVM servers take seconds of both
cores to boot), under a file lock shared by the run's xdist workers. A server that was
already running is reused and left running; one this run started is stopped at its end, by
the process that owns the run (``tests/conftest.py``). A server that cannot start fails the
test with the stack's one-line error: integration tests never skip.

Tests marked ``exclusive`` take a shared server down and run alone, or beside the tests that
do not use that server (``sharing.gate``).
"""

from __future__ import annotations

import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from stack import process, services
from stack.errors import StackError
from stack.service import Service
from stack.services.kafka import Kafka
from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.client import check_access
from thl_topics.errors import KafkaAccessError

from . import sharing

_failed: dict[str, str] = {}


def _serve(name: str) -> Service:
    if name in _failed:
        pytest.fail(_failed[name], pytrace=False)
    svc = services.get(name)
    # Not while an exclusive test has it down: it would be started behind that test's back.
    with sharing.gate(exclusive=False, uses=frozenset({name.replace("-", "_")})), \
            sharing.starting():
        try:
            was_running = svc.running()
            svc.start()
            if not was_running:
                sharing.started(name)
        except StackError as exc:
            _failed[name] = str(exc)
            pytest.fail(str(exc), pytrace=False)
    return svc


@pytest.fixture(autouse=True)
def _gate(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker("exclusive")
    uses = {name for name in request.fixturenames if name in sharing.SERVERS}
    for used in request.node.iter_markers("uses"):
        uses.update(used.args)
    with sharing.gate(exclusive=marker is not None,
                      takes=frozenset(marker.args) if marker is not None else frozenset(),
                      uses=frozenset(uses)):
        yield


@pytest.fixture(scope="session")
def zookeeper() -> Service:
    return _serve("zookeeper")


@pytest.fixture(scope="session")
def kafka(zookeeper: Service) -> Service:
    # Kafka runs KRaft and needs no ZooKeeper; the replicator needs both, so start them together.
    return _serve("kafka")


@pytest.fixture
def thl_topic(kafka: Kafka) -> Iterator[str]:
    """A new THL topic on the session's broker (the THL's settings), deleted afterwards."""
    name = f"thl.t{uuid.uuid4().hex[:8]}"
    admin = kafka.admin()
    ensure_thl_topic(admin, ThlTopicSpec(name))
    yield name
    admin.delete_topics([name])[name].result(30)


@dataclass(frozen=True)
class SecureKafka:
    """The broker's SASL_SSL listener and a SCRAM-SHA-512 user made for this session."""

    bootstrap: str
    #: The CA that signed the listener's certificate (made by the stack at first launch).
    ca_file: Path
    ca_key_file: Path
    username: str
    password: str

    def settings(self, **overrides: Any) -> dict[str, Any]:
        """The ``kafka`` section of a service configuration that connects through it."""
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_SSL",
                "sasl": {"mechanism": "SCRAM-SHA-512", "username": self.username,
                         "password": self.password},
                "tls": {"ca_location": str(self.ca_file)}, **overrides}


@pytest.fixture(scope="session")
def kafka_sasl(kafka: Kafka) -> SecureKafka:
    """The SASL_SSL listener of the session's broker, with a fresh SCRAM user.

    The user is made through the PLAINTEXT listener's admin API (Kafka stores SCRAM
    credentials in its metadata log), so no broker restart and no format-time option.
    """
    if not process.port_open(kafka.sasl_port):
        pytest.fail(f"kafka: nothing listens on the SASL_SSL port {kafka.sasl_port}; a broker "
                    "started before the secure listener existed must be restarted: "
                    "python -m stack down kafka && python -m stack up kafka", pytrace=False)
    user, password = f"trep-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(18)
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
    admin = kafka.admin()  # kept alive until the futures are done
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    secure = SecureKafka(kafka.sasl_bootstrap, kafka.ca_file, kafka.ca_key_file, user, password)
    settings = {"bootstrap.servers": secure.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": password, "ssl.ca.location": str(secure.ca_file)}
    # The credential is committed to the metadata log; the broker applies it a moment later.
    deadline = time.monotonic() + 30
    while True:
        try:
            check_access(settings, 10)
            return secure
        except KafkaAccessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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


@pytest.fixture(scope="session")
def spark_connect() -> Any:
    return _serve("spark-connect")


@pytest.fixture(scope="session")
def apicurio() -> Any:
    return _serve("apicurio")


@pytest.fixture(scope="session")
def spark_standalone() -> Any:
    return _serve("spark-standalone")


# The tests that stop a source, Kafka or ZooKeeper (or purge the binlog) under a running
# service do it to a second server of their own: on the shared one they ran alone, the
# other workers idle (about 160 s of every run, 2026-11-28).
@pytest.fixture(scope="session")
def mariadb_scratch() -> Any:
    return _serve("mariadb-scratch")


@pytest.fixture(scope="session")
def zookeeper_scratch() -> Any:
    return _serve("zookeeper-scratch")


@pytest.fixture(scope="session")
def kafka_scratch() -> Any:
    return _serve("kafka-scratch")


@pytest.fixture
def unused_port() -> int:
    """A TCP port nothing listens on at the moment (for a metrics endpoint)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
