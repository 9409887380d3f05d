"""A service whose consumer groups apply the source MariaDB to the stack's Elasticsearch.

Each group gets its own index template (``<schema>.<group>.<table>``), so several groups
(hard deletes, tombstones) can apply one service side by side; everything the test made
(source schema, indices, topic, znodes) goes at the end.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pytest
from elasticsearch import Elasticsearch

from consumers.elasticsearch.naming import TOMBSTONE_SUFFIX, index_name
from consumers.elasticsearch.readback import read_rows
from replicator.control import ComponentNodes
from replicator.zk import connect
from stack.service import Service
from stack.services.mariadb import MariaDB
from thl_topics.reader import ThlReader, ThlRecord
from trep.config import ServiceConfig
from trep.runner import Runner

from ...conformance.kinds.elasticsearch import exact
from ...conformance.tables import READY, Table, mysql_columns, mysql_name
from ...harness import sql
from ...harness.cleanup import made, tear_down
from ...harness.config import extractor_section, service_name, write_service
from ...harness.processes import run_trep, spawn_trep
from ...harness.status import component_status, stopped, wait_applied, wait_state, wait_streaming
from ...harness.thl import commit_marker, tail_seqno, wait_marker


class EsService:
    """One service, its source schema, and consumer groups on Elasticsearch."""

    def __init__(self, tmp_path: Path, source: MariaDB, kafka: Service, zookeeper: Service,
                 es: Service, groups: dict[str, dict[str, Any]], zk_timeout: float = 6) -> None:
        """``groups``: group name -> target settings, plus runtime settings under
        ``runtime``; ``zk_timeout``: ZooKeeper session timeout (a killed process's lock
        lives that long)."""
        self.name = service_name("e")
        self.schema = f"src_{self.name}"
        self.source = source
        self.url = f"http://127.0.0.1:{es.port}"
        self.es_service = es
        self.bootstrap = f"127.0.0.1:{kafka.port}"
        self.zk_hosts = f"127.0.0.1:{zookeeper.port}"
        self.groups = groups
        self.zk_timeout = zk_timeout
        self.config_path = tmp_path / f"{self.name}.yml"
        self.log_path = tmp_path / f"{self.name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.runner: Runner | None = None
        self.es = Elasticsearch(self.url, request_timeout=120)
        self.configure()
        self.src(f"CREATE DATABASE {self.schema}")
        self.zk = connect(self.cfg.zookeeper.hosts, 10)
        self.tables: list[Table] = []

    def template(self, group: str) -> str:
        return f"{{schema}}.{group}.{{table}}"

    def configure(self, **extractor: Any) -> None:
        consumers = {}
        for group, settings in self.groups.items():
            target = {k: v for k, v in settings.items() if k != "runtime"}
            consumers[group] = {
                "target": {"type": "elasticsearch", "hosts": [self.url],
                           "index": self.template(group), **target},
                "block_commit_ms": 100, **settings.get("runtime", {})}
        self.cfg: ServiceConfig = write_service(
            self.config_path, self.name, bootstrap=self.bootstrap,
            zookeeper={"hosts": self.zk_hosts, "timeout_s": self.zk_timeout},
            source_port=self.source.port,
            extractor=extractor_section(self.schema, {"batch_ms": 20, **extractor}),
            consumers=consumers)

    # -- the source -------------------------------------------------------------------------

    def src(self, *statements: str, params: Any = None, many: bool = False) -> list[Any]:
        """Statements on the source in one transaction (``params`` bind the last)."""
        return sql.mysql(self.source.port, statements, params, many)

    def create(self, *tables: Table) -> None:
        for table in (READY, *tables):
            if table not in self.tables:
                self.src(table.mysql.format(s=self.schema))
                self.tables.append(table)

    def committed(self, *statements: str, params: Any = None, many: bool = False) -> int:
        """Run one source transaction; its seqno once the THL holds it (by its GTID)."""
        conn = pymysql.connect(host="127.0.0.1", port=self.source.port, user="root",
                               password="", charset="utf8mb4", autocommit=False)
        try:
            with conn.cursor() as cur:
                sql.execute(cur, statements, params, many)
                conn.commit()
                cur.execute("SELECT @@last_gtid")
                found = cur.fetchone()
                assert found is not None and found[0], "the source reports no GTID"
                gtid = found[0]
        finally:
            conn.close()
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, f"GTID {gtid} never reached the THL"
            with ThlReader(self.cfg.kafka.bootstrap_servers, self.cfg.thl_topic) as reader:
                tail = reader.tail()
            if tail is not None and tail.event is not None and \
                    tail.event.metadata.get("gtid") == gtid:
                return tail.seqno
            time.sleep(0.1)

    # -- running ----------------------------------------------------------------------------

    def start(self, consumers: Sequence[str] | None = None, extractor: bool = True) -> None:
        """trep-run in threads of this process."""
        names = list(self.groups) if consumers is None else list(consumers)
        self.runner = Runner(self.cfg, extractor=extractor, consumers=names)
        self.runner.start()
        if extractor:
            assert self.runner.extractor is not None
            wait_streaming(self.runner, self.runner.extractor, watch_failures=False)

    def stop(self) -> None:
        if self.runner is not None:
            failures, self.runner = stopped(self.runner), None
            assert not failures, failures

    def spawn(self, *args: str, crash: str | None = None) -> subprocess.Popen[bytes]:
        """trep-run in its own process (armed with a crash point if asked)."""
        proc = spawn_trep("trep.runner", self.config_path, self.log_path, *args,
                          crash=crash or None)
        self.procs.append(proc)
        return proc

    def trepctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = run_trep("trep.trepctl", self.config_path, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    # -- positions --------------------------------------------------------------------------

    def thl_tail(self) -> int:
        return tail_seqno(self.cfg.kafka.bootstrap_servers, self.cfg.thl_topic)

    def status(self, group: str) -> dict[str, Any]:
        return component_status(self.zk, self.cfg, f"consumers/{group}")

    def wait_alive(self, group: str, timeout: float = 60) -> None:
        """Until a process runs ``group`` (its ephemeral ``alive`` node exists)."""
        nodes = ComponentNodes(self.zk, self.cfg.zookeeper.root, self.name, f"consumers/{group}")
        deadline = time.monotonic() + timeout
        while not nodes.alive():
            assert time.monotonic() < deadline, f"{group}: no process\n{self.log()[-3000:]}"
            time.sleep(0.1)

    def wait_state(self, group: str, state: str, timeout: float = 60) -> dict[str, Any]:
        return wait_state(lambda: self.status(group), state, timeout, label=f"{group} ")

    def wait_applied(self, seqno: int, groups: Sequence[str] | None = None,
                     timeout: float = 180) -> None:
        wait_applied(self.status, groups or self.groups, seqno, timeout,
                     detail=lambda: f"\n{self.log()[-3000:]}")

    def _tail(self) -> ThlRecord | None:
        with ThlReader(self.cfg.kafka.bootstrap_servers, self.cfg.thl_topic) as reader:
            return reader.tail()

    def wait_source_applied(self, groups: Sequence[str] | None = None,
                            timeout: float = 180) -> int:
        """Until the groups applied everything the source committed so far; that seqno."""
        marker = commit_marker(self.src, self.schema)
        deadline = time.monotonic() + timeout
        seqno = wait_marker(self._tail, marker, deadline)
        self.wait_applied(seqno, groups, max(1.0, deadline - time.monotonic()))
        return seqno

    # -- Elasticsearch ----------------------------------------------------------------------

    def index(self, group: str, table: Table | str) -> str:
        """The name applications read for ``table`` in ``group`` (alias in tombstone mode)."""
        name = table if isinstance(table, str) else table.name
        return index_name(self.template(group), self.name, self.schema, name)

    def physical(self, group: str, table: Table | str) -> str:
        """The index that holds the documents (``<alias>.all`` in tombstone mode)."""
        tomb = self.groups[group].get("deletes") == "tombstone"
        return self.index(group, table) + (TOMBSTONE_SUFFIX if tomb else "")

    def rows(self, group: str, table: Table) -> list[tuple[Any, ...]]:
        """The table's rows in the group's index, each value in its exact form."""
        if not self.es.indices.exists(index=self.index(group, table)):
            return []
        return [tuple(exact(c, row[c]) for c in table.columns)
                for row in read_rows(self.es, self.index(group, table))]

    def source_rows(self, table: Table) -> list[tuple[Any, ...]]:
        return [tuple(exact(c, v) for c, v in zip(table.columns, row, strict=True))
                for row in self.src(f"SELECT {mysql_columns(table)} FROM "
                                    f"{self.schema}.{mysql_name(table)}")]

    def compare(self, group: str, *tables: Table) -> dict[str, int]:
        """Every table equal on the source and in the group's indices, row by row."""
        counts = {}
        for table in tables:
            src = sorted(self.source_rows(table), key=repr)
            tgt = sorted(self.rows(group, table), key=repr)
            missing = [r for r in src if r not in tgt][:3]
            extra = [r for r in tgt if r not in src][:3]
            assert tgt == src, (f"{group}: {table.name}: {len(tgt)} rows, source {len(src)}; "
                                f"missing {missing}; extra {extra}")
            counts[table.name] = len(src)
        return counts

    def ids(self, group: str, table: Table | str, physical: bool = False) -> set[str]:
        """The document ids in the group's index (``physical``: tombstones included)."""
        index = self.physical(group, table) if physical else self.index(group, table)
        self.es.indices.refresh(index=index)
        hits = self.es.search(index=index, size=10_000, source=False)["hits"]["hits"]
        return {h["_id"] for h in hits}

    def cleanup(self) -> None:
        tear_down(self.procs, self.stop, self._drop, self.zk)

    def _drop(self) -> None:
        self.src(f"DROP DATABASE IF EXISTS {self.schema}",
                 f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}")
        for pattern in (f"{self.schema}.*", self.cfg.tracking_schema.lower()):
            self.es.indices.delete(index=pattern, ignore_unavailable=True,
                                   allow_no_indices=True, expand_wildcards="all")
        self.es.close()


@pytest.fixture
def make_service(tmp_path: Path, mariadb_source: MariaDB, kafka: Service, zookeeper: Service,
                 elasticsearch: Service) -> Iterator[Any]:
    """``make_service(groups)``: an EsService, cleaned up after the test."""
    def make(groups: dict[str, dict[str, Any]], **options: Any) -> EsService:
        return EsService(tmp_path, mariadb_source, kafka, zookeeper, elasticsearch, groups,
                         **options)

    yield from made(make)
