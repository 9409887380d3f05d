"""A service whose consumer groups write change topics, fed from the source MariaDB."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from replicator.zk import connect
from stack.service import Service
from stack.services.apicurio import Apicurio
from stack.services.mariadb import MariaDB
from thl_topics.errors import ThlTopicMissing
from thl_topics.reader import ThlReader, ThlRecord
from trep.config import ServiceConfig
from trep.runner import Runner

from ...harness import sql
from ...harness.cleanup import made, tear_down
from ...harness.config import extractor_section, service_name, write_service
from ...harness.processes import run_trep, spawn_trep
from ...harness.status import component_status, stopped, wait_applied, wait_state, wait_streaming
from ...harness.thl import commit_marker, wait_marker


class ChangeService:
    """One service (schema, THL, znodes) with change-topic groups of the given targets."""

    def __init__(self, tmp_path: Path, source: MariaDB, kafka: Service, zookeeper: Service,
                 registry: Apicurio, groups: dict[str, dict[str, Any]],
                 **runtime: Any) -> None:
        self.name = service_name("x")
        self.schema = f"src_{self.name}"
        self.source = source
        self.registry = registry
        self.bootstrap = f"127.0.0.1:{kafka.port}"
        self.config_path = tmp_path / f"{self.name}.yml"
        self.log_path = tmp_path / f"{self.name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        # Avro groups without a registry get the stack's.
        self.groups = {g: ({"schema_registry": {"url": registry.ccompat_url}, **t}
                           if t.get("format", "avro") == "avro" else t)
                       for g, t in groups.items()}
        self.cfg: ServiceConfig = write_service(
            self.config_path, self.name, bootstrap=self.bootstrap,
            zookeeper={"hosts": f"127.0.0.1:{zookeeper.port}"}, source_port=source.port,
            extractor=extractor_section(self.schema, {"batch_ms": 20}),
            consumers={g: {"target": {"type": "changes", **t}, "block_commit_ms": 100,
                           **runtime} for g, t in self.groups.items()})
        self.src(f"CREATE DATABASE {self.schema}",
                 f"CREATE TABLE {self.schema}.ready (n INT AUTO_INCREMENT PRIMARY KEY)")
        self.zk = connect(self.cfg.zookeeper.hosts, 10)
        self.runner: Runner | None = None

    @property
    def registry_url(self) -> str:
        return self.registry.ccompat_url

    def topic(self, table: str, group: str | None = None) -> str:
        """The topic of a table in the (first) group, by its template."""
        target = self.groups[group or next(iter(self.groups))]
        template = target.get("topic", "{service}.{schema}.{table}")
        return str(template.format(service=self.name, schema=self.schema, table=table))

    def src(self, *statements: str, params: Any = None, many: bool = False) -> list[Any]:
        return sql.mysql(self.source.port, statements, params, many)

    def start(self, consumers: Sequence[str] | None = None, extractor: bool = True) -> None:
        names = list(self.groups) if consumers is None else list(consumers)
        self.runner = Runner(self.cfg, extractor=extractor, consumers=names)
        self.runner.start()
        if extractor:
            assert self.runner.extractor is not None
            wait_streaming(self.runner, self.runner.extractor)

    def stop(self) -> None:
        if self.runner is not None:
            failures, self.runner = stopped(self.runner), None
            assert not failures, failures

    def spawn(self, *args: str, config: Path | None = None) -> subprocess.Popen[bytes]:
        """``trep-run`` in its own process (for kill tests)."""
        proc = spawn_trep("trep.runner", config or self.config_path, self.log_path, *args)
        self.procs.append(proc)
        return proc

    def trepctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_trep("trep.trepctl", self.config_path, *args)

    def status(self, group: str) -> dict[str, Any]:
        return component_status(self.zk, self.cfg, f"consumers/{group}")

    def wait_state(self, group: str, state: str, timeout: float = 60) -> dict[str, Any]:
        return wait_state(lambda: self.status(group), state, timeout, label=f"{group} ")

    def wait_applied(self, seqno: int, groups: Sequence[str] | None = None,
                     timeout: float = 180) -> None:
        wait_applied(self.status, groups or list(self.groups), seqno, timeout)

    def wait_extractor_online(self, since: float, timeout: float = 90) -> None:
        """Until an extractor that went ONLINE after ``since`` (a time.time()) reports it."""
        wait_state(lambda: component_status(self.zk, self.cfg, "extractor"), "ONLINE",
                   timeout, since=since, label="extractor ", late="not {state}: {status}")

    def _tail(self) -> ThlRecord | None:
        try:
            with ThlReader(self.bootstrap, self.cfg.thl_topic) as reader:
                return reader.tail()
        except ThlTopicMissing:  # the extractor has not created it yet
            return None

    def thl_marker(self, timeout: float = 180) -> int:
        """Commit a marker row; its seqno once the THL holds it."""
        marker = commit_marker(self.src, self.schema)
        return wait_marker(self._tail, marker, time.monotonic() + timeout)

    def wait_source_applied(self, groups: Sequence[str] | None = None,
                            timeout: float = 180) -> int:
        seqno = self.thl_marker(timeout)
        self.wait_applied(seqno, groups, timeout)
        return seqno

    def cleanup(self) -> None:
        tear_down(self.procs, self.stop, self._drop, self.zk)

    def _drop(self) -> None:
        self.src(f"DROP DATABASE IF EXISTS {self.schema}",
                 f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [t for t in admin.list_topics(timeout=30).topics
                  if t.startswith((f"{self.name}.", f"tungsten_{self.name}.",
                                   f"thl.{self.name}"))]
        if topics:
            for future in admin.delete_topics(topics, operation_timeout=30).values():
                future.result(60)


@pytest.fixture
def make_service(tmp_path: Path, mariadb_source: MariaDB, kafka: Service, zookeeper: Service,
                 apicurio: Apicurio) -> Iterator[Callable[..., ChangeService]]:
    def make(groups: dict[str, dict[str, Any]], **runtime: Any) -> ChangeService:
        return ChangeService(tmp_path, mariadb_source, kafka, zookeeper, apicurio, groups,
                             **runtime)

    yield from made(make)
