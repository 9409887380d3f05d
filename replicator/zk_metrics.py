"""Prometheus view of a ZooKeeper client's connection, read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from replicator.zk import ZkHealth


class ZkCollector(Collector):
    """Whether a component's ZooKeeper client is connected, and its disconnections."""

    def __init__(self, health: ZkHealth, service: str, component: str) -> None:
        self.health = health
        self.labels = [service, component]

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        connected = GaugeMetricFamily(
            "trep_zookeeper_connected", "1 while the component's ZooKeeper client is "
            "connected (replication goes on without it; mirrors and status wait)",
            labels=["service", "component"])
        connected.add_metric(self.labels, 1.0 if self.health.connected else 0.0)
        yield connected
        lost = CounterMetricFamily(
            "trep_zookeeper_disconnects", "Times the component lost its ZooKeeper connection",
            labels=["service", "component"])
        lost.add_metric(self.labels, float(self.health.disconnects))
        yield lost
        seconds = CounterMetricFamily(
            "trep_zookeeper_disconnected_seconds", "Time spent without a ZooKeeper connection",
            labels=["service", "component"])
        seconds.add_metric(self.labels, self.health.seconds_disconnected())
        yield seconds
