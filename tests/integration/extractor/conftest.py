"""Fixtures for extractor tests: a fresh service per test, run in a thread or a process."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from extractor.service import Extractor
from stack.service import Service
from stack.services.mariadb import MariaDB
from thl_topics.errors import ThlTopicMissing
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig

from ..harness import sql
from ..harness.cleanup import made
from ..harness.config import extractor_section, service_name, write_service
from ..harness.processes import kill_leftovers, spawn_trep
from ..harness.thl import tail_seqno


class ServiceUnderTest:
    """One replicator service (its own THL topic, tracking schema and znodes) and a schema."""

    def __init__(self, tmp_path: Path, source: MariaDB, kafka: Service,
                 zookeeper: Service, **extractor: Any) -> None:
        self.name = service_name("t")
        self.schema = f"src_{self.name}"
        self.source = source
        self.config_path = tmp_path / f"{self.name}.yml"
        self.cfg: ServiceConfig = write_service(
            self.config_path, self.name, bootstrap=f"127.0.0.1:{kafka.port}",
            zookeeper={"hosts": f"127.0.0.1:{zookeeper.port}"}, source_port=source.port,
            extractor=extractor_section(self.schema, extractor))
        self.sql(f"CREATE DATABASE {self.schema}",
                 f"CREATE TABLE {self.schema}.ready (n INT AUTO_INCREMENT PRIMARY KEY)")
        self.log_path = tmp_path / f"{self.name}.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def sql(self, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run statements on the source in one transaction; ``params`` bind the last one."""
        return sql.mysql(self.source.port, statements, params)

    def reader(self) -> ThlReader:
        return ThlReader(self.cfg.kafka.client(), self.cfg.thl_topic)

    def events(self) -> list[ThlEvent]:
        """Every event of the THL, decoded, in order (fails on an undecodable record)."""
        with self.reader() as reader:
            low, _ = reader.watermarks()
            out = []
            for rec in reader.records(low):
                assert rec.event is not None, rec.error
                out.append(rec.event)
            return out

    def wait_for_tail(self, seqno: int, timeout: float = 60) -> None:
        """Until the THL's last record is the complete transaction ``seqno`` or later."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.reader() as reader:
                    tail = reader.tail()
            except ThlTopicMissing:
                tail = None  # the extractor has not created it yet
            if tail is not None and tail.seqno >= seqno and tail.event is not None \
                    and tail.event.last_frag:
                return
            time.sleep(0.3)
        raise AssertionError(f"THL of {self.name} did not reach seqno {seqno} in {timeout} s")

    def tail_seqno(self) -> int:
        """Seqno of the THL's last record, -1 if there is none (or no topic yet)."""
        return tail_seqno(self.cfg.kafka.client(), self.cfg.thl_topic)

    def wait_streaming(self, after: int = -1, proc: subprocess.Popen[bytes] | None = None,
                       timeout: float = 90) -> int:
        """Commit marker rows until the THL shows an event past ``after``; its seqno.

        An extractor starts at the binlog's current end, so this is how a test knows that
        what it commits from now on will be extracted.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"extractor exited with {proc.returncode}: "
                                     f"{self.log_path.read_text()[-3000:]}")
            self.sql(f"INSERT INTO {self.schema}.ready VALUES ()")
            seqno = self.tail_seqno()
            if seqno > after:
                return seqno
            time.sleep(0.3)
        raise AssertionError(f"extractor of {self.name} produced nothing within {timeout} s")

    def wait_for_seqno(self, seqno: int, timeout: float = 60) -> list[ThlEvent]:
        """Every event, once the THL holds the complete transaction ``seqno``."""
        self.wait_for_tail(seqno, timeout)
        return self.events()

    def start_thread(self) -> tuple[Extractor, threading.Thread]:
        ex = Extractor(self.cfg, self.cfg.extractor)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                ex.run()
            except BaseException as exc:  # surfaced by stop_thread
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.errors = errors  # type: ignore[attr-defined]
        thread.start()
        return ex, thread

    def start_process(self, crash_at: str | None = None) -> subprocess.Popen[bytes]:
        """An extractor in its own process (for kill tests), logging to ``log_path``;
        ``crash_at`` arms a crash point (replicator.crashpoints)."""
        proc = spawn_trep("trep.extract", self.config_path, self.log_path, crash=crash_at)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        # A test that failed half-way may leave extractors running: never let one see its
        # schemas dropped under it (or outlive the test).
        kill_leftovers(self.procs)
        self.sql(f"DROP DATABASE IF EXISTS {self.schema}",
                 f"DROP DATABASE IF EXISTS {self.cfg.tracking_schema}")


@pytest.fixture
def make_service(tmp_path: Path, mariadb_source: MariaDB, kafka: Service,
                 zookeeper: Service) -> Iterator[Callable[..., ServiceUnderTest]]:
    def make(source: MariaDB | None = None, **extractor: Any) -> ServiceUnderTest:
        """``source``: another source than the session's (a test that purges its binlog, or
        one that must not see other tests' binlog traffic)."""
        return ServiceUnderTest(tmp_path, source or mariadb_source, kafka, zookeeper,
                                **extractor)

    yield from made(make)


@pytest.fixture
def running(make_service: Callable[..., ServiceUnderTest]) -> Iterator[ServiceUnderTest]:
    """A service whose extractor runs in a thread for the duration of the test."""
    svc = make_service()
    ex, thread = svc.start_thread()
    wait_leading(svc, ex, thread)
    yield svc
    ex.stop()
    thread.join(30)
    assert not thread.is_alive(), "extractor did not stop within 30 s"
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]


def wait_leading(svc: ServiceUnderTest, ex: Extractor, thread: threading.Thread) -> None:
    """Until the extractor's binlog start position is fixed."""
    deadline = time.monotonic() + 60
    while not ex.streaming.is_set():
        errors = thread.errors  # type: ignore[attr-defined]
        assert not errors, errors
        assert time.monotonic() < deadline, "extractor did not start streaming within 60 s"
        time.sleep(0.1)
