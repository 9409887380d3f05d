"""A replicated service under test: source MariaDB -> THL -> MariaDB target and PostgreSQL.

MariaDB gets its tables from the replayed DDL. PostgreSQL makes its tables from the THL
(``create_tables``, its default) unless a test writes them by hand first (``pg_by_hand``:
the schema and ``ready`` by hand, and the tests' own PostgreSQL DDL), so both ways run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
import yaml
from confluent_kafka.admin import AdminClient

from extractor.service import Extractor
from replicator.config import MetricsConfig
from replicator.control import ComponentNodes
from replicator.zk import connect
from stack.service import Service
from stack.services.mariadb import MariaDB
from stack.services.postgresql import PostgreSQL
from stack.settings import REPO_ROOT
from thl_topics.event import RowChange
from trep.config import ServiceConfig, load_config
from trep.runner import Runner

from ..processes import kill_leftovers
from ..thl import tail_record


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
        self.name = f"r{uuid.uuid4().hex[:10]}"
        self.schema = f"src_{self.name}"
        self.source, self.target, self.pg = source, target, pg
        self.config_path = tmp_path / f"{self.name}.yml"
        self.log_path = tmp_path / f"{self.name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        common = {"block_commit_ms": 100, **consumer}
        self.config_path.write_text(yaml.safe_dump({
            "service": self.name,
            "kafka": {"bootstrap_servers": f"127.0.0.1:{kafka.port}"},
            "zookeeper": {"hosts": f"127.0.0.1:{zookeeper.port}"},
            "source": {"host": "127.0.0.1", "port": source.port, "user": "root",
                       "password": ""},
            "extractor": {"server_id": 3000 + int(self.name[1:5], 16) % 5000,
                          "filters": {"replicate": [f"{self.schema}.*"]},
                          "batch_ms": 20},
            "consumers": {
                "mariadb": {"target": {"type": "sql", **mariadb_target,
                                       "url": f"mysql+pymysql://root@127.0.0.1:{target.port}/"},
                            **common},
                "pg": {"target": {"type": "sql", "statements": "skip", **pg_target,
                                  "url": f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}"
                                         "/postgres"},
                       **common},
                **{name: {**common, **group} for name, group in (groups or {}).items()},
            },
        }))
        self.cfg: ServiceConfig = load_config(self.config_path)
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

    @staticmethod
    def _mysql(port: int, statements: Sequence[str], params: Any,
               many: bool = False) -> list[tuple[Any, ...]]:
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="",
                               charset="utf8mb4", autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
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

    def src(self, *statements: str, params: Any = None, many: bool = False
            ) -> list[tuple[Any, ...]]:
        """Run statements on the source in one transaction (``params`` bind the last)."""
        return self._mysql(self.source.port, statements, params, many)

    def tgt(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run statements on the MariaDB target in one transaction."""
        return self._mysql(self.target.port, statements, params)

    def pgsql(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run statements on PostgreSQL in one transaction (session in UTC)."""
        with psycopg.connect(host="127.0.0.1", port=self.pg.port, user="postgres",
                             dbname="postgres", options="-c timezone=UTC") as conn:
            rows: list[tuple[Any, ...]] = []
            for i, stmt in enumerate(statements):
                cur = conn.execute(stmt.encode(), params if i == len(statements) - 1 else None)
                if cur.description is not None:
                    rows = list(cur.fetchall())
            return rows

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
        deadline = time.monotonic() + timeout
        while not ex.streaming.is_set():
            assert not (self.runner and self.runner.failures), self.runner.failures
            assert time.monotonic() < deadline, "extractor did not start streaming"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()
            self.runner.wait()
            failures, self.runner = self.runner.failures, None
            assert not failures, failures

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        """``trep-run`` in its own process (for kill tests), logging to ``log_path``."""
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        with self.log_path.open("ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "trep.runner", "-c",
                                     str(self.config_path), *args], stdout=log, stderr=log,
                                    env=env, cwd=REPO_ROOT)
        self.procs.append(proc)
        return proc

    def log(self) -> str:
        """What the processes of this service logged so far ('' before the first)."""
        return self.log_path.read_text() if self.log_path.exists() else ""

    def trepctl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        return subprocess.run([sys.executable, "-m", "trep.trepctl", "-c",
                               str(self.config_path), *args], capture_output=True, text=True,
                              env=env, cwd=REPO_ROOT, input=input, timeout=120, check=False)

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
        nodes = ComponentNodes(self.zk, self.cfg.zookeeper.root, self.name, f"consumers/{group}")
        return nodes.status() or {}

    def extractor_status(self) -> dict[str, Any]:
        nodes = ComponentNodes(self.zk, self.cfg.zookeeper.root, self.name, "extractor")
        return nodes.status() or {}

    def wait_state(self, group: str, state: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(group)
            if status.get("state") == state:
                return status
            assert time.monotonic() < deadline, f"{group} not {state} in {timeout} s: {status}"
            time.sleep(0.2)

    def wait_applied(self, seqno: int, groups: Sequence[str] = ("mariadb", "pg"),
                     timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        for g in groups:
            while True:
                status = self.status(g)
                assert status.get("state") != "OFFLINE:ERROR", status
                if status.get("appliedLastSeqno", -1) >= seqno:
                    break
                assert time.monotonic() < deadline, \
                    f"{g} did not apply seqno {seqno} in {timeout} s: {status}"
                time.sleep(0.2)

    def wait_source_applied(self, groups: Sequence[str] = ("mariadb", "pg"),
                            timeout: float = 180) -> int:
        """Until every group applied everything the source committed so far; that seqno.

        Commits a marker row last, finds its seqno at the THL's tail, waits for it.
        """
        marker = self.src(f"INSERT INTO {self.schema}.ready VALUES ()",
                          "SELECT LAST_INSERT_ID()")[0][0]
        deadline = time.monotonic() + timeout
        seqno = None
        while seqno is None:
            assert time.monotonic() < deadline, f"marker {marker} never reached the THL"
            tail = tail_record(self.cfg.kafka.client(), self.cfg.thl_topic)
            if tail is not None and tail.event is not None and any(
                    isinstance(item, RowChange) and item.table == "ready"
                    and item.column_values and item.column_values[-1][0] == marker
                    for item in tail.event.data):
                seqno = tail.seqno
            else:
                time.sleep(0.2)
        self.wait_applied(seqno, groups, timeout=max(1.0, deadline - time.monotonic()))
        return seqno

    def cleanup(self) -> None:
        try:
            kill_leftovers(self.procs)
            self.stop()
        finally:
            for stmt in (f"DROP DATABASE IF EXISTS {self.schema}",
                         f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}"):
                self.src(stmt)
                self.tgt(stmt)
            self.pgsql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE',
                       f'DROP SCHEMA IF EXISTS "{self.cfg.tracking_schema}" CASCADE')
            self.zk.stop()
            self.zk.close()


@pytest.fixture
def make_replication(tmp_path: Path, mariadb_source: MariaDB, mariadb_target: MariaDB,
                     postgresql: PostgreSQL, kafka: Service, zookeeper: Service,
                     ) -> Iterator[Callable[..., Replication]]:
    made: list[Replication] = []

    def make(**consumer: Any) -> Replication:
        rep = Replication(tmp_path, mariadb_source, mariadb_target, postgresql, kafka,
                          zookeeper, **consumer)
        made.append(rep)
        return rep

    yield make
    for rep in made:
        rep.cleanup()


@pytest.fixture
def replication(make_replication: Callable[..., Replication]) -> Replication:
    return make_replication()
