"""Creating the THL topic, and refusing an existing one whose settings would break the THL."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from thl_topics.errors import ThlError


class ThlTopicError(ThlError):
    """The THL topic cannot be used as it is."""


#: Compaction keeps one record per (seqno, fragno) key, so it never removes history; the
#: ``delete`` policy is there only so that ``thl purge`` may move the log start with Kafka's
#: DeleteRecords (refused on a compact-only topic): with infinite time and size retention it
#: never deletes anything by itself.
PURGEABLE = {"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True)
class ThlTopicSpec:
    """How a THL topic is made: one partition (one total order), compacted, never deleted."""

    name: str
    replication_factor: int = 1
    #: Largest record the broker takes; fragments are sized below it by the extractor.
    max_message_bytes: int = 8 * 1024 * 1024

    def configs(self) -> dict[str, str]:
        return PURGEABLE | {"max.message.bytes": str(self.max_message_bytes)}


def ensure_thl_topic(admin: AdminClient, spec: ThlTopicSpec, timeout: float = 30.0) -> None:
    """Create the topic if missing; verify it otherwise. Raises ThlTopicError if unusable."""
    meta = admin.list_topics(timeout=timeout)
    if spec.name not in meta.topics:
        futures = admin.create_topics([NewTopic(
            spec.name, num_partitions=1, replication_factor=spec.replication_factor,
            config=spec.configs())], operation_timeout=timeout)
        try:
            futures[spec.name].result(timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise ThlTopicError(f"cannot create THL topic {spec.name}: {exc}") from exc
    verify_thl_topic(admin, spec, timeout)


def verify_thl_topic(admin: AdminClient, spec: ThlTopicSpec, timeout: float = 30.0) -> None:
    """Refuse a topic that would break the THL's total order or lose history."""
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(spec.name, timeout=timeout).topics.get(spec.name)
        # A topic created a moment ago may not be in the broker's metadata yet.
        if (topic is not None and topic.error is None) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if topic is None or topic.error is not None:
        raise ThlTopicError(f"THL topic {spec.name} does not exist"
                            + (f": {topic.error}" if topic is not None else ""))
    if len(topic.partitions) != 1:
        raise ThlTopicError(
            f"THL topic {spec.name} has {len(topic.partitions)} partitions; the THL is one "
            "total order and needs exactly 1. Create a new topic (or name another one with "
            "thl_topic) and replay into it.")
    check_retention(spec.name, describe_configs(admin, spec.name, timeout))


def check_retention(topic: str, configs: dict[str, str]) -> None:
    """Refuse settings under which Kafka itself would delete THL history."""
    policy = set(configs.get("cleanup.policy", "").split(","))
    infinite = configs.get("retention.ms") == "-1" and configs.get("retention.bytes") == "-1"
    if "compact" not in policy or ("delete" in policy and not infinite):
        raise ThlTopicError(
            f"THL topic {topic} has cleanup.policy={configs.get('cleanup.policy')} "
            f"retention.ms={configs.get('retention.ms')} retention.bytes="
            f"{configs.get('retention.bytes')}: Kafka would delete history by itself. Use "
            "'compact' alone, or 'compact,delete' with retention.ms=-1 and retention.bytes=-1 "
            f"(kafka-configs --alter --entity-type topics --entity-name {topic} --add-config "
            "cleanup.policy=[compact,delete],retention.ms=-1,retention.bytes=-1); purge with "
            "'thl purge'.")


def describe_configs(admin: AdminClient, topic: str, timeout: float = 30.0) -> dict[str, str]:
    """The effective configuration of a topic."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    result = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
    return {name: entry.value for name, entry in result.items()}
