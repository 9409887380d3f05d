"""Topics made by tests directly through the admin client."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


def create_served(admin: AdminClient, topic: NewTopic, timeout: float = 30.0) -> None:
    """Create ``topic`` and wait until the broker's metadata has every partition with a
    leader: CreateTopics answers once the controller made it, and a DescribeConfigs or a
    produce sent at once may still find it unknown (it did in CI, on a slow machine), as
    the replicator's own topic code knows (``thl_topics.admin``, ``consumers.changes``)."""
    admin.create_topics([topic])[topic.topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic.topic, timeout=timeout).topics.get(topic.topic)
        if meta is not None and meta.error is None and \
                len(meta.partitions) == topic.num_partitions and \
                all(p.leader >= 0 for p in meta.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic.topic} not served {timeout} s after its creation")
        time.sleep(0.05)
