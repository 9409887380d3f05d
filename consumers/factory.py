"""Build a consumer group's runtime from the service configuration."""

from __future__ import annotations

from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry

from consumers.applier import Applier
from consumers.metrics import ConsumerMetrics
from consumers.runtime import ConsumerRuntime, FeedSettings
from consumers.sql.applier import SqlApplier
from replicator.config import ConsumerConfig, ReplicatorConfig
from replicator.control import ComponentNodes
from replicator.zk import ServiceNodes


def build_applier(cfg: ReplicatorConfig, consumer: ConsumerConfig) -> Applier:
    """The applier of one consumer's target type."""
    if consumer.type == "sql":
        return SqlApplier(consumer, cfg.tracking_schema)
    raise ValueError(f"unknown consumer type {consumer.type!r}")


def build_runtime(cfg: ReplicatorConfig, name: str, zk: KazooClient,
                  registry: CollectorRegistry | None = None) -> ConsumerRuntime:
    """The runtime of consumer group ``name`` of ``cfg``."""
    consumer = cfg.consumers[name]
    feed = FeedSettings(cfg.kafka.bootstrap_servers, cfg.thl_topic, cfg.group_id(name),
                        cfg.service)
    metrics = ConsumerMetrics(registry, cfg.service, name) if registry is not None else None
    return ConsumerRuntime(
        name, consumer, feed, build_applier(cfg, consumer),
        ComponentNodes(zk, cfg.zookeeper.root, cfg.service, f"consumers/{name}"),
        ServiceNodes(zk, cfg.zookeeper.root, cfg.service), metrics)
