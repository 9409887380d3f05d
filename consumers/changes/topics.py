"""Change topics' creation (their names: ``naming.py``).

A table with a key gets a compacted topic (``cleanup.policy=compact``: the last value per key
stays, a tombstone removes the key); a table without one gets ``cleanup.policy=delete`` and
null keys, in ``keyless_partitions`` partitions (1 by default: one total order).

A topic is handed to the producer only once the broker leads every one of its partitions.
The metadata of a new topic names its leader some milliseconds before that broker serves the
partition: a produce request sent then fails with NOT_LEADER_OR_FOLLOWER, and when the
transactional producer had a second request to the partition in flight, which the broker
accepted as the producer's first batch there, librdkafka took the failed records for written
("implicitly acked") and never sent them again: a committed transaction without them. So
the wait ends when a ListOffsets request, which only the serving leader answers, succeeds for
every partition.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import TimeoutError as FutureTimeout

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from consumers.changes.config import ChangesTarget
from consumers.errors import TransientError

log = logging.getLogger(__name__)

#: What a partition's ListOffsets answers while its leader is not serving it yet.
_NOT_SERVED_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REPLICA_NOT_AVAILABLE,
                   KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.FENCED_LEADER_EPOCH,
                   KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE)


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
        """Create ``topic`` unless it exists; return once its leaders serve it (module doc)."""
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
        # Also a topic found existing: another process may have created it a moment ago.
        self._wait_served(topic, seqno)
        self._known.add(topic)

    def _wait_served(self, topic: str, seqno: int) -> None:
        """Until every partition of ``topic`` has a leader in the metadata and that leader
        serves it (answers ListOffsets): producing earlier loses records (module doc)."""
        deadline = time.monotonic() + self.cfg.transaction_timeout_s
        pause = 0.005
        while True:
            waiting = self._not_served(topic, seqno)
            if waiting is None:
                return
            if time.monotonic() > deadline:
                raise TransientError(f"{self.target}: topic {topic} is not served yet: "
                                     f"{waiting}", seqno=seqno)
            time.sleep(pause)
            pause = min(0.1, pause * 2)

    def _not_served(self, topic: str, seqno: int) -> str | None:
        """Why ``topic`` cannot take records yet (None: every partition is served)."""
        try:
            meta = self.admin.list_topics(topic, timeout=10).topics.get(topic)
        except KafkaException as exc:
            return f"looking it up: {exc}"
        if meta is None or meta.error is not None or not meta.partitions:
            return "not in the metadata yet"
        leaderless = sorted(p for p, m in meta.partitions.items() if m.leader < 0)
        if leaderless:
            return f"partition(s) {leaderless} without a leader"
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        try:
            futures = self.admin.list_offsets(
                {TopicPartition(topic, p): latest for p in meta.partitions},
                request_timeout=10)
        except KafkaException as exc:
            return f"asking for its offsets: {exc}"
        for tp, future in futures.items():
            try:
                future.result(15)
            except FutureTimeout:
                return f"partition {tp.partition}: no answer to ListOffsets"
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.code() in _NOT_SERVED_YET or err.retriable():
                    return f"partition {tp.partition}: {err.str()}"
                # An answer that no waiting changes (a broker without ListOffsets v1, no
                # DESCRIBE right): go on; the block's delivery reports are checked before it
                # commits (transaction.py), which still catches a record lost this way.
                log.warning("%s: cannot tell whether the leaders of topic %s serve it yet "
                            "(ListOffsets: %s); producing to it anyway (seqno %d)",
                            self.target, topic, err.str(), seqno)
                return None
        return None
