"""A service with one consumer group ``g`` of the kind under test, fed from the source MariaDB.

Every conformance test runs once per registered kind (``kinds.KINDS``), each against its
real server from the stack.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from replicator.control import ComponentNodes
from replicator.zk import connect
from stack.service import Service
from stack.services.mariadb import MariaDB
from thl_topics.event import RowChange
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig
from trep.runner import Runner

from ..harness import sql
from ..harness.cleanup import cleaned, tear_down
from ..harness.config import extractor_section, service_name, write_service
from ..harness.processes import run_trep, spawn_trep
from ..harness.status import component_status, stopped, wait_state, wait_streaming
from ..harness.thl import commit_marker, tail_record, wait_marker
from .kinds import KINDS, ONLY, Kind, kind_class
from .tables import READY, Table, mysql_columns, mysql_name

GROUP = "g"


class Conformance:
    """One service, one group of one kind, one source schema."""

    def __init__(self, tmp_path: Path, kind: Kind, source: MariaDB, kafka: Service,
                 zookeeper: Service) -> None:
        self.kind = kind
        self.name = service_name("c")
        self.schema = f"src_{self.name}"
        self.source = source
        self.bootstrap = f"127.0.0.1:{kafka.port}"
        self.zk_hosts = f"127.0.0.1:{zookeeper.port}"
        self.config_path = tmp_path / f"{self.name}.yml"
        self.log_path = tmp_path / f"{self.name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.runner: Runner | None = None
        self.configure()
        self.src(f"CREATE DATABASE {self.schema}")
        self.zk = connect(self.cfg.zookeeper.hosts, 10)
        self.tables: list[Table] = []

    def configure(self, group: dict[str, Any] | None = None, **extractor: Any) -> None:
        """(Re)write the service file; ``extractor`` settings go to its section, ``group``
        to the consumer group's."""
        self.cfg: ServiceConfig = write_service(
            self.config_path, self.name, bootstrap=self.bootstrap,
            zookeeper={"hosts": self.zk_hosts}, source_port=self.source.port,
            extractor=extractor_section(self.schema, {"batch_ms": 20, **extractor}),
            consumers={GROUP: {"target": self.kind.target(self.name),
                               "block_commit_ms": self.kind.block_ms, **(group or {})}})

    # -- the source -------------------------------------------------------------------------

    def src(self, *statements: str, params: Any = None, many: bool = False) -> list[Any]:
        """Statements on the source in one transaction (``params`` bind the last)."""
        return sql.mysql(self.source.port, statements, params, many)

    def create(self, *tables: Table) -> None:
        """Create tables on the source (and on the target where the kind needs it)."""
        wanted = [t for t in (READY, *tables) if t not in self.tables]
        self.kind.create(self.schema, wanted)
        for table in wanted:
            self.src(table.mysql.format(s=self.schema))
        self.tables.extend(wanted)

    # -- running ----------------------------------------------------------------------------

    def start(self) -> None:
        """trep-run (extractor and the group) in threads of this process."""
        self.runner = Runner(self.cfg, extractor=True, consumers=[GROUP])
        self.runner.start()
        assert self.runner.extractor is not None
        wait_streaming(self.runner, self.runner.extractor, watch_failures=False)

    def stop(self) -> None:
        if self.runner is not None:
            failures, self.runner = stopped(self.runner), None
            assert not failures, failures

    def spawn(self, crash: str | None = None) -> subprocess.Popen[bytes]:
        """trep-run in its own process, armed with a crash point if asked."""
        proc = spawn_trep("trep.runner", self.config_path, self.log_path, crash=crash or None)
        self.procs.append(proc)
        return proc

    def trepctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_trep("trep.trepctl", self.config_path, *args)

    # -- positions --------------------------------------------------------------------------

    def thl_tail(self) -> int:
        tail = tail_record(self.cfg.kafka.client(), self.cfg.thl_topic)
        return -1 if tail is None else tail.seqno

    def wait_extractor_online(self, timeout: float = 90) -> None:
        nodes = ComponentNodes(self.zk, self.cfg.zookeeper.root, self.name, "extractor")
        deadline = time.monotonic() + timeout
        while (nodes.status() or {}).get("state") != "ONLINE":
            assert time.monotonic() < deadline, f"extractor not ONLINE: {nodes.status()}"
            time.sleep(0.2)

    def status(self) -> dict[str, Any]:
        return component_status(self.zk, self.cfg, f"consumers/{GROUP}")

    def wait_state(self, state: str, timeout: float = 60) -> dict[str, Any]:
        return wait_state(self.status, state, timeout)

    def wait_applied(self, seqno: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            assert status.get("state") != "OFFLINE:ERROR", \
                f"group stopped: {status.get('pendingExceptionMessage')}"
            if status.get("appliedLastSeqno", -1) >= seqno:
                return
            assert time.monotonic() < deadline, f"seqno {seqno} not applied: {status}"
            time.sleep(0.2)

    def wait_source_applied(self, timeout: float | None = None) -> int:
        """Until the group applied everything the source committed so far; that seqno."""
        timeout = 180 + self.kind.startup_s if timeout is None else timeout
        marker = commit_marker(self.src, self.schema)
        deadline = time.monotonic() + timeout
        seqno = wait_marker(lambda: tail_record(self.cfg.kafka.client(), self.cfg.thl_topic),
                            marker, deadline)
        self.wait_applied(seqno, max(1.0, deadline - time.monotonic()))
        return seqno

    # -- comparing --------------------------------------------------------------------------

    def compare(self, *tables: Table) -> dict[str, int]:
        """Every table equal on the source and the target, row by row; the row counts."""
        counts = {}
        for table in tables or self.tables:
            src = [self.kind.normalize(table, tuple(r)) for r in self.src(
                f"SELECT {mysql_columns(table)} FROM {self.schema}.{mysql_name(table)}")]
            tgt = [tuple(r) for r in self.kind.rows(self.schema, table)]
            src.sort(key=_sort_key)
            tgt.sort(key=_sort_key)
            if tgt != src:
                raise AssertionError("\n".join((
                    _diff(table.name, src, tgt), self.thl_changes(table),
                    self.kind.explain(self.schema, table))))
            counts[table.name] = len(src)
        return counts

    def thl_changes(self, table: Table) -> str:
        """The THL's row changes of ``table``, one line per seqno: whether the extractor
        published what a failed comparison misses."""
        lines = [f"THL row changes of {table.name}:"]
        with ThlReader(self.cfg.kafka.client(), self.cfg.thl_topic) as reader:
            for record in reader.records(reader.watermarks()[0]):
                event = record.event
                if event is None:
                    continue
                for item in event.data:
                    if isinstance(item, RowChange) and item.schema == self.schema \
                            and item.table == table.name:
                        lines.append(f"  seqno {record.seqno}: {item.action.name} "
                                     f"{item.column_values or item.key_values}")
        return "\n".join(lines)

    def cleanup(self) -> None:
        tear_down(self.procs, self.stop, self._drop, self.zk)

    def _drop(self) -> None:
        self.src(f"DROP DATABASE IF EXISTS {self.schema}",
                 f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}")
        self.kind.drop(self.schema, self.name)


#: Types whose values order among themselves.
_SELF_ORDERED = (str, bytes)


def _sort_key(row: Sequence[Any]) -> tuple[tuple[bool, str, Any], ...]:
    """An order for rows of mixed types: text and bytes compare as themselves (the repr of a
    64 MiB value took seconds), anything else by its repr."""
    return tuple((v is not None, type(v).__name__, v) if type(v) in _SELF_ORDERED
                 else (v is not None, "", repr(v)) for v in row)


def _diff(name: str, src: list[Any], tgt: list[Any]) -> str:
    if len(src) != len(tgt):
        extra = [r for r in tgt if r not in src][:3]
        missing = [r for r in src if r not in tgt][:3]
        return f"{name}: {len(tgt)} rows, source {len(src)}; extra {extra}; missing {missing}"
    for a, b in zip(src, tgt, strict=True):
        if a != b:
            cols = [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            return f"{name}: row differs in columns {cols[:5]}"
    return f"{name}: equal?"


#: The test that takes the kind's server down (``Kind.down``) for a while.
TARGET_DOWN = "test_target_down_under_load"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests a kind does not run (``kinds.ONLY``); mark the servers each kind
    uses, and what its target-down test takes down (``sharing.gate``)."""
    dropped = []
    for item in items:
        if Path(str(item.fspath)).parent != Path(__file__).parent:
            continue  # the hook sees every test of the session
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("kind") if callspec is not None else None
        if kind is None:
            continue
        name = getattr(item, "originalname", item.name)
        cls = kind_class(kind)
        item.add_marker(pytest.mark.uses(*cls.servers))
        if name == TARGET_DOWN and cls.down is not None:
            item.add_marker(pytest.mark.exclusive(cls.down))
        if kind in ONLY and name not in ONLY[kind]:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    cls = kind_class(request.param)
    return cls({name: request.getfixturevalue(name) for name in cls.servers})


@pytest.fixture
def conformance(tmp_path: Path, kind: Kind, mariadb_source: MariaDB, kafka: Service,
                zookeeper: Service) -> Iterator[Conformance]:
    yield from cleaned(Conformance(tmp_path, kind, mariadb_source, kafka, zookeeper))
