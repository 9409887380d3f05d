"""Kafka 4.x in KRaft mode (one node: broker and controller), from Maven Central jars."""

from __future__ import annotations

import base64
import os
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from stack import process, tls
from stack.fetch import maven_runtime_jars
from stack.service import TcpService
from stack.settings import C1_ONLY, HOST, JAVA_HOME, cache_dir, port

KAFKA_VERSION = "4.1.1"
#: The Kafka pom brings slf4j without a binding: without one, start-up errors are invisible.
LOG4J_VERSION = "2.24.3"

LOG4J2 = """\
status = warn
# Kafka logs its own shutdown; log4j's hook would close the log first and print a warning.
shutdownHook = disable
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
"""


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A Kafka cluster id: 16 random bytes in unpadded URL-safe base64.

    Like Kafka's own Uuid.randomUuid, never one that starts with '-': the storage tool's
    argument parser would take it for an option (one fresh run directory in 64 failed so).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class Kafka(TcpService):
    """A single-node KRaft cluster with replication factors of 1, transactions enabled.

    Two client listeners: PLAINTEXT on ``port`` (what the tests and the demo use), and
    SASL_SSL on ``sasl_port`` with SCRAM-SHA-512 and a server certificate signed by a CA the
    stack makes at first launch under ``<run dir>/kafka/tls`` (``ca_file``). SCRAM users are
    created through the admin API (``alter_user_scram_credentials``) by whoever needs one.
    """

    start_timeout = 120.0

    def __init__(self, name: str = "kafka") -> None:
        self.name = name

    @property
    def controller_port(self) -> int:
        return port(f"{self.name}-controller")

    @property
    def sasl_port(self) -> int:
        """``TREP_KAFKA_SASL_PORT``, else the client port + 2 (19094 by default), so two
        stacks with their own ``TREP_KAFKA_PORT`` never collide on it."""
        explicit = os.environ.get(f"TREP_{self.name.upper().replace('-', '_')}_SASL_PORT")
        return int(explicit) if explicit else self.port + 2

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """Bootstrap servers of the SASL_SSL listener."""
        return f"{HOST}:{self.sasl_port}"

    @property
    def tls_dir(self) -> Path:
        return self.dir / "tls"

    @property
    def ca_file(self) -> Path:
        """The CA (PEM) that signed the SASL_SSL listener's certificate: clients trust it."""
        return self.tls_dir / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        """The CA's private key: tests sign client certificates with it."""
        return self.tls_dir / "ca-key.pem"

    @property
    def server_pem(self) -> Path:
        return self.tls_dir / "server.pem"

    def _ensure_certificates(self) -> None:
        """A CA and a server certificate for 127.0.0.1, made once per run directory.

        The CA outlives restarts so a client's trust (``ca_file``) stays valid; an EC key
        makes this take milliseconds, not the broker's start-up time.
        """
        if self.ca_file.exists() and self.ca_key_file.exists() and self.server_pem.exists():
            return
        # A distinct name per run directory (a CN holds 64 characters at most).
        ca = tls.new_authority(f"tungsten-kafka local CA {uuid.uuid4().hex[:12]}")
        server = ca.issue(HOST, hosts=[HOST, "localhost"])
        tls.write_private(self.ca_key_file, ca.key_pem())
        # Kafka's PEM keystore file: the private key, then the certificate chain.
        tls.write_private(self.server_pem, server.key_pem() + server.cert_pem() + ca.cert_pem())
        tls.write_public(self.ca_file, ca.cert_pem())

    def _libs(self) -> str:
        jars = maven_runtime_jars(self.name, [
            f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
            f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
            # Declared here so Maven picks the 2.x API the binding needs, not a 1.7 one.
            "org.slf4j:slf4j-api:2.0.17",
            f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
        ], cache_dir(f"kafka-{KAFKA_VERSION}-libs"), log=self.log)
        return ":".join(str(j) for j in jars)

    def install(self) -> None:
        self._libs()

    def _java(self, main: str, *args: str) -> list[str]:
        return [str(JAVA_HOME / "bin" / "java"), "-Xms256m", "-Xmx768m",
                "-XX:+UseG1GC", C1_ONLY, "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                "-cp", self._libs(), main, *args]

    def _write_config(self) -> str:
        self._ensure_certificates()
        props = self.dir / "server.properties"
        sasl = "listener.name.sasl_ssl"
        plain, secure = f"{HOST}:{self.port}", f"{HOST}:{self.sasl_port}"
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        props.write_text(textwrap.dedent(f"""\
            process.roles=broker,controller
            node.id=1
            controller.quorum.voters=1@{HOST}:{self.controller_port}
            listeners=PLAINTEXT://{plain},SASL_SSL://{secure},CONTROLLER://{HOST}:{self.controller_port}
            advertised.listeners=PLAINTEXT://{plain},SASL_SSL://{secure}
            controller.listener.names=CONTROLLER
            inter.broker.listener.name=PLAINTEXT
            listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
            # The default mechanism list is GSSAPI, which would need Kerberos.
            sasl.enabled.mechanisms=SCRAM-SHA-512
            {sasl}.scram-sha-512.sasl.jaas.config={scram}
            {sasl}.ssl.keystore.type=PEM
            {sasl}.ssl.keystore.location={self.server_pem}
            {sasl}.ssl.truststore.type=PEM
            {sasl}.ssl.truststore.location={self.ca_file}
            # A client may also present a certificate (signed by the CA): mutual TLS is tested.
            {sasl}.ssl.client.auth=requested
            log.dirs={self.dir / 'data'}
            num.partitions=1
            default.replication.factor=1
            offsets.topic.replication.factor=1
            offsets.topic.num.partitions=4
            transaction.state.log.replication.factor=1
            transaction.state.log.min.isr=1
            transaction.state.log.num.partitions=4
            share.coordinator.state.topic.replication.factor=1
            share.coordinator.state.topic.min.isr=1
            group.initial.rebalance.delay.ms=0
            auto.create.topics.enable=false
            num.network.threads=2
            num.io.threads=4
            log.cleaner.threads=1
            # The cleaner looks for dirty compacted logs every second, not every 15: a
            # topic with small segments is compacted soon after its records are old enough.
            log.cleaner.backoff.ms=1000
            message.max.bytes=16777216
            replica.fetch.max.bytes=16777216
            """))
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        return str(props)

    def launch(self) -> None:
        props = self._write_config()
        if not (self.dir / "data" / "meta.properties").exists():
            process.run(self.name, self._java("kafka.tools.StorageTool", "format",
                                              "-t", new_cluster_id(), "-c", props,
                                              "--ignore-formatted"),
                        log=self.log, env={"JAVA_HOME": str(JAVA_HOME)})
        process.spawn(self.name, self._java("kafka.Kafka", props), log=self.log,
                      pid_file=self.pid_file, env={"JAVA_HOME": str(JAVA_HOME)})

    def admin(self) -> AdminClient:
        """An admin client of this broker."""
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def ready(self) -> bool:
        if not process.port_open(self.port):
            return False
        try:
            meta = self.admin().list_topics(timeout=2)
        except Exception:  # any failure means "not yet"
            return False
        return bool(meta.brokers)

    def version(self) -> str:
        return KAFKA_VERSION


def service() -> Kafka:
    """The local Kafka broker."""
    return Kafka()


def scratch() -> Kafka:
    """A second broker, for the test that stops Kafka under a running service."""
    return Kafka("kafka-scratch")
