"""A service whose consumer groups write change topics, fed from the source MariaDB."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pytest
import yaml
from confluent_kafka.admin import AdminClient

from replicator.control import ComponentNodes
from replicator.zk import connect
from stack.service import Service
from stack.services.apicurio import Apicurio
from stack.services.mariadb import MariaDB
from stack.settings import REPO_ROOT
from thl_topics.errors import ThlTopicMissing
from thl_topics.event import RowChange
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config
from trep.runner import Runner

from ...harness.processes import kill_leftovers


class ChangeService:
    """One service (schema, THL, znodes) with change-topic groups of the given targets."""

    def __init__(self, tmp_path: Path, source: MariaDB, kafka: Service, zookeeper: Service,
                 registry: Apicurio, groups: dict[str, dict[str, Any]],
                 **runtime: Any) -> None:
        self.name = f"x{uuid.uuid4().hex[:10]}"
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
        self.config_path.write_text(yaml.safe_dump({
            "service": self.name,
            "kafka": {"bootstrap_servers": self.bootstrap},
            "zookeeper": {"hosts": f"127.0.0.1:{zookeeper.port}"},
            "source": {"host": "127.0.0.1", "port": source.port, "user": "root",
                       "password": ""},
            "extractor": {"server_id": 6000 + int(self.name[1:5], 16) % 1000,
                          "filters": {"replicate": [f"{self.schema}.*"]}, "batch_ms": 20},
            "consumers": {g: {"target": {"type": "changes", **t}, "block_commit_ms": 100,
                              **runtime} for g, t in self.groups.items()},
        }))
        self.cfg: ServiceConfig = load_config(self.config_path)
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
        conn = pymysql.connect(host="127.0.0.1", port=self.source.port, user="root",
                               password="", charset="utf8mb4", autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                rows: list[Any] = []
                for i, stmt in enumerate(statements):
                    last = i == len(statements) - 1
                    if many and last:
                        cur.executemany(stmt, params)
                    else:
                        cur.execute(stmt, params if last else None)
                    rows = list(cur.fetchall())
            conn.commit()
            return rows
        finally:
            conn.close()

    def start(self, consumers: Sequence[str] | None = None, extractor: bool = True) -> None:
        names = list(self.groups) if consumers is None else list(consumers)
        self.runner = Runner(self.cfg, extractor=extractor, consumers=names)
        self.runner.start()
        if extractor:
            assert self.runner.extractor is not None
            deadline = time.monotonic() + 60
            while not self.runner.extractor.streaming.is_set():
                assert not self.runner.failures, self.runner.failures
                assert time.monotonic() < deadline, "extractor did not start streaming"
                time.sleep(0.1)

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()
            self.runner.wait()
            failures, self.runner = self.runner.failures, None
            assert not failures, failures

    def spawn(self, *args: str, config: Path | None = None) -> subprocess.Popen[bytes]:
        """``trep-run`` in its own process (for kill tests)."""
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        env.pop("TREP_CRASH_AT", None)
        with self.log_path.open("ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "trep.runner", "-c",
                                     str(config or self.config_path), *args], stdout=log,
                                    stderr=log, env=env, cwd=REPO_ROOT)
        self.procs.append(proc)
        return proc

    def trepctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        return subprocess.run([sys.executable, "-m", "trep.trepctl", "-c",
                               str(self.config_path), *args], capture_output=True, text=True,
                              env=env, cwd=REPO_ROOT, timeout=120, check=False)

    def status(self, group: str) -> dict[str, Any]:
        nodes = ComponentNodes(self.zk, self.cfg.zookeeper.root, self.name, f"consumers/{group}")
        return nodes.status() or {}

    def wait_state(self, group: str, state: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(group)
            if status.get("state") == state:
                return status
            assert time.monotonic() < deadline, f"{group} not {state} in {timeout} s: {status}"
            time.sleep(0.2)

    def wait_applied(self, seqno: int, groups: Sequence[str] | None = None,
                     timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        for g in groups or list(self.groups):
            while True:
                status = self.status(g)
                assert status.get("state") != "OFFLINE:ERROR", status
                if status.get("appliedLastSeqno", -1) >= seqno:
                    break
                assert time.monotonic() < deadline, f"{g}: seqno {seqno} not applied: {status}"
                time.sleep(0.2)

    def wait_extractor_online(self, since: float, timeout: float = 90) -> None:
        """Until an extractor that went ONLINE after ``since`` (a time.time()) reports it."""
        nodes = ComponentNodes(self.zk, self.cfg.zookeeper.root, self.name, "extractor")
        deadline = time.monotonic() + timeout
        while True:
            status = nodes.status() or {}
            if status.get("state") == "ONLINE" and float(status.get("stateSince", 0)) >= since:
                return
            assert time.monotonic() < deadline, f"extractor not ONLINE: {status}"
            time.sleep(0.2)

    def thl_marker(self, timeout: float = 180) -> int:
        """Commit a marker row; its seqno once the THL holds it."""
        marker = self.src(f"INSERT INTO {self.schema}.ready VALUES ()",
                          "SELECT LAST_INSERT_ID()")[0][0]
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, f"marker {marker} never reached the THL"
            try:
                with ThlReader(self.bootstrap, self.cfg.thl_topic) as reader:
                    tail = reader.tail()
            except ThlTopicMissing:  # the extractor has not created it yet
                tail = None
            if tail is not None and tail.event is not None and any(
                    isinstance(item, RowChange) and item.table == "ready"
                    and item.column_values and item.column_values[-1][0] == marker
                    for item in tail.event.data):
                return tail.seqno
            time.sleep(0.2)

    def wait_source_applied(self, groups: Sequence[str] | None = None,
                            timeout: float = 180) -> int:
        seqno = self.thl_marker(timeout)
        self.wait_applied(seqno, groups, timeout)
        return seqno

    def cleanup(self) -> None:
        try:
            kill_leftovers(self.procs)
            self.stop()
        finally:
            self.src(f"DROP DATABASE IF EXISTS {self.schema}",
                     f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}")
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            topics = [t for t in admin.list_topics(timeout=30).topics
                      if t.startswith((f"{self.name}.", f"tungsten_{self.name}.",
                                       f"thl.{self.name}"))]
            if topics:
                for future in admin.delete_topics(topics, operation_timeout=30).values():
                    future.result(60)
            self.zk.stop()
            self.zk.close()


@pytest.fixture
def make_service(tmp_path: Path, mariadb_source: MariaDB, kafka: Service, zookeeper: Service,
                 apicurio: Apicurio) -> Iterator[Callable[..., ChangeService]]:
    made: list[ChangeService] = []

    def make(groups: dict[str, dict[str, Any]], **runtime: Any) -> ChangeService:
        svc = ChangeService(tmp_path, mariadb_source, kafka, zookeeper, apicurio, groups,
                            **runtime)
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.cleanup()
