"""Build a consumer group's runtime: its applier (from the registry), feed and control nodes."""

from __future__ import annotations

from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry

from consumers.config import GroupConfig
from consumers.metrics import ConsumerMetrics
from consumers.registry import ApplierContext, build_applier
from consumers.runtime import ConsumerRuntime, FeedSettings
from replicator.config import ServiceSettings
from replicator.control import ComponentNodes
from replicator.zk import ServiceNodes, ZkHealth


def build_runtime(service: ServiceSettings, name: str, group: GroupConfig, zk: KazooClient,
                  registry: CollectorRegistry | None = None,
                  zk_health: ZkHealth | None = None) -> ConsumerRuntime:
    """The runtime of consumer group ``name`` of ``service``."""
    feed = FeedSettings(service.kafka.client(), service.thl_topic, service.group_id(name),
                        service.service, service.tracking_schema)
    metrics = ConsumerMetrics(registry, service.service, name) if registry is not None \
        else ConsumerMetrics.disabled()
    applier = build_applier(group.target, ApplierContext(service, name, metrics))
    return ConsumerRuntime(
        name, group, feed, applier,
        ComponentNodes(zk, service.zookeeper.root, service.service, f"consumers/{name}"),
        ServiceNodes(zk, service.zookeeper.root, service.service), metrics,
        zk_health=zk_health)
