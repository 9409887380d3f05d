"""Reading the THL topic: seek by seqno (a search over offsets), then stream records in order."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from thl_topics import offset_search
from thl_topics.chunks import Joiner
from thl_topics.client import (
    ClientSettings,
    access_error,
    is_access_error,
    quick_first_answer,
    settings_error,
    watched,
)
from thl_topics.closing import close_consumer
from thl_topics.codec import ThlCodec
from thl_topics.errors import ThlDecodeError, ThlError, ThlTopicMissing, ThlUnavailable, is_passing
from thl_topics.event import ThlEvent
from thl_topics.records import parse_key, run_of
from thl_topics.stall_watch import CHECK_EVERY_S, StallWatch

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ThlRecord:
    """One record of the THL topic: where it is, and the event or why it did not decode.
    Nothing changes one once made (not ``frozen``: a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``, 3.4 against 0.9 us here, once a record on a
    group's applying thread)."""

    offset: int
    seqno: int
    fragno: int
    event: ThlEvent | None
    error: ThlDecodeError | None = None
    #: Encoded size of the record's value, bytes.
    size: int = 0
    #: A fragment published in chunks (thl_topics.chunks) starts at this offset and ends at
    #: ``offset``; -1 for a record of its own.
    first_offset: int = -1
    #: The extractor run that wrote it (``records.HEADER_RUN``; "" if unstamped).
    run_id: str = ""

    @property
    def start_offset(self) -> int:
        """The offset of the fragment's first record (its first chunk's, if chunked)."""
        return self.offset if self.first_offset < 0 else self.first_offset


class ThlReader:
    """A read-only, group-less view of one THL topic (partition 0, read_committed)."""

    def __init__(self, kafka: str | Mapping[str, Any], topic: str,
                 codec: ThlCodec | None = None, poll_timeout: float = 5.0) -> None:
        """``kafka``: bootstrap servers, or librdkafka settings (security included), such
        as ``KafkaConfig.client()``."""
        self.topic = topic
        self.codec = codec or ThlCodec()
        self.poll_timeout = poll_timeout
        #: As given: a second reader (``follow``'s stall probe) is made from them.
        self._kafka = kafka
        settings, self._watch = watched(kafka)
        # Kept for messages; a ClientSettings, so even a stray repr hides the secrets.
        self._conf = ClientSettings({
            **quick_first_answer(settings),
            # librdkafka wants a group id even for assign(); nothing is ever committed.
            "group.id": f"thl-reader-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # A probe landing on a transaction marker or an aborted record gets an empty
            # answer; do not let the broker sit on it for the default 500 ms.
            "fetch.wait.max.ms": 20,
        })
        try:
            self._consumer = Consumer(self._conf)
        except KafkaException as exc:
            raise settings_error(settings, exc) from exc
        #: Whether this client has looked the topic up (``_leader_known``).
        self._looked_up = False

    def _refused(self) -> None:
        """Raise the broker's refusal (credentials, certificate) if it reported one.

        Error callbacks are served by ``poll``; a stray record polled here is harmless
        because every read assigns its own start offset first.
        """
        try:
            self._consumer.poll(0)
        except (KafkaException, RuntimeError):
            pass  # closed or failing: the watch may still hold the answer
        self._watch.check()

    def _unavailable(self, message: str) -> ThlUnavailable:
        self._refused()
        return ThlUnavailable(message)

    def close(self) -> None:
        close_consumer(self._consumer, f"THL reader of {self.topic}")

    def __enter__(self) -> ThlReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def watermarks(self) -> tuple[int, int]:
        """(low, high) offsets: the first record kept and one past the last."""
        self._leader_known()
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, 0), timeout=self.poll_timeout, cached=False)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
                              KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise ThlTopicMissing(f"THL topic {self.topic} does not exist; start the "
                                      "service's extractor first (it creates the topic)") from exc
            if is_access_error(err):
                raise self._watch.failure or access_error(self._conf, err) from exc
            raise self._unavailable(f"{self.topic}: cannot read offsets from "
                                    f"{self._conf['bootstrap.servers']}: {err.str()}") from exc
        return int(low), int(high)

    def _leader_known(self) -> None:
        """Look the topic up once before the first offsets query of this client.

        A new client's first metadata answer replaces its bootstrap connection with one to
        the broker it names; a partition-leader query sent on the old connection meanwhile
        is dropped with it, and librdkafka asks again only at its next timed metadata
        refresh: the query then took about 0.7 s, in 1 of 10 to 1 of 30 group starts here.
        A plain topic look-up is repeated at once on the new connection."""
        if self._looked_up:
            return
        self._looked_up = True
        try:
            self._consumer.list_topics(self.topic, timeout=self.poll_timeout)
        except KafkaException as exc:
            # The offsets query that follows reports the broker's state in its own words.
            log.debug("THL reader of %s: topic look-up: %s", self.topic, exc)

    def _first_at(self, offset: int) -> Message | None:
        """The first committed record at or after ``offset``, or None at the end."""
        self._consumer.assign([TopicPartition(self.topic, 0, offset)])
        while True:
            msg = self._consumer.poll(self.poll_timeout)
            if msg is None:
                raise self._unavailable(self._silent())
            err = msg.error()
            if err is None:
                return msg
            if err.code() == KafkaError._PARTITION_EOF:
                return None
            raise self._read_error(err, f"read failed at offset {offset}")

    def _park(self) -> None:
        """Stop fetching until the next read. An assigned consumer fetches on by itself (up
        to 64 MiB of records ahead, or a request every ``fetch.wait.max.ms`` at the end of
        the topic) for a reader that may then sit idle for hours, as a feed's does."""
        try:
            self._consumer.unassign()
        except (KafkaException, RuntimeError) as exc:  # closed, or the broker is away
            log.debug("THL topic %s: unassigning the reader: %s", self.topic, exc)

    def offset_of(self, seqno: int, fragno: int = 0, after: int = 0) -> int:
        """The offset of the first record at or after fragment ``fragno`` of ``seqno`` (the
        high watermark if none); ``after``: an offset known to hold, or to follow, only
        records before it (a restart knows the one of its stored position: one probe then
        finds the next seqno instead of a search from the topic's start).

        A search over offsets (``offset_search``): the partition's offsets grow with seqno,
        and probing an offset returns the next record kept, so compaction gaps and
        transaction markers are stepped over.
        """
        probed: dict[int, Message | None] = {}

        def probe(offset: int) -> tuple[int, tuple[int, int]] | None:
            msg = probed[offset] = self._first_at(offset)
            return None if msg is None else (_offset(msg), parse_key(msg.key() or b""))

        low, high = self.watermarks()
        try:
            lo = offset_search.search((seqno, fragno), min(max(low, after), high), high,
                                      probe)
        finally:
            self._park()
        # lo may be a transaction marker or an aborted record: report the record itself
        # (the probe's, if it found one there; records committed since count too).
        msg = probed.get(lo)
        if msg is not None:
            return _offset(msg)
        end = self.watermarks()[1]
        msg = self._read_one(lo) if lo < end else None
        return end if msg is None else _offset(msg)

    def records(self, start_offset: int, end_offset: int | None = None) -> Iterator[ThlRecord]:
        """Records from ``start_offset`` up to ``end_offset`` (default: the current end).

        A record that does not decode is yielded with its error, not raised: a reader such as
        ``thl list`` reports it and goes on; an applier decides to stop. A fragment published
        in chunks is one record, yielded when its last chunk is read; one that starts before
        ``start_offset`` or ends at or after ``end_offset`` is not in the range.
        """
        joiner = RecordJoiner(self)
        for msg in self.raw(start_offset, end_offset):
            rec = joiner.add(msg)
            if rec is not None:
                yield rec

    def raw(self, start_offset: int, end_offset: int | None = None) -> Iterator[Message]:
        """Undecoded messages from ``start_offset`` up to ``end_offset`` (default: the end)."""
        end = self.watermarks()[1] if end_offset is None else end_offset
        if start_offset >= end:
            return
        self._consumer.assign([TopicPartition(self.topic, 0, start_offset)])
        try:
            while True:
                msg = self._consumer.poll(self.poll_timeout)
                if msg is None:
                    raise self._unavailable(self._silent())
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise self._read_error(err, "read failed")
                if _offset(msg) >= end:
                    return
                yield msg
                if _offset(msg) + 1 >= end:
                    return
        finally:
            self._park()

    def _silent(self) -> str:
        return (f"{self.topic}: no answer from Kafka at {self._conf['bootstrap.servers']} "
                f"within {self.poll_timeout} s")

    def _read_error(self, err: KafkaError, doing: str) -> ThlError:
        if is_access_error(err):
            return self._watch.failure or access_error(self._conf, err)
        self._watch.check()
        kind = ThlUnavailable if is_passing(err) else ThlError
        return kind(f"{self.topic}: {doing}: {err}")

    def offset_for_time(self, timestamp_ms: int) -> int:
        """The offset of the first record written at or after ``timestamp_ms`` (the high
        watermark if none)."""
        try:
            found = self._consumer.offsets_for_times(
                [TopicPartition(self.topic, 0, timestamp_ms)], timeout=self.poll_timeout)
        except KafkaException as exc:
            raise ThlUnavailable(f"{self.topic}: cannot look up offsets by time: "
                                 f"{exc.args[0].str()}") from exc
        offset = found[0].offset
        return self.watermarks()[1] if offset < 0 else int(offset)

    def follow(self, start_offset: int, stop: threading.Event, idle: float = 0.5,
               stall_check_s: float = CHECK_EVERY_S) -> Iterator[ThlRecord]:
        """Records from ``start_offset`` on, waiting for new ones, until ``stop`` is set.

        A consumer that stops fetching while the topic goes on (``stall_watch``: librdkafka
        after a broker restart) is replaced by a new one at the same offset."""
        self._consumer.assign([TopicPartition(self.topic, 0, start_offset)])
        joiner = RecordJoiner(self)
        probe: ThlReader | None = None

        def first_offset_at(offset: int) -> int | None:
            nonlocal probe
            if probe is None:  # made at the first look only: most follows never stall
                probe = ThlReader(self._kafka, self.topic, self.codec, self.poll_timeout)
            return probe.first_offset(offset)

        watch = StallWatch(first_offset_at, stall_check_s)
        watch.at(start_offset)
        try:
            while not stop.is_set():
                msg = self._consumer.poll(idle)
                if msg is None:
                    stalled = watch.quiet()
                    if stalled is not None and watch.next_offset is not None:
                        log.warning("THL topic %s: %s; reading on with a new consumer",
                                    self.topic, stalled)
                        self._renew(watch.next_offset)
                        watch.at(watch.next_offset)
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise self._read_error(err, "read failed")
                watch.delivered(_offset(msg))
                rec = joiner.add(msg)
                if rec is not None:
                    yield rec
        finally:
            if probe is not None:
                probe.close()

    def _renew(self, offset: int) -> None:
        """A new consumer in place of this reader's, assigned at ``offset``."""
        old, self._consumer = self._consumer, Consumer(self._conf)
        try:
            old.close()
        except (KafkaException, RuntimeError) as exc:  # it is stuck: closing may fail too
            log.debug("THL topic %s: closing the stuck consumer: %s", self.topic, exc)
        self._consumer.assign([TopicPartition(self.topic, 0, offset)])

    def first_offset(self, offset: int) -> int | None:
        """The offset of the first committed record at or after ``offset``, None past the
        end (a stall watch's probe)."""
        sample = self.sample(offset)
        return None if sample is None else sample[0]

    def sample(self, offset: int) -> tuple[int, int] | None:
        """(offset, seqno) of the first record at or after ``offset``, None past the end."""
        msg = self._read_one(offset)
        if msg is None:
            return None
        return _offset(msg), parse_key(msg.key() or b"")[0]

    def _read_one(self, offset: int) -> Message | None:
        """The first record at or after ``offset`` (None past the end), fetching no more."""
        try:
            return self._first_at(offset)
        finally:
            self._park()

    def to_record(self, msg: Message) -> ThlRecord:
        """Decode one Kafka message of the THL topic (a whole fragment: chunks are joined by
        ``RecordJoiner`` first)."""
        offset = _offset(msg)
        size = len(msg.value() or b"")
        try:
            seqno, fragno = parse_key(msg.key() or b"")
        except (ValueError, UnicodeDecodeError):
            err = ThlDecodeError(f"bad record key {msg.key()!r}", topic=self.topic,
                                 partition=0, offset=offset)
            return ThlRecord(offset, -1, -1, None, err, size)
        try:
            event = self.codec.decode(msg.value(), topic=self.topic, partition=0,
                                      offset=offset)
        except ThlDecodeError as exc:
            return ThlRecord(offset, seqno, fragno, None, exc, size)
        return ThlRecord(offset, seqno, fragno, event, None, size,
                         run_id=run_of(msg.headers()))

    def tail(self) -> ThlRecord | None:
        """The last record of the topic, or None if it is empty."""
        low, high = self.watermarks()
        # The last offsets may be transaction markers or aborted records: widen the window
        # backwards until a committed record shows up. The THL is written in transactions,
        # so the last offset is nearly always a commit marker: a window of two finds the
        # record in one read, where one of one offset cost a read of the marker alone
        # (each read ends with a fetch that waits fetch.wait.max.ms at the end).
        step = 2
        while high > low:
            start = max(low, high - step)
            last = None
            for rec in self.records(start, high):
                last = rec
            if last is not None:
                return last
            if start == low:
                return None
            step *= 4
        return None

class RecordJoiner:
    """Turns the messages of one read, in offset order, into records: a whole fragment's
    message at once, a chunked fragment's once its last chunk is in (None until then)."""

    def __init__(self, reader: ThlReader) -> None:
        self._reader = reader
        self._chunks = Joiner(reader.topic)

    def add(self, msg: Message) -> ThlRecord | None:
        key = msg.key() or b""
        offset = _offset(msg)
        try:
            if not is_chunk_key(key):
                self._chunks.whole()
                return self._reader.to_record(msg)
            joined = self._chunks.add(key, msg.value(), offset)
        except ThlDecodeError as exc:
            return ThlRecord(offset, -1, -1, None, exc, len(msg.value() or b""))
        except (ValueError, UnicodeDecodeError):
            err = ThlDecodeError(f"bad record key {key!r}", topic=self._reader.topic,
                                 partition=0, offset=offset)
            return ThlRecord(offset, -1, -1, None, err, len(msg.value() or b""))
        if joined is None:
            return None
        seqno, fragno = parse_key(key)
        try:
            event = self._reader.codec.decode(joined.value, topic=self._reader.topic,
                                              partition=0, offset=joined.first_offset)
        except ThlDecodeError as exc:
            return ThlRecord(offset, seqno, fragno, None, exc, len(joined.value),
                             joined.first_offset)
        return ThlRecord(offset, seqno, fragno, event, None, len(joined.value),
                         joined.first_offset, run_of(msg.headers()))

    def reset(self) -> None:
        """The next message starts a new read (after a seek)."""
        self._chunks = Joiner(self._reader.topic)


def is_chunk_key(key: bytes) -> bool:
    """A chunk's key is longer than a whole fragment's (``<seqno>.<fragno>``: 27 bytes)."""
    return len(key) > 27


def _offset(msg: Message) -> int:
    """A fetched record always has an offset; the stubs allow None for produced ones."""
    offset = msg.offset()
    if offset is None:
        raise ThlError("Kafka returned a record without an offset")
    return offset
