"""Change topic names and their creation.

A table's topic comes from the target's template (``{service}.{schema}.{table}`` by default,
or the first ``topics:`` pattern that matches ``schema.table``). Kafka topic names allow only
``[A-Za-z0-9._-]``, at most 249 characters: a table whose name the template cannot express is
a data error naming the table and the seqno, never a silently mangled name.

A table with a key gets a compacted topic (``cleanup.policy=compact``: the last value per key
stays, a tombstone removes the key); a table without one gets ``cleanup.policy=delete`` and
null keys, in ``keyless_partitions`` partitions (1 by default: one total order).
"""

from __future__ import annotations

import fnmatch
import re
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from consumers.changes.config import ChangesTarget
from consumers.errors import DataError, TransientError

_LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")


class TopicNames:
    """The topic of each table, from the target's templates."""

    def __init__(self, cfg: ChangesTarget, service: str) -> None:
        self.cfg = cfg
        self.service = service
        self._cache: dict[tuple[str, str], str] = {}

    def template(self, schema: str, table: str) -> str:
        """The template that applies to ``schema.table``."""
        name = f"{schema}.{table}"
        for pattern, template in self.cfg.topics.items():
            if fnmatch.fnmatchcase(name, pattern):
                return template
        return self.cfg.topic

    def topic(self, schema: str, table: str, seqno: int) -> str:
        """The table's topic; DataError if it is not a legal Kafka topic name."""
        found = self._cache.get((schema, table))
        if found is not None:
            return found
        template = self.template(schema, table)
        name = template.format(service=self.service, schema=schema, table=table)
        if not _LEGAL.match(name) or name in (".", ".."):
            raise DataError(
                f"table {schema}.{table} (seqno {seqno}): the topic template {template!r} "
                f"gives {name!r}, which is not a Kafka topic name (only A-Z a-z 0-9 . _ -, "
                f"at most 249 characters). Map the table to a topic with the target's "
                f"`topics: {{\"{schema}.{table}\": \"...\"}}`, filter it out of this group, "
                f"or skip the seqno.", seqno=seqno)
        self._cache[(schema, table)] = name
        return name


class TopicAdmin:
    """Creates change topics on first use (and the positions topic)."""

    def __init__(self, admin: AdminClient, cfg: ChangesTarget, target: str) -> None:
        self.admin = admin
        self.cfg = cfg
        self.target = target
        self._known: set[str] = set()

    def forget(self) -> None:
        """Check every topic again (after a reconnect: one may have been deleted)."""
        self._known.clear()

    def ensure(self, topic: str, *, keyed: bool, seqno: int = -1,
               configs: dict[str, str] | None = None, partitions: int | None = None) -> None:
        """Create ``topic`` unless it exists."""
        if topic in self._known:
            return
        timeout = self.cfg.transaction_timeout_s
        try:
            meta = self.admin.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise TransientError(f"{self.target}: looking up topic {topic}: {exc}",
                                 seqno=seqno) from exc
        if meta is None or meta.error is not None:
            settings = {"cleanup.policy": "compact" if keyed else "delete",
                        "max.message.bytes": str(self.cfg.max_message_bytes),
                        **self.cfg.topic_config, **(configs or {})}
            count = partitions or (self.cfg.partitions if keyed else self.cfg.keyless_partitions)
            future = self.admin.create_topics(
                [NewTopic(topic, num_partitions=count,
                          replication_factor=self.cfg.replication_factor, config=settings)],
                operation_timeout=timeout)[topic]
            try:
                future.result(timeout)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    # A topic still being deleted, a broker away: both pass.
                    raise TransientError(f"{self.target}: creating topic {topic}: {exc}",
                                         seqno=seqno) from exc
            self._wait_visible(topic, seqno)
        self._known.add(topic)

    def _wait_visible(self, topic: str, seqno: int) -> None:
        """Until the new topic's partitions have leaders (producing before fails)."""
        deadline = time.monotonic() + self.cfg.transaction_timeout_s
        while True:
            meta = self.admin.list_topics(topic, timeout=10).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions and all(
                    p.leader >= 0 for p in meta.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise TransientError(f"{self.target}: topic {topic} has no leader yet",
                                     seqno=seqno)
            time.sleep(0.1)
