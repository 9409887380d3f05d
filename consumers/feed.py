"""The THL as a consumer group reads it: seek by seqno, poll records, commit offsets.

The group exists so standard Kafka lag tools show where each applier is; the start position
never comes from Kafka's committed offset but from the target (see consumers.runtime).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from consumers.errors import ConsumerError, TerminalError, TransientError
from replicator.held_back import HeldBack
from thl_topics.client import (
    check_access,
    is_access_error,
    new_admin,
    quick_first_answer,
    settings_error,
    watched,
)
from thl_topics.closing import close_consumer
from thl_topics.errors import (
    KafkaAccessError,
    KafkaSettingsError,
    ThlError,
    ThlTopicMissing,
)
from thl_topics.reader import RecordJoiner, ThlReader, ThlRecord
from thl_topics.stall_watch import CHECK_EVERY_S, StallWatch

log = logging.getLogger(__name__)

#: Errors that mean "this is not the log we were reading": reconnect and handshake again.
_LOG_CHANGED = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                KafkaError._UNKNOWN_PARTITION, KafkaError.OFFSET_OUT_OF_RANGE,
                KafkaError._AUTO_OFFSET_RESET)


#: Seconds the first metadata request of a feed may take before the broker counts as away.
ACCESS_CHECK_S = 10.0
#: While blocks follow each other the group's Kafka offset is committed at most this often:
#: each commit cost the broker about 2 ms of CPU (0.43 s of broker CPU for the 200 blocks
#: of bench-compare's MariaDB run, more than serving the THL's records), and the offset
#: only feeds lag tools. The last one goes when the group is quiet or closes.
OFFSET_COMMIT_S = 1.0
#: Messages taken from librdkafka in one call while a backlog is there: each call lets go
#: of the GIL and takes it back, and a call per message cost the applying thread about 9%
#: of its time (py-spy, 2,000 events of 10 rows).
_TAKEN_AT_ONCE = 256


def _consumer_error(topic: str, exc: ThlError) -> ConsumerError:
    """A THL error as the runtime sees it: a refusal is terminal, anything else may pass."""
    if isinstance(exc, KafkaAccessError | KafkaSettingsError):
        return TerminalError(f"THL topic {topic}: {exc}")
    if isinstance(exc, ThlTopicMissing):
        return TransientError(str(exc))
    return TransientError(f"THL topic {topic}: {exc}")


class ThlFeed:
    """Partition 0 of the THL topic for one consumer group, ``read_committed``.

    Opening a feed makes one quick metadata request: a broker that refuses the credentials
    or the certificate is a ``TerminalError`` (OFFLINE:ERROR), one that does not answer a
    ``TransientError`` (retried).
    """

    def __init__(self, kafka: str | Mapping[str, Any], topic: str, group_id: str,
                 stall_check_s: float = CHECK_EVERY_S) -> None:
        self.topic = topic
        self.group_id = group_id
        #: The group's offsets, committed at most once per ``OFFSET_COMMIT_S``.
        self._offsets = HeldBack(self._send_offset, OFFSET_COMMIT_S)
        try:
            self._reader = ThlReader(kafka, topic)
        except ThlError as exc:
            raise _consumer_error(topic, exc) from exc
        #: Joins a chunked fragment's records (a row larger than a Kafka record) as they come.
        self._joiner = RecordJoiner(self._reader)
        #: Messages taken from librdkafka, not yet read.
        self._ready: deque[Message] = deque()
        #: The record read last (or the one the handshake checked): where a run must go on.
        self._last: ThlRecord | None = None
        #: Notices a consumer that stopped fetching (asks ``_reader`` past the position).
        self._stall = StallWatch(self._reader.first_offset, stall_check_s)
        settings, self._watch = watched(kafka)
        conf = {
            **quick_first_answer(settings),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # Never jump silently: a position Kafka does not have means the log changed.
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
            # Notice a deleted THL topic within seconds (default: 5 minutes), so the
            # consumer goes back through the handshake instead of reading a new log.
            "topic.metadata.refresh.interval.ms": 2000,
        }
        try:
            self._consumer = Consumer(conf)
        except KafkaException as exc:
            self._reader.close()
            raise _consumer_error(topic, settings_error(settings, exc)) from exc
        try:
            # After both clients exist: they connect meanwhile (a new client's first
            # connection takes 45-65 ms here), instead of one after the other later.
            check_access(kafka, ACCESS_CHECK_S)
        except ThlError as exc:
            self.close()
            raise _consumer_error(topic, exc) from exc

    def close(self) -> None:
        self.flush_offset()
        for closer in (partial(close_consumer, self._consumer, f"THL feed of {self.topic}"),
                       self._reader.close):
            try:
                closer()
            except (KafkaException, RuntimeError) as exc:
                log.debug("closing the THL feed: %s", exc)

    def record_at(self, seqno: int, fragno: int = 0) -> ThlRecord | None:
        """The first record at or after fragment ``fragno`` of ``seqno`` (None if the THL
        does not reach that far yet)."""
        try:
            offset = self._reader.offset_of(seqno, fragno)
            for rec in self._reader.records(offset):
                return rec
            return None
        except ThlError as exc:
            raise _consumer_error(self.topic, exc) from exc

    def first_seqno(self) -> int | None:
        """The seqno of the first record kept in the topic (None if empty)."""
        try:
            low, _ = self._reader.watermarks()
            sample = self._reader.sample(low)
        except ThlError as exc:
            raise _consumer_error(self.topic, exc) from exc
        return None if sample is None else sample[1]

    def seek(self, seqno: int) -> None:
        """Read from the first record of ``seqno`` (a search over offsets, ``offset_search``)."""
        last = self._last
        # Offsets grow with seqnos: past the handshake's record, only later ones are kept.
        after = last.offset + 1 if last is not None and last.seqno < seqno else 0
        try:
            offset = self._reader.offset_of(seqno, after=after)
        except ThlError as exc:
            raise _consumer_error(self.topic, exc) from exc
        try:
            # librdkafka asks for the metadata of a topic new to this consumer only at its
            # next once-a-second topic scan, so without this look-up first the fetch of an
            # assignment made more than ~0.1 s after the consumer started waited up to 1 s
            # (0.5-0.65 s in about a third of the group starts measured).
            self._consumer.list_topics(self.topic, timeout=ACCESS_CHECK_S)
        except KafkaException as exc:
            raise TransientError(f"THL topic {self.topic}: no metadata from Kafka: "
                                 f"{exc.args[0].str()}") from exc
        self._consumer.assign([TopicPartition(self.topic, 0, offset)])
        self._ready.clear()
        self._joiner.reset()
        self._stall.at(offset)

    def follows(self, rec: ThlRecord) -> None:
        """The next record read must come from the same log as ``rec`` (the handshake's)."""
        self._last = rec

    def poll(self, timeout: float) -> ThlRecord | None:
        """The next committed record, or None if none arrived within ``timeout`` (or only
        some chunks of a fragment published in chunks did)."""
        ready = self._ready
        if not ready:
            # What librdkafka has fetched already, in one call; only when there is nothing
            # does the feed wait, for the first message to come.
            ready.extend(self._consumer.consume(_TAKEN_AT_ONCE, 0))
            if not ready:
                msg = self._consumer.poll(timeout)
                if msg is not None:
                    ready.append(msg)
            # Both served the error callbacks: a broker that now refuses this client (a
            # rotated password, a revoked certificate) stops the group instead of a
            # silent loop.
            self._check_access()
            if not ready:
                self._check_stall()
                return None
        msg = ready.popleft()
        err = msg.error()
        if err is not None:
            if is_access_error(err):
                self._watch(err)
                self._check_access()
            if err.code() in _LOG_CHANGED or err.fatal():
                raise TransientError(f"THL topic {self.topic}: {err.str()}; "
                                     "reconnecting to check the log again")
            # Broker transport errors: librdkafka reconnects by itself.
            log.warning("THL topic %s: %s", self.topic, err.str())
            self._check_stall()
            return None
        offset = msg.offset()
        if offset is not None:
            self._stall.delivered(offset)
        rec = self._joiner.add(msg)
        if rec is not None and rec.event is not None:
            self._same_log(rec)
        return rec

    def _check_stall(self) -> None:
        stalled = self._stall.quiet()
        if stalled is not None:
            raise TransientError(f"THL topic {self.topic}: {stalled}; reconnecting")

    def _same_log(self, rec: ThlRecord) -> None:
        last, self._last = self._last, rec
        change = another_log(last, rec) if last is not None else None
        if change is not None:
            raise TransientError(f"THL topic {self.topic}: {change}; checking the log again",
                                 seqno=rec.seqno)

    def _check_access(self) -> None:
        try:
            self._watch.check()
        except KafkaAccessError as exc:
            raise _consumer_error(self.topic, exc) from exc

    def commit(self, next_offset: int) -> None:
        """Commit the group's offset (the record after the last one applied): at once if
        none went in the last ``OFFSET_COMMIT_S``, else with a later one, or when the group
        is quiet (``flush_offset``)."""
        self._offsets.offer(next_offset)

    def flush_offset(self) -> None:
        """Commit the offset ``commit`` holds back, if any."""
        self._offsets.flush()

    def _send_offset(self, offset: int) -> None:
        try:
            # Asynchronous: the offset only feeds lag tools, a synchronous round trip per
            # block cost ~8 ms of every 10-event block in the apply benchmark.
            self._consumer.commit(offsets=[TopicPartition(self.topic, 0, offset)],
                                  asynchronous=True)
        except KafkaException as exc:
            # The target holds the truth; a lost offset commit only makes lag tools lag.
            log.warning("group %s: offset commit failed: %s", self.group_id, exc)


def another_log(last: ThlRecord, rec: ThlRecord) -> str | None:
    """Why ``rec``, read right after ``last``, belongs to another log (None: it does not).

    librdkafka does not notice a topic deleted and recreated between two metadata
    refreshes: the fetch goes on at the same offset of the new topic, whose seqnos may even
    follow on. Every extractor start begins an epoch at its first seqno with a new run id,
    so inside one log the run id only changes where an epoch starts.
    """
    if rec.run_id == last.run_id or rec.event is None:
        return None
    if rec.fragno == 0 and rec.event.epoch == rec.seqno:
        return None
    return (f"seqno {rec.seqno} at offset {rec.offset} was written by extractor run "
            f"{rec.run_id or 'none'} (epoch {rec.event.epoch}), seqno {last.seqno} before it "
            f"by run {last.run_id or 'none'}, and no epoch starts there: the topic was "
            "deleted and recreated under this group")


def forget_group_offsets(kafka: str | Mapping[str, Any], group_id: str,
                         timeout: float = 30.0) -> None:
    """Delete the group's committed offsets, so lag tools stop showing a cleared position.

    The feed reads with ``assign()``, so the group never has members and Kafka lets it be
    deleted whenever its runtime is not streaming. A group Kafka does not know is fine.
    """
    try:
        admin, watch = new_admin(kafka)
    except ThlError as exc:
        raise TransientError(f"group {group_id}: could not delete its Kafka offsets: "
                             f"{exc}") from exc
    future = admin.delete_consumer_groups([group_id], request_timeout=timeout)[group_id]
    try:
        future.result(timeout)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return
        admin.poll(0)  # serve the error callbacks: say "refused" rather than "timed out"
        reason = watch.failure or exc
        raise TransientError(f"group {group_id}: could not delete its Kafka offsets: "
                             f"{reason}") from exc
