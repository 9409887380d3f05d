"""Change topics' rows kept between cascade look-ups: each look-up reads only the records
committed since the one before.

A parent's delete or key change looks its child rows up in the child table's topic
(``ChangesApplier.rows_matching``). Folding the whole topic again for every block with such
a change costs what the topic holds, every time; so the fold is kept (``readback.TopicFold``)
with the offset each partition was read up to, and the next look-up reads on from there.
Kafka only appends past those offsets (compaction removes records but moves none), so the
kept fold is the one a reader of the whole topic makes, except in the cases that start it
again from the topic's beginning:

- the topic was deleted and created again (another topic id);
- records were deleted below an offset reached (the read fails: ``auto.offset.reset`` is
  ``error``, and the fold is read again from the beginning once);
- the table gained or lost its key (the fold's kind changes);
- any read that failed: a fold read half-way is not kept.

Records of the group's own open block are never folded: the read stops where the block
began writing to each partition (``readback.Span.own``); the caller lays the block's own
changes over the rows (``consumers.cascades``), and once the block commits the next read
takes them from the topic.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from consumers.changes.readback import ChangeReader, Span, TopicFold, Where, reading_consumer
from thl_topics.closing import close_consumer

log = logging.getLogger(__name__)


@dataclass
class _Followed:
    """One topic's fold, the offset each of its partitions was read up to, and the topic's
    id when it was read (None: the topic did not exist)."""

    fold: TopicFold
    reached: dict[Where, int] = field(default_factory=dict)
    topic_id: str | None = None


class TopicFollower:
    """The kept folds of the change topics a group's cascades read, by topic."""

    def __init__(self, kafka: Mapping[str, Any], registry: str | None, timeout: float) -> None:
        self.kafka = dict(kafka)
        self.timeout = timeout
        self._reader = ChangeReader(self.kafka, registry)
        # Kept between look-ups: a new client's connection and metadata cost ~60 ms, most of
        # a look-up that reads a few new records.
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._followed: dict[str, _Followed] = {}

    def rows(self, topic: str, keyed: bool, own: Mapping[Where, int]
             ) -> list[dict[str, Any]]:
        """The rows ``topic`` folds into, up to the group's own open block (``own``: where it
        began writing to each partition). Raises what the read raises (KafkaException,
        TimeoutError, RuntimeError), the kept fold then forgotten."""
        topic_id = self._topic_id(topic)
        kept = self._followed.pop(topic, None)
        if kept is not None and (kept.topic_id != topic_id or kept.fold.keyed != keyed):
            log.info("change topic %s: %s; reading it again from its beginning", topic,
                     "created again" if kept.topic_id != topic_id else "its key changed")
            kept = None
        if kept is not None:
            try:
                self._read_on(topic, kept, own)
            except RuntimeError as exc:
                # Records deleted below an offset reached, most likely: read it all again.
                log.info("change topic %s: reading on from %s failed (%s); reading it again "
                         "from its beginning", topic, kept.reached, exc)
                kept = None
        if kept is None:
            kept = _Followed(TopicFold(keyed), topic_id=topic_id)
            self._read_on(topic, kept, own)
        self._followed[topic] = kept
        return kept.fold.rows()

    def forget(self) -> None:
        """Every kept fold (a new session reads the topics again)."""
        self._followed.clear()

    def close(self) -> None:
        """The kept folds and clients."""
        self.forget()
        self._drop_consumer()
        self._admin = None

    def _read_on(self, topic: str, kept: _Followed, own: Mapping[Where, int]) -> None:
        span = Span(start=dict(kept.reached), own=own)
        if self._consumer is None:
            self._consumer = reading_consumer(self.kafka)
        try:
            for change in self._reader.records([topic], self.timeout, span=span,
                                               consumer=self._consumer, admin=self._admin_client()):
                kept.fold.add(change)
        except BaseException:
            # Whatever state a failed read left the consumer in, the next starts afresh.
            self._drop_consumer()
            raise
        kept.reached.update(span.reached)

    def _drop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                close_consumer(consumer, "change topics followed for cascades")
            except (KafkaException, RuntimeError) as exc:
                log.debug("closing the change topics' reader: %s", exc)

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.kafka)
        return self._admin

    def _topic_id(self, topic: str) -> str | None:
        """The topic's id (None: no such topic), which a topic created again changes."""
        future = self._admin_client().describe_topics(TopicCollection([topic]),
                                                      request_timeout=self.timeout)[topic]
        try:
            return str(future.result(self.timeout).topic_id)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return None
            raise
