"""A replicated service under test: source MariaDB -> THL -> MariaDB target and PostgreSQL.

MariaDB gets its tables from the replayed DDL. PostgreSQL makes its tables from the THL
(``create_tables``, its default) unless a test writes them by hand first (``pg_by_hand``:
the schema and ``ready`` by hand, and the tests' own PostgreSQL DDL), so both ways run.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from extractor.service import Extractor
from replicator.config import MetricsConfig
from replicator.zk import connect
from stack.service import Service
from stack.services.mariadb import MariaDB
from stack.services.postgresql import PostgreSQL
from trep.config import ServiceConfig
from trep.runner import Runner

from ..harness import sql
from ..harness.cleanup import made, tear_down
from ..harness.config import extractor_section, service_name, write_service
from ..harness.processes import run_trep, spawn_trep, stacks, thread_stacks
from ..harness.status import component_status, stopped, wait_applied, wait_state, wait_streaming
from ..harness.thl import commit_marker, tail_record, wait_marker


class Replication:
    """One service: its own schema on every server, THL topic, tracking schema and znodes."""

    def __init__(self, tmp_path: Path, source: MariaDB, target: MariaDB, pg: PostgreSQL,
                 kafka: Service, zookeeper: Service, *,
                 mariadb_target: dict[str, Any] | None = None,
                 pg_target: dict[str, Any] | None = None, pg_by_hand: bool = True,
                 groups: dict[str, dict[str, Any]] | None = None,
                 **consumer: Any) -> None:
        """``consumer``: runtime settings of both groups; ``*_target``: target settings;
        ``pg_by_hand``: create the PostgreSQL schema and ``ready`` table here (else the
        applier makes them from the THL); ``groups``: more groups (name: their section)."""
        mariadb_target = mariadb_target or {}
        pg_target = pg_target or {}
        self.name = service_name("r")
        self.schema = f"src_{self.name}"
        self.source, self.target, self.pg = source, target, pg
        self.config_path = tmp_path / f"{self.name}.yml"
        self.log_path = tmp_path / f"{self.name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        common = {"block_commit_ms": 100, **consumer}
        self.cfg: ServiceConfig = write_service(
            self.config_path, self.name, bootstrap=f"127.0.0.1:{kafka.port}",
            zookeeper={"hosts": f"127.0.0.1:{zookeeper.port}"}, source_port=source.port,
            extractor=extractor_section(self.schema, {"batch_ms": 20}),
            consumers={
                "mariadb": {"target": {"type": "sql", **mariadb_target,
                                       "url": f"mysql+pymysql://root@127.0.0.1:{target.port}/"},
                            **common},
                "pg": {"target": {"type": "sql", "statements": "skip", **pg_target,
                                  "url": f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}"
                                         "/postgres"},
                       **common},
                **{name: {**common, **group} for name, group in (groups or {}).items()},
            })
        self.src(f"CREATE DATABASE {self.schema}",
                 f"CREATE TABLE {self.schema}.ready (n INT AUTO_INCREMENT PRIMARY KEY)")
        self.tgt(f"CREATE DATABASE {self.schema}")
        self.tgt(f"CREATE TABLE {self.schema}.ready (n INT AUTO_INCREMENT PRIMARY KEY)")
        if pg_by_hand:
            self.pgsql(f'CREATE SCHEMA "{self.schema}"',
                       f'CREATE TABLE "{self.schema}".ready (n INT PRIMARY KEY)')
        self.runner: Runner | None = None
        self._thread: threading.Thread | None = None
        self.zk = connect(self.cfg.zookeeper.hosts, 10)

    # -- SQL on each server -----------------------------------------------------------------

    def src(self, *statements: str, params: Any = None, many: bool = False
            ) -> list[tuple[Any, ...]]:
        """Run statements on the source in one transaction (``params`` bind the last)."""
        return sql.mysql(self.source.port, statements, params, many)

    def tgt(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run statements on the MariaDB target in one transaction."""
        return sql.mysql(self.target.port, statements, params)

    def pgsql(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run statements on PostgreSQL in one transaction (session in UTC)."""
        return sql.postgresql(self.pg.port, statements, params)

    # -- running ----------------------------------------------------------------------------

    def start(self, *, extractor: bool = True, consumers: Sequence[str] | None = None,
              metrics_port: int = 0) -> None:
        """The runner in a thread of this process."""
        names = list(self.cfg.consumers) if consumers is None else list(consumers)
        cfg = self.cfg.model_copy(update={"metrics": MetricsConfig(port=metrics_port)})
        self.runner = Runner(cfg, extractor=extractor, consumers=names)
        self.runner.start()
        if extractor:
            assert self.runner.extractor is not None
            self.wait_extractor(self.runner.extractor)

    def start_extractor(self) -> None:
        """A fresh extractor thread in the running runner."""
        assert self.runner is not None
        ex = self.runner.extractor = Extractor(self.cfg, self.cfg.extractor)
        self.runner._spawn("extractor", ex.run)
        self.wait_extractor(ex)

    def admin(self) -> AdminClient:
        return AdminClient(self.cfg.kafka.client())

    def wait_extractor(self, ex: Extractor, timeout: float = 60) -> None:
        wait_streaming(self.runner, ex, timeout)

    def stop(self) -> None:
        if self.runner is not None:
            failures, self.runner = stopped(self.runner), None
            assert not failures, failures

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        """``trep-run`` in its own process (for kill tests), logging to ``log_path``."""
        proc = spawn_trep("trep.runner", self.config_path, self.log_path, *args,
                          inherit_crash=True)
        self.procs.append(proc)
        return proc

    def log(self) -> str:
        """What the processes of this service logged so far ('' before the first)."""
        return self.log_path.read_text() if self.log_path.exists() else ""

    def trepctl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_trep("trep.trepctl", self.config_path, *args, input=input)

    # -- positions --------------------------------------------------------------------------

    def thl_tail(self) -> int:
        tail = tail_record(self.cfg.kafka.client(), self.cfg.thl_topic)
        return -1 if tail is None else tail.seqno

    def wait_thl_tail(self, seqno: int, timeout: float = 60) -> None:
        """Until the THL holds ``seqno``."""
        deadline = time.monotonic() + timeout
        while self.thl_tail() < seqno:
            assert time.monotonic() < deadline, f"seqno {seqno} not in the THL in {timeout} s"
            time.sleep(0.1)

    def status(self, group: str) -> dict[str, Any]:
        return component_status(self.zk, self.cfg, f"consumers/{group}")

    def extractor_status(self) -> dict[str, Any]:
        return component_status(self.zk, self.cfg, "extractor")

    def wait_state(self, group: str, state: str, timeout: float = 60) -> dict[str, Any]:
        return wait_state(lambda: self.status(group), state, timeout, label=f"{group} ")

    def wait_applied(self, seqno: int, groups: Sequence[str] = ("mariadb", "pg"),
                     timeout: float = 180) -> None:
        wait_applied(self.status, groups, seqno, timeout,
                     late="{group} did not apply seqno {seqno} in {timeout} s: {status}",
                     detail=self._late_detail)

    def _late_detail(self) -> str:
        """What a group that fell behind leaves to go on: the THL's tail, the extractor's
        status, the end of the service's log (removed with the test's directory) and where
        its threads are (spawned or in this process)."""
        log = self.log_path.read_text() if self.log_path.exists() else "(no log)"
        spawned = "".join(f"\nstacks of pid {p.pid}:\n{stacks(p.pid)}"
                          for p in self.procs if p.poll() is None)
        return (f"\nTHL tail: {self.thl_tail()}\nextractor: {self.extractor_status()}"
                f"\nlog tail:\n{log[-6000:]}{spawned}\nthis process:\n{thread_stacks()}")

    def wait_source_applied(self, groups: Sequence[str] = ("mariadb", "pg"),
                            timeout: float = 180) -> int:
        """Until every group applied everything the source committed so far; that seqno.

        Commits a marker row last, finds its seqno at the THL's tail, waits for it.
        """
        marker = commit_marker(self.src, self.schema)
        deadline = time.monotonic() + timeout
        seqno = wait_marker(lambda: tail_record(self.cfg.kafka.client(), self.cfg.thl_topic),
                            marker, deadline)
        self.wait_applied(seqno, groups, timeout=max(1.0, deadline - time.monotonic()))
        return seqno

    def cleanup(self) -> None:
        tear_down(self.procs, self.stop, self._drop, self.zk)

    def _drop(self) -> None:
        for stmt in (f"DROP DATABASE IF EXISTS {self.schema}",
                     f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}"):
            self.src(stmt)
            self.tgt(stmt)
        self.pgsql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE',
                   f'DROP SCHEMA IF EXISTS "{self.cfg.tracking_schema}" CASCADE')


@pytest.fixture
def make_replication(tmp_path: Path, mariadb_source: MariaDB, mariadb_target: MariaDB,
                     postgresql: PostgreSQL, kafka: Service, zookeeper: Service,
                     ) -> Iterator[Callable[..., Replication]]:
    def make(source: MariaDB | None = None, broker: Service | None = None,
             zk: Service | None = None, **consumer: Any) -> Replication:
        """``source``, ``broker``, ``zk``: other servers than the session's (a test that
        stops one)."""
        return Replication(tmp_path, source or mariadb_source, mariadb_target, postgresql,
                           broker or kafka, zk or zookeeper, **consumer)

    yield from made(make)


@pytest.fixture
def replication(make_replication: Callable[..., Replication]) -> Replication:
    return make_replication()
