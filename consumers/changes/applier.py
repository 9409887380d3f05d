"""The change-topic applier: the THL fanned out into one Kafka topic per source table.

Every row change becomes one record on its table's topic (a key change two: a delete of the
old key and a create of the new one), followed by a tombstone after each delete. A block is
one Kafka transaction of a transactional producer whose ``transactional.id`` belongs to the
service and group: the block's records, the group's position (a record in the group's
compacted positions topic) and the group's THL offset (``send_offsets_to_transaction``) commit
together or not at all (atomicity: transactional). Readers with ``isolation.level=
read_committed`` therefore see every row change exactly once per seqno, in seqno order per
key, and a crash anywhere in a block leaves nothing of it visible.

Nothing of a block commits unconfirmed: before the commit every record of the block must have
its delivery report, without an error and with an offset of its own (above the last one of
its partition). librdkafka reports a record as delivered without an offset when it never sent
it but took it as written because a later request to the partition succeeded (its "implicit
ack", sound only if the broker refused sequence gaps, which it does not for a producer's first
batch in a partition; seen after NOT_LEADER_OR_FOLLOWER on a topic created a moment before,
see topics.py). Such a block is aborted and applied again (TransientError).

Failure and resume: ``connect`` starts a new producer and ``init_transactions`` fences any
older process of the group (its commits then fail: PositionConflict) and aborts the
transaction it left open; ``position`` then reads the positions topic back, which is exactly
the last committed block. A commit whose outcome is unknown (timed out) throws the producer
away: the next session reads the truth from the positions topic. ``online --from-seqno N``
republishes from N: records carry the seqno (``source.seqno`` / ``_seqno`` and the
``tungsten.seqno`` header), so readers drop what they already have.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.changes.config import ChangesTarget
from consumers.changes.envelopes import (
    DebeziumEnvelope,
    Envelope,
    Op,
    Origin,
    Shape,
    ShapeError,
    TungstenEnvelope,
    origin_parts,
)
from consumers.changes.errors import FENCED, kafka_error
from consumers.changes.positions import encode_position, read_position
from consumers.changes.serde import AvroSerde, JsonSerde, Serde, Writer
from consumers.changes.topics import TopicAdmin, TopicNames
from consumers.changes.types import Value
from consumers.check import CheckRange, CheckResult
from consumers.errors import ConsumerError, DataError, PositionConflict, TransientError
from consumers.heartbeat import Heartbeat
from consumers.oversize import largest, mib, too_large
from consumers.position import Position
from consumers.provisioning import chunk_of
from consumers.registry import ApplierContext
from replicator import crashpoints
from thl_topics.checksum import thl_value_of
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

log = logging.getLogger(__name__)

#: Headers of every record: the seqno, epoch and the row's place in its transaction.
SEQNO_HEADER = "tungsten.seqno"
EPOCH_HEADER = "tungsten.epoch"
ROW_HEADER = "tungsten.row"


@dataclass(frozen=True)
class _Table:
    """A table layout ready to write: its shape and the writers of its keys and values."""

    shape: Shape
    key: Writer | None
    value: Writer
    keyed: bool


def _layout(schema: str, table: str, specs: Sequence[ColumnSpec]) -> tuple[Any, ...]:
    return (schema, table, *((s.name, s.type, s.length, s.scale, s.unsigned, s.primary_key,
                              s.blob, s.charset is None, tuple(s.enum_values)) for s in specs))


class ChangesApplier:
    """Writes one consumer group's change topics through one transactional producer."""

    def __init__(self, cfg: ChangesTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.service = ctx.service.service
        self.group = ctx.group
        servers = cfg.bootstrap_servers or ctx.service.kafka.bootstrap_servers
        self.kafka: dict[str, Any] = ({"bootstrap.servers": servers} if cfg.bootstrap_servers
                                      else ctx.service.kafka.client())
        self.target = f"change topics on {servers} ({cfg.envelope} envelope, {cfg.format})"
        self.positions_topic = cfg.positions_topic or \
            f"{ctx.service.tracking_schema}.{ctx.group}.positions"
        #: One producer identity per service and group: a second process is fenced.
        self.transactional_id = f"tungsten-{self.service}-{ctx.group}-changes"
        self.thl_topic = ctx.service.thl_topic
        self.group_id = ctx.service.group_id(ctx.group)
        self.capabilities = Capabilities(
            atomicity=Atomicity.TRANSACTIONAL, statements=StatementPolicy.SKIP,
            keyless_tables=True, block=BlockLimits(events=100, ms=500), owns_offsets=True,
            checks=True)
        self.envelope: Envelope = (DebeziumEnvelope(cfg.server_name or self.service)
                                   if cfg.envelope == "debezium" else TungstenEnvelope())
        self.serde: Serde = (AvroSerde(self.envelope, cfg.schema_registry)
                             if cfg.format == "avro" and cfg.schema_registry is not None
                             else JsonSerde(self.envelope, cfg.json_schemas))
        self.names = TopicNames(cfg, self.service)
        #: Updates of keyless rows are a delete and a create (Tungsten's envelope).
        self._split = cfg.envelope == "tungsten"
        self._topics: TopicAdmin | None = None
        self._producer: Producer | None = None
        self._meta_consumer: Consumer | None = None
        self._group_metadata: Any = None
        self._tables: dict[tuple[Any, ...], _Table] = {}
        self._in_txn = False
        self._errors: list[KafkaError] = []
        #: Delivery reports of the open block: records Kafka confirmed with an offset, the
        #: last offset confirmed per partition, and the records reported without a valid
        #: offset (how many, and the first few as text).
        self._acked = 0
        self._last_offset: dict[tuple[str, int], int] = {}
        self._unconfirmed = 0
        self._unconfirmed_seen: list[str] = []
        self._expected: int | None = None
        self._beat: Heartbeat | None = None
        # Per seqno: the transaction id, the row count so far, per table.
        self._txn_id = ""
        self._total = 0
        self._per_table: dict[tuple[str, str], int] = {}
        #: Records produced in the open block (for tests and metrics).
        self.records = 0

    # -- connection -------------------------------------------------------------------------

    @property
    def _prod(self) -> Producer:
        if self._producer is None:
            raise TransientError(f"{self.target}: not connected")
        return self._producer

    def connect(self) -> None:
        """A new transactional producer (fencing any older one of the group)."""
        self._drop_producer()
        if self._topics is None:
            self._topics = TopicAdmin(AdminClient(self.kafka), self.cfg, self.target)
        self._topics.forget()
        self._topics.ensure(self.positions_topic, keyed=True, partitions=1,
                            configs={"cleanup.policy": "compact"})
        producer = Producer({
            **self.kafka,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            # Java's default partitioner for keyed records: Java consumers and Kafka
            # Streams jobs agree on which partition holds a key.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "compression.type": "lz4",
            "message.max.bytes": self.cfg.max_message_bytes,
            # One seqno is one block at least: a million-row transaction is one Kafka
            # transaction (the broker's transaction.max.timeout.ms is 15 minutes).
            "transaction.timeout.ms": 15 * 60 * 1000,
            # Room for a record of max_message_bytes: a larger one would wait forever.
            "queue.buffering.max.kbytes": max(64 * 1024, 2 * self.cfg.max_message_bytes // 1024),
            **self.cfg.producer,
        })
        try:
            producer.init_transactions(self.cfg.transaction_timeout_s)
        except KafkaException as exc:
            raise kafka_error(exc.args[0], self.target, "starting the transactional "
                              f"producer {self.transactional_id}") from exc
        self._producer = producer
        if self._meta_consumer is None:
            # Only for the group metadata that send_offsets_to_transaction wants; it never
            # subscribes or fetches.
            self._meta_consumer = Consumer({**self.kafka, "group.id": self.group_id,
                                            "enable.auto.commit": False})
            self._group_metadata = self._meta_consumer.consumer_group_metadata()

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        self._in_txn = False
        if producer is not None:
            try:
                producer.flush(0)
            except Exception as exc:  # a fatal producer may fail any call (_broken)
                log.debug("%s: dropping the producer: %s", self.target, exc)

    def position(self) -> Position | None:
        found = read_position(self.kafka, self.positions_topic, self.group, self.target,
                              self.cfg.transaction_timeout_s)
        self._expected = found.seqno if found else None
        return found

    def reset(self) -> None:
        """Forget the position: a tombstone of the group's key, in its own transaction."""
        self._transaction(lambda p: p.produce(self.positions_topic, key=self.group.encode(),
                                              value=None, partition=0))
        self._expected = None

    def close(self) -> None:
        self.rollback()
        self._drop_producer()
        if self._meta_consumer is not None:
            try:
                self._meta_consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.debug("%s: closing: %s", self.target, exc)
            self._meta_consumer = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self._call(self._prod.begin_transaction, doing="opening a Kafka transaction")
        self._in_txn = True
        self._errors.clear()
        self.records = 0
        self._acked = 0
        self._last_offset.clear()
        self._unconfirmed = 0
        self._unconfirmed_seen.clear()

    def apply(self, event: ThlEvent) -> None:
        if not self._in_txn:
            raise RuntimeError("no open block: begin() first")
        if event.fragno == 0:
            self._txn_id = event.metadata.get("gtid") or event.event_id
            self._total = 0
            self._per_table = {}
        file, pos, thread = origin_parts(event.event_id)
        try:
            server_id = int(event.metadata.get("mysql_server_id", "0"))
        except ValueError:
            server_id = 0
        origin = Origin(seqno=event.seqno, epoch=event.epoch, event_id=event.event_id,
                        source_id=event.source_id, tstamp=event.tstamp, server_id=server_id,
                        gtid=event.metadata.get("gtid"), file=file, pos=pos, thread=thread,
                        txn_id=self._txn_id)
        now_us = time.time_ns() // 1000
        # A provisioned chunk's rows are reads of existing rows: Debezium's snapshot op.
        chunk = chunk_of(event)
        create: Op = "r" if chunk is not None else "c"
        # A keyless table provisioned again: its topic cannot replace rows by key, so its
        # first chunk starts with a truncate record that tells readers to forget the rest.
        truncate = (chunk.schema, chunk.table) if chunk is not None and chunk.first else None
        for item in event.data:
            if isinstance(item, RowChange):
                if truncate == (item.schema, item.table):
                    table = self._table(item, item.column_specs or item.key_specs,
                                        event.seqno)
                    if not table.keyed:
                        self._truncate(table, origin, now_us)
                    truncate = None
                self._rows(item, origin, now_us, create)
        if truncate is not None:
            # An empty table: the last layout this process wrote it with, if any.
            known = [t for layout, t in self._tables.items() if layout[:2] == truncate]
            if known and not known[-1].keyed:
                self._truncate(known[-1], origin, now_us)
            elif not known:
                log.warning("%s: %s.%s is provisioned empty and no layout of its topic is "
                            "known to this process: no truncate record was sent (a keyless "
                            "topic's readers keep its earlier rows)", self.target, *truncate)
        self._poll()

    def _truncate(self, table: _Table, origin: Origin, now_us: int) -> None:
        """A truncate record (Debezium op ``t``, Tungsten ``_optype: TRUNCATE``) in every
        partition of a keyless table's topic."""
        shape = table.shape
        try:
            meta = self._prod.list_topics(shape.topic, timeout=30)
        except KafkaException as exc:
            raise kafka_error(exc.args[0], self.target, f"describing {shape.topic}",
                              origin.seqno) from exc
        partitions = sorted(meta.topics[shape.topic].partitions)
        datum = self.envelope.value(shape, "t", None, None, origin, 0, self._total, 0, now_us)
        value = table.value(datum)
        headers = self._headers(origin)
        for partition in partitions:
            self._produce(shape.topic, None, value, headers, origin.seqno, partition)
        self._total += 1
        log.info("%s: %s provisioned again: truncate record in %d partition(s) at seqno %d",
                 self.target, shape.topic, len(partitions), origin.seqno)

    def heartbeat(self, beat: Heartbeat) -> None:
        # Kept with the position record of this block: where the group's lag is read.
        self._beat = beat

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The rows a data team would fold the table's topic into, in a checked key range,
        as THL values (consumers.check). Reads the whole topic: a check of change topics
        costs what a full materialization costs."""
        from consumers.changes.reader import ChangeReader, materialize

        topic = self.names.topic(check.schema, check.table, -1)
        registry = self.cfg.schema_registry.url if self.cfg.schema_registry else None
        try:
            # A topic that does not exist (yet) reads as no records: no rows.
            reader = ChangeReader(self.kafka, registry)
            rows = materialize(reader.records([topic], self.cfg.transaction_timeout_s),
                               bool(check.key))
        except (KafkaException, TimeoutError, RuntimeError) as exc:
            # Kafka away, or a transaction of another producer still open in the topic:
            # the check block rolls back and the check runs again.
            raise TransientError(f"{self.target}: reading {topic} back for a consistency "
                                 f"check: {exc}") from exc
        names = [c.name for c in check.specs]
        for row in rows:
            values = [thl_value_of(spec, row.get(spec.name)) for spec in check.specs]
            if check.key and not check.contains([values[names.index(k)] for k in check.key]):
                continue
            yield values

    def record_check(self, result: CheckResult) -> None:
        """The result as a record of the group's positions topic (key ``check:<table>:
        <range>``, in the block's transaction; the position reader skips other keys)."""
        key = f"check:{result.schema}.{result.table}:{result.range}".encode()
        self._produce(self.positions_topic, key, json.dumps(result.to_json()).encode(), None,
                      result.seqno, partition=0)

    def commit(self, position: Position) -> None:
        """Position and offsets into the open transaction, then commit it."""
        if not self._in_txn:
            raise RuntimeError("no open block: begin() first")
        if self._expected is not None and position.seqno <= self._expected:
            raise PositionConflict(f"{self.target}: block ends at seqno {position.seqno}, "
                                   f"not after the stored {self._expected}",
                                   seqno=position.seqno)
        crashpoints.reached("apply-before-position")
        beat, self._beat = self._beat, None
        value = encode_position(position, None if beat is None else {
            "name": beat.name, "seqno": beat.seqno, "lag_millis": beat.lag_millis,
            "target_tstamp": beat.target_tstamp.isoformat()})
        self._produce(self.positions_topic, self.group.encode(), value, None, position.seqno,
                      partition=0)
        if position.offset >= 0:
            self._call(lambda: self._prod.send_offsets_to_transaction(
                [TopicPartition(self.thl_topic, 0, position.offset + 1)],
                self._group_metadata, self.cfg.transaction_timeout_s),
                doing="adding the THL offset to the transaction", seqno=position.seqno)
        self._commit(position.seqno)
        self._expected = position.seqno

    def _commit(self, seqno: int) -> None:
        self._confirm(seqno)
        deadline = time.monotonic() + self.cfg.transaction_timeout_s
        while True:
            try:
                self._prod.commit_transaction(self.cfg.transaction_timeout_s)
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
                self._drop_producer()
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
        timeout = self.cfg.transaction_timeout_s
        try:
            left = self._prod.flush(timeout)
        except KafkaException as exc:
            self.rollback()
            raise kafka_error(exc.args[0], self.target, "waiting for the block's delivery "
                              "reports (aborted: nothing of the block was published)",
                              seqno) from exc
        except Exception as exc:
            raise self._broken(exc, "waiting for the block's delivery reports", seqno) from exc
        if self._errors:
            # librdkafka refuses to commit a transaction with a failed delivery (an abortable
            # error): _commit rolls back and names the first one, as it always did.
            return
        problem = None
        if left:
            problem = f"{left} record(s) still without a delivery report after {timeout:g} s"
        elif self._unconfirmed:
            problem = (f"{self._unconfirmed} record(s) reported delivered without an offset of "
                       f"their own (first: {', '.join(self._unconfirmed_seen)}): librdkafka "
                       "took them for written because a later request to their partition "
                       "succeeded, but they never reached it")
        elif self._acked != self.records:
            problem = (f"{self.records} record(s) produced, {self._acked} confirmed by a "
                       "delivery report")
        if problem is None:
            return
        log.warning("%s: block ending at seqno %d not committed: %s", self.target, seqno,
                    problem)
        self.rollback()
        raise TransientError(f"{self.target}: {problem}; the Kafka transaction was aborted "
                             "(nothing of the block was published) and the block is applied "
                             "again", seqno=seqno)

    def rollback(self) -> None:
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
            self._drop_producer()

    # -- records ----------------------------------------------------------------------------

    def _table(self, change: RowChange, specs: Sequence[ColumnSpec], seqno: int) -> _Table:
        layout = _layout(change.schema, change.table, specs)
        found = self._tables.get(layout)
        if found is not None:
            # A cheap set lookup, except after a reconnect: a topic may have been deleted.
            self._ensure(found.shape.topic, found.keyed, seqno)
            return found
        topic = self.names.topic(change.schema, change.table, seqno)
        try:
            shape = Shape.of(topic, change.schema, change.table, specs, self.serde.avro)
        except ShapeError as exc:
            raise DataError(f"{self.target}: {exc} (seqno {seqno}); rename a column on the "
                            "source or use format: json", seqno=seqno) from exc
        key, value = self.serde.writers(shape, seqno)
        self._ensure(topic, bool(shape.key), seqno)
        found = _Table(shape, key, value, bool(shape.key))
        self._tables[layout] = found
        return found

    def _ensure(self, topic: str, keyed: bool, seqno: int) -> None:
        if self._topics is None:
            raise TransientError(f"{self.target}: not connected")
        self._topics.ensure(topic, keyed=keyed, seqno=seqno)

    def _rows(self, change: RowChange, origin: Origin, now_us: int, create: Op = "c"
              ) -> None:
        specs = change.column_specs or change.key_specs
        table = self._table(change, specs, origin.seqno)
        shape = table.shape
        converts = [t.convert for t in shape.types]
        before_index = _remap(specs, change.key_specs) if change.key_values else None
        name = (change.schema, change.table)
        order = self._per_table.get(name, 0)
        for r in range(change.row_count):
            after = _values(converts, change.column_values[r]) if change.column_values \
                else None
            before = _values(converts, change.key_values[r], before_index) \
                if change.key_values else None
            if change.action is RowAction.INSERT:
                steps: list[tuple[Op, list[Value] | None, list[Value] | None]] = \
                    [(create, None, after)]
            elif change.action is RowAction.DELETE:
                steps = [("d", before, None)]
            elif before is not None and after is not None and (any(
                    before[i] != after[i] for i in shape.key) if shape.key else self._split):
                # The key changed; or a keyless row in Tungsten's envelope, which carries no
                # before image: a delete of the old row tells readers which one went.
                steps = [("d", before, None), ("c", None, after)]
            else:
                steps = [("u", before, after)]
            for op, old, new in steps:
                key_data = shape.key_of(new if new is not None else old or [])
                key = table.key(key_data) if table.key is not None else None
                datum = self.envelope.value(
                    shape, op, shape.row(old) if old is not None else None,
                    shape.row(new) if new is not None else None, origin, r, self._total,
                    order, now_us)
                try:
                    value = table.value(datum)
                except (ValueError, TypeError, OverflowError) as exc:
                    raise DataError(f"{self.target}: a row of {shape.schema}.{shape.table} "
                                    f"(seqno {origin.seqno}) does not fit its schema: {exc}",
                                    seqno=origin.seqno) from exc
                if len(value) + len(key or b"") > self._record_limit:
                    raise self._too_large(shape, origin.seqno, len(value), specs, new or old)
                headers = self._headers(origin)
                self._produce(shape.topic, key, value, headers, origin.seqno)
                if op == "d" and self.cfg.tombstones and key is not None:
                    self._produce(shape.topic, key, None, headers, origin.seqno)
                self._total += 1
                order += 1
        self._per_table[name] = order

    @property
    def _record_limit(self) -> int:
        """A record's key and value at most: the limit less room for headers and batch."""
        return self.cfg.max_message_bytes - 16 * 1024

    def _too_large(self, shape: Shape, seqno: int, size: int, specs: Sequence[ColumnSpec],
                   row: Sequence[Value] | None) -> DataError:
        names = [s.name for s in specs]
        why = too_large("the change record", f"{shape.schema}.{shape.table}", seqno, size,
                        largest(zip(names, row or [], strict=False)),
                        f"this group's max_message_bytes ({mib(self.cfg.max_message_bytes)})",
                        "raise max_message_bytes (a topic keeps the max.message.bytes it was "
                        f"created with: raise {shape.topic}'s too), within the broker's "
                        "socket.request.max.bytes")
        return DataError(f"{self.target}: {why}", seqno=seqno)

    def _headers(self, origin: Origin) -> list[tuple[str, bytes]]:
        """A record's headers: its seqno, epoch and place in the transaction."""
        return [(SEQNO_HEADER, str(origin.seqno).encode()),
                (EPOCH_HEADER, str(origin.epoch).encode()),
                (ROW_HEADER, str(self._total).encode())]

    def _produce(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None, seqno: int,
                 partition: int | None = None) -> None:
        producer = self._prod
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
                self._poll(0.1)  # the local queue is full: let deliveries drain
            except KafkaException as exc:
                raise kafka_error(exc.args[0], self.target, f"producing to {topic}",
                                  seqno) from exc
        self.records += 1

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
        self._acked += 1

    def _poll(self, timeout: float = 0) -> None:
        """Serve delivery reports; a fenced or fatal producer shows here first."""
        try:
            self._prod.poll(timeout)
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
        self._drop_producer()
        where = f"{doing} (aborted: nothing of the block was published)"
        if found is not None:
            return kafka_error(found.args[0], self.target, where, seqno)
        return TransientError(f"{self.target}: {where}: {exc!r}", seqno=seqno)

    def _call(self, fn: Any, *, doing: str, seqno: int = -1) -> None:
        try:
            fn()
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.txn_requires_abort():
                self.rollback()
            raise kafka_error(err, self.target, doing, seqno) from exc

    def _transaction(self, work: Any) -> None:
        """``work(producer)`` in a transaction of its own, committed."""
        self.begin()
        try:
            work(self._prod)
            self._commit(-1)
        except ConsumerError:
            self.rollback()
            raise


def _kafka_cause(exc: BaseException) -> KafkaException | None:
    """The KafkaException behind ``exc``, if Python kept it (ChangesApplier._broken)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _remap(specs: Sequence[ColumnSpec], before: Sequence[ColumnSpec]) -> list[int] | None:
    """Where each column of ``specs`` is in a before image laid out as ``before`` (None: the
    same layout, the usual case with binlog_row_image=FULL)."""
    if [s.name for s in before] == [s.name for s in specs]:
        return None
    where = {s.name: i for i, s in enumerate(before)}
    return [where.get(s.name, -1) for s in specs]


def _values(converts: list[Any], raw: Sequence[ThlValue],
            index: list[int] | None = None) -> list[Value]:
    if index is None:
        return [c(v) for c, v in zip(converts, raw, strict=True)]
    return [c(raw[i]) if i >= 0 else None for c, i in zip(converts, index, strict=True)]
