"""Kafka Connect standalone with Debezium's JDBC sink: a consumer of change topics that this
project did not write, for the tests that prove Debezium compatibility.

Everything comes from Maven Central and is cached: Kafka Connect 4.1.1 (the Kafka version
Debezium 3.4 is built against), ``io.debezium:debezium-connector-jdbc`` 3.4.0.Final with the
PostgreSQL JDBC driver, log4j as SLF4J's binding (otherwise start-up errors are invisible),
and Apicurio's Kafka Connect converter for Avro. Confluent's own AvroConverter is not on
Maven Central; Apicurio's 2.6 converter reads the Confluent wire format (magic byte, 4-byte
id) when told to (``as-confluent``, ``use-id=contentId``, no headers) and fetches schemas
through the registry's v2 API, which Apicurio 3 still serves; the 3.0.9 converter cannot be
used, its parent pom was never published to Maven Central.

A test starts one worker, runs one connector, and stops it: a JVM per test run, small heap.
"""

from __future__ import annotations

import json
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from stack import process
from stack.errors import StackError
from stack.fetch import maven_runtime_jars
from stack.settings import HOST, JAVA_HOME, cache_dir

CONNECT_VERSION = "4.1.1"
DEBEZIUM_VERSION = "3.4.0.Final"
APICURIO_CONVERTER_VERSION = "2.6.13.Final"
POSTGRESQL_DRIVER_VERSION = "42.7.8"
LOG4J_VERSION = "2.24.3"

LOG4J2 = """\
status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.connect.name = org.apache.kafka.connect.runtime.WorkerSinkTask
logger.connect.level = INFO
logger.hibernate.name = org.hibernate
logger.hibernate.level = WARN
"""

NAME = "kafka-connect"


def classpath(log: Path | None = None) -> list[Path]:
    """The worker's jars (resolved once, then cached)."""
    return maven_runtime_jars(NAME, [
        f"org.apache.kafka:connect-runtime:{CONNECT_VERSION}",
        f"org.apache.kafka:connect-json:{CONNECT_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
        "org.slf4j:slf4j-api:2.0.17",
        f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
        f"io.debezium:debezium-connector-jdbc:{DEBEZIUM_VERSION}",
        f"org.postgresql:postgresql:{POSTGRESQL_DRIVER_VERSION}",
        f"io.apicurio:apicurio-registry-utils-converter:{APICURIO_CONVERTER_VERSION}",
    ], cache_dir(f"kafka-connect-{CONNECT_VERSION}-debezium-{DEBEZIUM_VERSION}-libs"), log=log)


def apicurio_avro_converter(registry_v2_url: str) -> dict[str, str]:
    """Converter settings (without the ``key.converter.`` prefix) that read the Confluent
    wire format through Apicurio's v2 API."""
    return {
        "": "io.apicurio.registry.utils.converter.AvroConverter",
        "apicurio.registry.url": registry_v2_url,
        "apicurio.registry.as-confluent": "true",
        "apicurio.registry.use-id": "contentId",
        "apicurio.registry.headers.enabled": "false",
        "apicurio.registry.id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
        "apicurio.registry.auto-register": "false",
    }


def json_converter(schemas: bool = True) -> dict[str, str]:
    """Kafka Connect's JsonConverter settings (without the prefix)."""
    return {"": "org.apache.kafka.connect.json.JsonConverter",
            "schemas.enable": "true" if schemas else "false"}


def converter_settings(side: str, settings: dict[str, str]) -> dict[str, str]:
    """``settings`` under ``key.converter`` or ``value.converter``."""
    return {(f"{side}.converter" + (f".{k}" if k else "")): v for k, v in settings.items()}


class ConnectWorker:
    """One standalone worker and its connectors, under ``workdir``."""

    def __init__(self, workdir: Path, bootstrap: str, rest_port: int) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.bootstrap = bootstrap
        self.rest_port = rest_port
        self.log = self.dir / "connect.log"
        self.pid_file = self.dir / "connect.pid"

    def start(self, connectors: list[dict[str, str]], timeout: float = 180.0) -> None:
        """Start the worker with ``connectors`` and wait until all their tasks run."""
        jars = classpath(self.log)
        worker = self.dir / "worker.properties"
        worker.write_text(textwrap.dedent(f"""\
            bootstrap.servers={self.bootstrap}
            listeners=http://{HOST}:{self.rest_port}
            rest.advertised.host.name={HOST}
            offset.storage.file.filename={self.dir / 'offsets'}
            offset.flush.interval.ms=1000
            key.converter=org.apache.kafka.connect.json.JsonConverter
            value.converter=org.apache.kafka.connect.json.JsonConverter
            plugin.discovery=only_scan
            consumer.isolation.level=read_committed
            consumer.auto.offset.reset=earliest
            """))
        props = []
        for connector in connectors:
            path = self.dir / f"{connector['name']}.properties"
            path.write_text("".join(f"{k}={v}\n" for k, v in connector.items()))
            props.append(str(path))
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        if process.port_open(self.rest_port):
            raise StackError(NAME, f"port {self.rest_port} is already taken", self.log)
        process.spawn(NAME, [
            str(JAVA_HOME / "bin" / "java"), "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            "-cp", ":".join(str(j) for j in jars),
            "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), *props],
            log=self.log, pid_file=self.pid_file, env={"JAVA_HOME": str(JAVA_HOME)},
            cwd=self.dir)
        names = [c["name"] for c in connectors]
        process.wait_until(NAME, lambda: all(self._running(n) for n in names),
                           timeout=timeout, log=self.log, pid_file=self.pid_file)

    def status(self, name: str) -> Any:
        """The connector's status from the REST API."""
        url = f"http://{HOST}:{self.rest_port}/connectors/{name}/status"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    def _running(self, name: str) -> bool:
        try:
            status = self.status(name)
        except (OSError, urllib.error.URLError, ValueError):
            return False
        tasks = status.get("tasks", [])
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        if failed:
            raise StackError(NAME, f"connector {name} failed: "
                             f"{failed[0].get('trace', '')[:2000]}", self.log)
        return bool(tasks) and all(t.get("state") == "RUNNING" for t in tasks)

    def failure(self, name: str) -> str | None:
        """The trace of a failed task, if any (None while every task runs)."""
        try:
            tasks = self.status(name).get("tasks", [])
        except (OSError, urllib.error.URLError, ValueError) as exc:
            return f"no status: {exc}"
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        return str(failed[0].get("trace", "")) if failed else None

    def stop(self) -> None:
        """SIGTERM the worker (SIGKILL after 30 s)."""
        process.stop_pid(self.pid_file)
