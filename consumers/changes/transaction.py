"""The Kafka transaction of a block: a transactional producer's records, each confirmed.

Nothing of a block commits unconfirmed: before the commit every record of the block must have
its delivery report, without an error and with an offset of its own (above the last one of
its partition). librdkafka reports a record as delivered without an offset when it never sent
it but took it as written because a later request to the partition succeeded (its "implicit
ack", sound only if the broker refused sequence gaps, which it does not for a producer's first
batch in a partition; seen after NOT_LEADER_OR_FOLLOWER on a topic created a moment before,
see topics.py). Such a block is aborted and applied again (TransientError).

A producer whose commit has an unknown outcome, or that is fenced or fatal, is dropped: the
applier's next session starts a new one (``ChangesApplier.connect``) and reads the position
back.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from consumers.changes.config import ChangesTarget
from consumers.changes.errors import FENCED, kafka_error
from consumers.errors import ConsumerError, TransientError

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.changes.applier")


class BlockTransaction:
    """The open block's Kafka transaction on one transactional producer, and the delivery
    reports of its records."""

    def __init__(self, cfg: ChangesTarget, target: str) -> None:
        self.cfg = cfg
        self.target = target
        self._producer: Producer | None = None
        self._in_txn = False
        self._errors: list[KafkaError] = []
        #: Delivery reports of the open block: records Kafka confirmed with an offset, the
        #: last offset confirmed per partition, and the records reported without a valid
        #: offset (how many, and the first few as text).
        self._acked = 0
        self._first_offset: dict[tuple[str, int], int] = {}
        self._last_offset: dict[tuple[str, int], int] = {}
        self._unconfirmed = 0
        self._unconfirmed_seen: list[str] = []
        #: Records produced in the open block (for tests and metrics).
        self.records = 0

    @property
    def producer(self) -> Producer:
        """The producer of this session (TransientError before the applier connects)."""
        if self._producer is None:
            raise TransientError(f"{self.target}: not connected")
        return self._producer

    def use(self, producer: Producer) -> None:
        """Blocks go through ``producer`` from now on (its transactions initialized)."""
        self._producer = producer

    @property
    def is_open(self) -> bool:
        """Whether a transaction is open (``begin`` done, no commit or rollback since)."""
        return self._in_txn

    def drop(self) -> None:
        """Forget the producer (the next session starts a new one)."""
        producer, self._producer = self._producer, None
        self._in_txn = False
        if producer is not None:
            try:
                producer.flush(0)
            except Exception as exc:  # a fatal producer may fail any call (_broken)
                log.debug("%s: dropping the producer: %s", self.target, exc)

    def begin(self) -> None:
        """Open the block's transaction."""
        self.call(self.producer.begin_transaction, doing="opening a Kafka transaction")
        self._in_txn = True
        self._errors.clear()
        self.records = 0
        self._acked = 0
        self._first_offset.clear()
        self._last_offset.clear()
        self._unconfirmed = 0
        self._unconfirmed_seen.clear()

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes]] | None, seqno: int,
                partition: int | None = None) -> None:
        """One record into the open transaction (waiting while the local queue is full)."""
        producer = self.producer
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._delivered}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                self.poll(0.1)  # the local queue is full: let deliveries drain
            except KafkaException as exc:
                raise kafka_error(exc.args[0], self.target, f"producing to {topic}",
                                  seqno) from exc
        self.records += 1

    def own_starts(self, topic: str, seqno: int) -> dict[tuple[str, int], int]:
        """Where the open block began writing to each partition of ``topic``: a read of the
        topic must stop there (``readback.Span``), since its end cannot pass the block's
        own open transaction. Waits for the delivery reports of the block's records first:
        an offset not known yet could lie anywhere."""
        if not self._in_txn or not self.records:
            return {}
        problem = self._undelivered(seqno)
        if problem is not None or self._errors:
            # The commit would refuse this block anyway (``_confirm``).
            raise TransientError(f"{self.target}: {problem or 'a record was not delivered'}; "
                                 "the block is applied again", seqno=seqno)
        return {where: first for where, first in self._first_offset.items()
                if where[0] == topic}

    def commit(self, seqno: int) -> None:
        """Commit the open transaction once every record of it is confirmed."""
        self._confirm(seqno)
        deadline = time.monotonic() + self.cfg.transaction_timeout_s
        while True:
            try:
                self.producer.commit_transaction(self.cfg.transaction_timeout_s)
                break
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue  # librdkafka: a retriable commit may simply be called again
                if err.txn_requires_abort():
                    first = f" (first: {self._errors[0].str()})" if self._errors else ""
                    self.rollback()
                    raise kafka_error(err, self.target, "committing the Kafka transaction "
                                      f"(aborted: nothing of the block was published){first}",
                                      seqno) from exc
                # Outcome unknown, or the producer is fenced/fatal: never reuse it; the next
                # session starts a new one and reads the position back.
                self.drop()
                raise kafka_error(err, self.target, "committing the Kafka transaction",
                                  seqno) from exc
        self._in_txn = False
        if self._errors:
            errors, self._errors = self._errors, []
            raise kafka_error(errors[0], self.target, "a record was not delivered", seqno)

    def _confirm(self, seqno: int) -> None:
        """Wait for the delivery report of every record of the open block; roll the block
        back (TransientError) unless each one came with an offset of its own. A delivery
        error needs no check here: librdkafka then fails the commit itself.

        The commit would publish whatever reached the partitions; a record that librdkafka
        reported delivered without sending it (module doc) would be lost for good, silently.
        """
        # A failed delivery gives no problem here: librdkafka refuses to commit the
        # transaction (an abortable error), and commit rolls back naming the first one.
        problem = self._undelivered(seqno)
        if problem is None:
            return
        log.warning("%s: block ending at seqno %d not committed: %s", self.target, seqno,
                    problem)
        self.rollback()
        raise TransientError(f"{self.target}: {problem}; the Kafka transaction was aborted "
                             "(nothing of the block was published) and the block is applied "
                             "again", seqno=seqno)

    def _undelivered(self, seqno: int) -> str | None:
        """Wait for the delivery report of every record of the open block; what keeps one
        from counting as written (None: each came with an offset of its own, or a delivery
        failed: ``self._errors``, which librdkafka's commit refuses by itself). A failed
        wait rolls the block back."""
        timeout = self.cfg.transaction_timeout_s
        try:
            left = self.producer.flush(timeout)
        except KafkaException as exc:
            self.rollback()
            raise kafka_error(exc.args[0], self.target, "waiting for the block's delivery "
                              "reports (aborted: nothing of the block was published)",
                              seqno) from exc
        except Exception as exc:
            raise self._broken(exc, "waiting for the block's delivery reports", seqno) from exc
        if self._errors:
            return None
        if left:
            return f"{left} record(s) still without a delivery report after {timeout:g} s"
        if self._unconfirmed:
            return (f"{self._unconfirmed} record(s) reported delivered without an offset of "
                    f"their own (first: {', '.join(self._unconfirmed_seen)}): librdkafka "
                    "took them for written because a later request to their partition "
                    "succeeded, but they never reached it")
        if self._acked != self.records:
            return (f"{self.records} record(s) produced, {self._acked} confirmed by a "
                    "delivery report")
        return None

    def rollback(self) -> None:
        """Abort the open transaction, if any (a producer that cannot abort is dropped)."""
        if not self._in_txn:
            return
        self._in_txn = False
        self._errors.clear()
        producer = self._producer
        if producer is None:
            return
        try:
            producer.abort_transaction(self.cfg.transaction_timeout_s)
            producer.poll(0)
        except Exception as exc:  # KafkaException, or a fatal one as SystemError (_broken)
            # A producer that cannot abort is thrown away; the next one aborts for it.
            log.warning("%s: abort failed (%s); starting a new producer next time",
                        self.target, exc)
            self.drop()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            # Records purged by our abort (rollback leaves the block first) report an error
            # too; they were meant to vanish. A purge inside an open block is a failure.
            if self._in_txn or err.code() not in (KafkaError._PURGE_QUEUE,
                                                  KafkaError._PURGE_INFLIGHT):
                self._errors.append(err)
            return
        if not self._in_txn:
            return
        where = (msg.topic(), msg.partition())
        offset = msg.offset()
        last = self._last_offset.get(where, -1)
        if offset is None or offset < 0 or offset <= last:
            # An "implicit ack" (no offset), or an offset already taken in this block.
            self._unconfirmed += 1
            if len(self._unconfirmed_seen) < 3:
                self._unconfirmed_seen.append(f"{where[0]} [{where[1]}] offset {offset}")
            return
        self._last_offset[where] = offset
        self._first_offset.setdefault(where, offset)
        self._acked += 1

    def poll(self, timeout: float = 0) -> None:
        """Serve delivery reports; a fenced or fatal producer shows here first."""
        try:
            self.producer.poll(timeout)
        except KafkaException as exc:
            raise kafka_error(exc.args[0], self.target, "producing") from exc
        except Exception as exc:
            raise self._broken(exc, "producing") from exc
        fenced = [e for e in self._errors if e.code() in FENCED or e.fatal()]
        if fenced:
            raise kafka_error(fenced[0], self.target, "producing")

    def _broken(self, exc: Exception, doing: str, seqno: int = -1) -> ConsumerError:
        """The error to raise for a producer call that failed outside KafkaException.

        confluent-kafka lets a fatal error (a fenced producer) that arrives while it runs a
        delivery callback out of ``flush``/``poll`` as a SystemError, with the KafkaException
        as its cause or with none at all. The block is aborted and the producer dropped (the
        next session starts a new one); the abort's own error says what happened when the
        exception does not (a fenced producer: PositionConflict).
        """
        found = _kafka_cause(exc)
        producer, self._in_txn = self._producer, False
        self._errors.clear()
        if producer is not None:
            try:
                producer.abort_transaction(self.cfg.transaction_timeout_s)
            except KafkaException as abort_exc:
                found = found or abort_exc
            except Exception as abort_exc:
                log.debug("%s: abort after %s: %s", self.target, exc, abort_exc)
        self.drop()
        where = f"{doing} (aborted: nothing of the block was published)"
        if found is not None:
            return kafka_error(found.args[0], self.target, where, seqno)
        return TransientError(f"{self.target}: {where}: {exc!r}", seqno=seqno)

    def call(self, fn: Any, *, doing: str, seqno: int = -1) -> None:
        """``fn()``, a call of the producer; its KafkaException as the consumer's error."""
        try:
            fn()
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.txn_requires_abort():
                self.rollback()
            raise kafka_error(err, self.target, doing, seqno) from exc


def _kafka_cause(exc: BaseException) -> KafkaException | None:
    """The KafkaException behind ``exc``, if Python kept it (BlockTransaction._broken)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
