"""The transactional THL producer: all fragments of a source transaction commit together.

``init_transactions`` with the service's ``transactional.id`` fences any older producer of
the same service, so a stale extractor that lost its lock can no longer write the THL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from thl_topics.chunks import chunk_bytes, split
from thl_topics.client import access_error, is_access_error, settings_error, watched
from thl_topics.codec import ThlCodec
from thl_topics.errors import ThlError, ThlUnavailable, is_passing
from thl_topics.event import ThlEvent
from thl_topics.records import HEADER_CHUNK, record_headers, record_key

log = logging.getLogger(__name__)

#: Another producer with our transactional id took over.
_FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


class ProducerFenced(ThlError):
    """Another extractor of this service took over (or the producer is fatal for a reason
    librdkafka no longer names): this one must stop writing."""


class ProducerFatal(ThlUnavailable):
    """The producer hit a fatal error that is not a fencing (an INVALID_TXN_STATE, say): it
    can never write again, but a new producer of the same transactional id can, once its
    ``init_transactions`` has aborted what this one left open; the extractor starts over
    from the THL tail, as after a crash."""


class ThlProducer:
    """Publishes THL events to partition 0 of the THL topic inside Kafka transactions."""

    def __init__(self, kafka: str | Mapping[str, Any], topic: str, transactional_id: str, *,
                 codec: ThlCodec | None = None, max_message_bytes: int = 8 << 20,
                 timeout: float = 60.0, run_id: str = "") -> None:
        self.topic = topic
        #: Stamped on every record (``records.HEADER_RUN``): the extractor run writing.
        self.run_id = run_id
        self.codec = codec or ThlCodec()
        self.timeout = timeout
        #: A larger encoded fragment is cut into records of this size (thl_topics.chunks).
        self.chunk_bytes = chunk_bytes(max_message_bytes)
        #: Fragments published in chunks by this producer (for tests and metrics).
        self.chunked = 0
        self._errors: list[KafkaError] = []
        #: Records produced, and delivery reports served, in the open transaction.
        self._produced = 0
        self._reported = 0
        settings, self._watch = watched(kafka)
        self._settings = settings
        conf = {
            **settings,
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.max.bytes": max_message_bytes,
            # A fragmented transaction of a million rows must fit in one Kafka transaction.
            "transaction.timeout.ms": 15 * 60 * 1000,
            # Bound the local queue: a huge transaction streams through, it is not buffered.
            "queue.buffering.max.kbytes": 64 * 1024,
        }
        try:
            self._producer = Producer(conf)
        except KafkaException as exc:
            raise settings_error(settings, exc) from exc
        self._call(self._producer.init_transactions, timeout)
        self._in_txn = False

    def _call(self, fn: object, *args: object) -> None:
        try:
            fn(*args)  # type: ignore[operator]
        except KafkaException as exc:
            raise self._error(exc.args[0]) from exc
        # Error callbacks run inside poll/flush/commit: a refused login is fatal here
        # rather than a retry loop behind an operation that merely times out.
        self._watch.check()

    def _error(self, err: KafkaError) -> ThlError:
        if not is_access_error(err) and self._watch.failure is None:
            try:
                self._producer.poll(0)  # serve the error callbacks: was it a refusal?
            except (KafkaException, RuntimeError):
                pass
        if self._watch.failure is not None:
            return self._watch.failure
        cause = self._watch.last
        if err.code() == KafkaError._FATAL and cause is not None and cause.fatal():
            err = cause  # "Local: Fatal error" names no cause; the error callback had it
        return producer_error(self.topic, err, self._settings)

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        self._reported += 1
        # Records purged by an abort report an error too; they were meant to vanish.
        if err is not None and err.code() not in (KafkaError._PURGE_QUEUE,
                                                  KafkaError._PURGE_INFLIGHT):
            self._errors.append(err)

    def publish(self, event: ThlEvent) -> None:
        """Send one event inside the open transaction (opened on demand)."""
        if not self._in_txn:
            self._call(self._producer.begin_transaction)
            self._in_txn = True
            self._produced = self._reported = 0
        value = self.codec.encode(event)
        if len(value) <= self.chunk_bytes:
            self._produce(record_key(event.seqno, event.fragno), value,
                          record_headers(event, self.codec.fingerprint_hex,
                                         run_id=self.run_id))
        else:
            # Larger than a record may be: consecutive chunks in this same transaction.
            count = -(-len(value) // self.chunk_bytes)
            for index, piece in enumerate(split(value, self.chunk_bytes)):
                last = index == count - 1
                headers = record_headers(event, self.codec.fingerprint_hex, marks=last,
                                         run_id=self.run_id)
                headers.append((HEADER_CHUNK, f"{index}/{count}".encode()))
                self._produce(record_key(event.seqno, event.fragno, (index, count)), piece,
                              headers)
            self.chunked += 1
            log.info("%s: seqno %d fragment %d is %d bytes: published in %d chunks of at "
                     "most %d", self.topic, event.seqno, event.fragno, len(value), count,
                     self.chunk_bytes)
        # poll() raises a fatal error (fenced, ...) as soon as librdkafka knows it.
        self._call(self._producer.poll, 0)

    def _produce(self, key: bytes, value: bytes,
                 headers: list[tuple[str, str | bytes | None]]) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value=value, key=key, partition=0,
                                       headers=headers, on_delivery=self._delivered)
                self._produced += 1
                return
            except BufferError:
                # The local queue is full: let deliveries drain, then try again.
                self._call(self._producer.poll, 0.1)
            except KafkaException as exc:
                raise self._error(exc.args[0]) from exc

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def commit(self) -> None:
        """Commit the open transaction; every record is durable when this returns."""
        if not self._in_txn:
            return
        self._call(self._producer.commit_transaction, self.timeout)
        self._in_txn = False
        if self._errors:
            errors, self._errors = self._errors, []
            fenced = [e for e in errors if e.code() in _FENCED]
            if fenced:
                raise self._error(fenced[0])
            kind = ThlUnavailable if all(is_passing(e) for e in errors) else ThlError
            raise kind(f"{self.topic}: delivery failed: {errors[0].str()}")

    def abort(self) -> None:
        """Abort the open transaction (nothing of it becomes visible to read_committed)."""
        if self._in_txn:
            # One timeout for both steps: with Kafka down, a stop waits no longer than before.
            deadline = time.monotonic() + self.timeout
            self._await_first_report(deadline)
            self._in_txn = False
            self._errors.clear()
            self._call(self._producer.abort_transaction,
                       max(1.0, deadline - time.monotonic()))
            try:
                self._producer.poll(0)  # serve the purged records' callbacks now
            except KafkaException as exc:
                log.debug("%s: after abort: %s", self.topic, exc)

    def _await_first_report(self, deadline: float) -> None:
        """Wait (bounded) until the coordinator surely knows the transaction is ongoing.

        librdkafka sends EndTxn once its AddPartitionsToTxn request is *sent*, not answered
        (confluentinc/librdkafka#4849): an abort right behind the transaction's first records
        can reach the coordinator first, which refuses it with INVALID_TXN_STATE, a fatal
        error that kills the producer. A record is acknowledged only once its partition is
        registered, so one delivery report (success or error) closes that window. If none
        comes in time (broker down), abort anyway: it fails or times out as it would have.
        """
        while self._produced and not self._reported and time.monotonic() < deadline:
            try:
                self._producer.poll(0.05)
            except KafkaException:
                return  # fatal already: abort_transaction reports it

    def close(self) -> None:
        self._producer.flush(self.timeout)


def producer_error(topic: str, err: KafkaError,
                   settings: Mapping[str, Any] | None = None) -> ThlError:
    """The THL error for a Kafka error of the transactional producer (``settings``: the
    client's, to name the broker and the user in a refusal)."""
    if is_access_error(err):
        return access_error(settings or {}, err)
    if err.code() in _FENCED:
        return ProducerFenced(f"{topic}: producer fenced by a newer extractor: {err.str()}")
    if err.code() == KafkaError._FATAL:
        # Once the producer is fatal (fenced, most often, reported by a background
        # delivery), produce() only says "Local: Fatal error": it can never write again.
        return ProducerFenced(f"{topic}: the transactional producer is in a fatal state "
                              f"(fenced by a newer extractor?): {err.str()}")
    if err.fatal():
        return ProducerFatal(f"{topic}: the transactional producer failed for good "
                             f"({err.str()}); starting over with a new one from the THL's "
                             "tail")
    kind = ThlUnavailable if is_passing(err) else ThlError
    return kind(f"{topic}: {err.str()}")
