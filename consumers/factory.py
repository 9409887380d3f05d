"""Build a consumer group's runtime: its applier (from the registry), feed and control nodes."""

from __future__ import annotations

from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry

from consumers.config import GroupConfig
from consumers.metrics import ConsumerMetrics
from consumers.registry import ApplierContext, build_applier
from consumers.runtime import ConsumerRuntime, FeedSettings
from replicator.config import ConfigError, ServiceSettings
from replicator.control import ComponentNodes
from replicator.zk import ServiceNodes, ZkHealth


def build_runtime(service: ServiceSettings, name: str, group: GroupConfig, zk: KazooClient,
                  registry: CollectorRegistry | None = None,
                  zk_health: ZkHealth | None = None) -> ConsumerRuntime:
    """The runtime of consumer group ``name`` of ``service`` (ConfigError if its target cannot
    do what the group asks, e.g. ``channels`` on a target without parallel apply)."""
    feed = FeedSettings(service.kafka.client(), service.thl_topic, service.group_id(name),
                        service.service, service.tracking_schema)
    metrics = ConsumerMetrics(registry, service.service, name) if registry is not None \
        else ConsumerMetrics.disabled()
    applier = build_applier(group.target, ApplierContext(service, name, metrics,
                                                         schema_changes=group.schema_changes))
    if group.channels > 1 and not applier.capabilities.channels:
        raise ConfigError(
            f"consumer group {name}: channels: {group.channels} needs a target that applies "
            f"in parallel (the SQL applier); {group.target.type} target {applier.target} "
            "does not. Set channels: 1 (the default).")
    # Parallel apply: one applier per channel, each with its own connection and position.
    more = [build_applier(group.target, ApplierContext(service, name, metrics, channel=c,
                                                       schema_changes=group.schema_changes))
            for c in range(1, group.channels)]
    return ConsumerRuntime(
        name, group, feed, applier,
        ComponentNodes(zk, service.zookeeper.root, service.service, f"consumers/{name}"),
        ServiceNodes(zk, service.zookeeper.root, service.service), metrics,
        zk_health=zk_health, channel_appliers=more)
