"""A warehouse group fed by THL events a test writes itself (no extractor, no source):
exact control of seqnos, column specs and values, on real Kafka, ZooKeeper and Spark."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from replicator.zk import connect
from stack.service import Service
from stack.services.kafka import Kafka
from stack.services.spark_connect import SparkConnect
from stack.settings import RUN_DIR
from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.producer import ThlProducer
from trep.config import ServiceConfig
from trep.runner import Runner

from ..harness.cleanup import cleaned
from ..harness.config import service_name, write_service
from ..harness.status import component_status, stopped, wait_state
from ..sparks import delta_rows

GROUP = "w"
BASE_TSTAMP = 1_700_000_000_000_000


def spec(index: int, name: str, kind: str, *, key: bool = False, length: int = 0,
         scale: int = 0, unsigned: bool = False) -> ColumnSpec:
    return ColumnSpec(index, name, kind, length=length, scale=scale, unsigned=unsigned,
                      primary_key=key, nullable=not key)


def insert(schema: str, table: str, specs: list[ColumnSpec],
           *rows: list[ThlValue]) -> RowChange:
    return RowChange(RowAction.INSERT, schema, table, specs, [], [list(r) for r in rows])


def delete(schema: str, table: str, specs: list[ColumnSpec],
           *rows: list[ThlValue]) -> RowChange:
    return RowChange(RowAction.DELETE, schema, table, [], specs, [], [list(r) for r in rows])


def update(schema: str, table: str, specs: list[ColumnSpec], before: list[ThlValue],
           after: list[ThlValue]) -> RowChange:
    return RowChange(RowAction.UPDATE, schema, table, specs, specs, [after], [before])


class CraftedThl:
    """A service whose THL topic this test writes, and one warehouse group reading it.

    The group is a client of the stack's Spark Connect server (warm, shared: no Spark JVM
    of its own per pytest worker); ``configure(spark=warehouse_spark(...))`` runs it on a
    Spark of its own (local mode, a cluster)."""

    def __init__(self, tmp_path: Path, kafka: Kafka, zookeeper: Service,
                 spark_connect: SparkConnect) -> None:
        self.name = service_name("w")
        self.location = RUN_DIR / "warehouse-tests" / self.name
        self.config_path = tmp_path / f"{self.name}.yml"
        self.bootstrap = kafka.bootstrap
        self.zk_hosts = f"127.0.0.1:{zookeeper.port}"
        self.spark = spark_connect.group_spark()
        self.configure()
        ensure_thl_topic(kafka.admin(), ThlTopicSpec(self.cfg.thl_topic))
        self.producer = ThlProducer(self.bootstrap, self.cfg.thl_topic, f"t-{self.name}")
        self.next_seqno = 0
        self.runner: Runner | None = None
        self.started = 0.0
        self.zk = connect(self.zk_hosts, 10)

    def configure(self, group: dict[str, Any] | None = None, **target: Any) -> None:
        """The service's configuration, ``target`` added to (or replacing) the group's
        target settings, ``group`` to the group's. No extractor: the source is never read."""
        target = {"spark": self.spark, **target}
        self.cfg: ServiceConfig = write_service(
            self.config_path, self.name, bootstrap=self.bootstrap,
            zookeeper={"hosts": self.zk_hosts}, source_port=1,
            consumers={GROUP: {"target": {"type": "warehouse",
                                          "location": str(self.location), **target},
                               "block_commit_ms": 300, **(group or {})}})

    def publish(self, *items: RowChange) -> int:
        """One THL event (a whole transaction) with these row changes; its seqno."""
        return self.publish_event(*items)

    def publish_event(self, *items: RowChange, metadata: dict[str, str] | None = None) -> int:
        """``publish`` with event metadata (provisioning marks)."""
        seqno = self.next_seqno
        self.producer.publish(ThlEvent(seqno=seqno, epoch=0, source_id="crafted",
                                       event_id=f"crafted:{seqno:010d};0", shard_id="s",
                                       tstamp=BASE_TSTAMP + seqno * 1000,
                                       metadata=dict(metadata or {}), data=list(items)))
        self.producer.commit()
        self.next_seqno += 1
        return seqno

    def start(self) -> None:
        self.started = time.time()
        self.runner = Runner(self.cfg, extractor=False, consumers=[GROUP])
        self.runner.start()

    def stop(self) -> None:
        if self.runner is not None:
            failures, self.runner = stopped(self.runner), None
            assert not failures, failures

    def status(self) -> dict[str, Any]:
        return component_status(self.zk, self.cfg, f"consumers/{GROUP}")

    def wait_state(self, state: str, timeout: float = 240) -> dict[str, Any]:
        """Until the group reports ``state`` (a status left by an earlier run of this
        process's group does not count)."""
        return wait_state(self.status, state, timeout, since=self.started)

    def wait_applied(self, seqno: int, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            assert status.get("state") != "OFFLINE:ERROR" or float(
                status.get("stateSince", 0)) < self.started, status
            if status.get("appliedLastSeqno", -1) >= seqno and status.get("state") == "ONLINE":
                return
            assert time.monotonic() < deadline, f"seqno {seqno} not applied: {status}"
            time.sleep(0.2)

    def path(self, schema: str, table: str) -> str:
        return f"file://{self.location}/{schema}/{table}"

    def rows(self, schema: str, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
        return sorted(delta_rows(self.path(schema, table), columns), key=repr)

    def stored_seqno(self) -> int | None:
        """The seqno of the position in ``trep_commit_seqno`` (task 0)."""
        (seqno,) = delta_rows(f"file://{self.location}/tungsten_{self.name}/trep_commit_seqno",
                              ["seqno"])
        return cast(int | None, seqno[0])

    def exists(self, schema: str, table: str) -> bool:
        return (self.location / schema / table / "_delta_log").is_dir()

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            self.producer.close()
            self.zk.stop()
            self.zk.close()
            shutil.rmtree(self.location, ignore_errors=True)


@pytest.fixture
def crafted(tmp_path: Path, kafka: Kafka, zookeeper: Service, spark: Service,
            spark_connect: SparkConnect) -> Iterator[CraftedThl]:
    yield from cleaned(CraftedThl(tmp_path, kafka, zookeeper, spark_connect))
