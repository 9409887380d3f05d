"""The change-topic applier: the THL fanned out into one Kafka topic per source table.

Every row change becomes one record on its table's topic (a key change two: a delete of the
old key and a create of the new one), followed by a tombstone after each delete. A block is
one Kafka transaction of a transactional producer whose ``transactional.id`` belongs to the
service and group: the block's records, the group's position (a record in the group's
compacted positions topic) and the group's THL offset (``send_offsets_to_transaction``) commit
together or not at all (atomicity: transactional). Readers with ``isolation.level=
read_committed`` therefore see every row change exactly once per seqno, in seqno order per
key, and a crash anywhere in a block leaves nothing of it visible.

Nothing of a block commits unconfirmed: every record must have a delivery report with an
offset of its own first (``transaction.py``). The records themselves: ``records.py``.

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
from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.changes import readback
from consumers.changes.config import ChangesTarget
from consumers.changes.envelopes import DebeziumEnvelope, Envelope, TungstenEnvelope
from consumers.changes.errors import kafka_error
from consumers.changes.follow import TopicFollower
from consumers.changes.layouts import LayoutLog
from consumers.changes.naming import TopicNames
from consumers.changes.positions import encode_position, read_position
from consumers.changes.records import RecordWriter
from consumers.changes.serde import AvroSerde, JsonSerde, Serde
from consumers.changes.topics import TopicAdmin
from consumers.changes.transaction import BlockTransaction
from consumers.check import CheckRange, CheckResult
from consumers.errors import ConsumerError, PositionConflict, TransientError
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.zero_dates import ZeroDateTally, count_zero_dates
from replicator import crashpoints
from thl_topics.checksum import thl_value_of
from thl_topics.closing import close_consumer
from thl_topics.event import ColumnSpec, RowChange, ThlEvent, ThlValue
from thl_topics.schema_change import SchemaChange

log = logging.getLogger(__name__)


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
        self._txn = BlockTransaction(cfg, self.target)
        self._layouts = LayoutLog(
            self.kafka, f"{ctx.service.tracking_schema}.{ctx.group}.layouts", self.target,
            cfg.transaction_timeout_s)
        self._records = RecordWriter(cfg, self.target, self.envelope, self.serde, self.names,
                                     self._txn, self._layouts)
        self._meta_consumer: Consumer | None = None
        self._group_metadata: Any = None
        self._expected: int | None = None
        self._beat: Heartbeat | None = None
        #: Where readbacks of the change topics find their Avro schemas (None: JSON).
        self._registry = cfg.schema_registry.url if cfg.schema_registry else None
        #: Child tables' topics as cascades read them, kept between look-ups.
        self._follower = TopicFollower(self.kafka, self._registry, cfg.transaction_timeout_s)
        #: Zero and partial dates become null in the records, as in Debezium: counted.
        self._zeros = ZeroDateTally(self.target, ctx.metrics, log)

    @property
    def records(self) -> int:
        """Records produced in the open block (for tests and metrics)."""
        return self._txn.records

    # -- connection -------------------------------------------------------------------------

    def connect(self) -> None:
        """A new transactional producer (fencing any older one of the group)."""
        self._txn.drop()
        if self._records.topics is None:
            self._records.topics = TopicAdmin(AdminClient(self.kafka), self.cfg, self.target)
        topics = self._records.topics
        topics.forget()
        self._follower.forget()
        for compacted in (self.positions_topic, self._layouts.topic):
            topics.ensure(compacted, keyed=True, partitions=1,
                          configs={"cleanup.policy": "compact"})
        self._layouts.forget()
        # Tables written in earlier sessions own their topics (issue 29).
        self.names.load(self._layouts.tables())
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
        self._txn.use(producer)
        if self._meta_consumer is None:
            # Only for the group metadata that send_offsets_to_transaction wants; it never
            # subscribes or fetches.
            self._meta_consumer = Consumer({**self.kafka, "group.id": self.group_id,
                                            "enable.auto.commit": False})
            self._group_metadata = self._meta_consumer.consumer_group_metadata()

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
        self._txn.drop()
        self._follower.close()
        if self._meta_consumer is not None:
            try:
                close_consumer(self._meta_consumer, f"{self.target}: metadata")
            except (KafkaException, RuntimeError) as exc:
                log.debug("%s: closing: %s", self.target, exc)
            self._meta_consumer = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self._txn.begin()

    def apply(self, event: ThlEvent) -> None:
        if not self._txn.is_open:
            raise RuntimeError("no open block: begin() first")
        self._records.add(event, self._live_rows)
        self._txn.poll()
        for item in event.data:
            if isinstance(item, RowChange):
                count_zero_dates(self._zeros, f"{item.schema}.{item.table}", item)

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        """Readers of the table's topic forget its rows at this seqno
        (``RecordWriter.truncate``)."""
        self._open()
        self._records.truncate(event, schema, table, self._live_rows)
        self._txn.poll()

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The rows readers hold move to the new table's topic (``RecordWriter.move``)."""
        self._open()
        self._records.move(event, change, self._live_rows)
        self._txn.poll()

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        """The rows readers hold are re-published with the column renamed, in both modes: a
        record carries the columns the source has (a dropped column leaves the schema
        too)."""
        self._open()
        self._records.move(event, change, self._live_rows)
        self._txn.poll()

    def drop_column(self, change: SchemaChange, event: ThlEvent) -> None:
        """``evolve``: the rows readers hold are re-published without the column."""
        self._open()
        self._records.move(event, change, self._live_rows)
        self._txn.poll()

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """``evolve``: readers forget the table's rows, as for a TRUNCATE (the topic stays:
        deleting a topic under its readers is the user's call)."""
        self._open()
        self._records.drop(event, change.schema, change.table, self._live_rows)
        self._txn.poll()

    def _open(self) -> None:
        if not self._txn.is_open:
            raise RuntimeError("no open block: begin() first")

    def _live_rows(self, topic: str, specs: list[ColumnSpec]) -> list[list[ThlValue]]:
        """Every row the readers of ``topic`` hold, as THL values in ``specs`` order."""
        every = CheckRange("live rows", "", "", 0, 0, [s.name for s in specs if s.primary_key],
                           None, None, specs, 0, "", "")
        return list(readback.read_range(self.kafka, self._registry, topic, every,
                                        self.cfg.transaction_timeout_s, self.target,
                                        self._txn.own_starts(topic, -1)))

    def heartbeat(self, beat: Heartbeat) -> None:
        # Kept with the position record of this block: where the group's lag is read.
        self._beat = beat

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The rows a data team would fold the table's topic into, in a checked key range,
        as THL values (consumers.check). Reads the whole topic: a check of change topics
        costs what a full materialization costs."""
        topic = self.names.topic(check.schema, check.table, -1)
        yield from readback.read_range(self.kafka, self._registry, topic, check,
                                       self.cfg.transaction_timeout_s, self.target,
                                       self._txn.own_starts(topic, -1))

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
                      ) -> Iterator[list[ThlValue]]:
        """The rows the table's topic folds into whose ``columns`` hold one of ``values``:
        committed records only, the open block's are the caller's (``consumers.cascades``).
        The topic is read on from the last look-up (``follow.TopicFollower``)."""
        topic = self.names.topic(schema, table, -1)
        try:
            rows = self._follower.rows(topic, any(s.primary_key for s in specs),
                                       self._txn.own_starts(topic, -1))
        except (KafkaException, TimeoutError, RuntimeError) as exc:
            raise TransientError(f"{self.target}: reading {topic} back for a cascade: {exc}"
                                 ) from exc
        wanted = set(values)
        by_name = {s.name: s for s in specs}
        looked = [by_name[c] for c in columns]
        return iter([[thl_value_of(s, row.get(s.name)) for s in specs] for row in rows
                     if tuple(thl_value_of(s, row.get(s.name)) for s in looked) in wanted])

    def record_check(self, result: CheckResult) -> None:
        """The result as a record of the group's positions topic (key ``check:<table>:
        <range>``, in the block's transaction; the position reader skips other keys)."""
        key = f"check:{result.schema}.{result.table}:{result.range}".encode()
        self._txn.produce(self.positions_topic, key, json.dumps(result.to_json()).encode(),
                          None, result.seqno, partition=0)

    def commit(self, position: Position) -> None:
        """Position and offsets into the open transaction, then commit it."""
        if not self._txn.is_open:
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
        self._txn.produce(self.positions_topic, self.group.encode(), value, None,
                          position.seqno, partition=0)
        if position.offset >= 0:
            self._txn.call(lambda: self._txn.producer.send_offsets_to_transaction(
                [TopicPartition(self.thl_topic, 0, position.offset + 1)],
                self._group_metadata, self.cfg.transaction_timeout_s),
                doing="adding the THL offset to the transaction", seqno=position.seqno)
        self._txn.commit(position.seqno)
        self._expected = position.seqno
        self._zeros.commit(position.seqno)

    def rollback(self) -> None:
        self._txn.rollback()
        self._records.rollback()
        self._zeros.rollback()

    def _transaction(self, work: Any) -> None:
        """``work(producer)`` in a transaction of its own, committed."""
        self.begin()
        try:
            work(self._txn.producer)
            self._txn.commit(-1)
        except ConsumerError:
            self.rollback()
            raise
