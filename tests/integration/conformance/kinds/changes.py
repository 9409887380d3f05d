"""Change topics: read back with confluent-kafka's own deserializers and materialized.

Two kinds, both selected by ``-k changes``:

- ``changes``: Debezium's envelope in Avro through the Apicurio registry; the server the
  "target down" test stops is the registry (schemas are registered as tables appear, so a
  registry outage is what a change group meets besides Kafka itself);
- ``changes_json``: Tungsten's envelope in JSON with Connect's schema block; its "target
  down" server is Kafka (the change topics' cluster, which here also holds the THL).

``rows()`` reads every change topic of a table ``read_committed`` and folds it into the
table's rows (the latest value per key, a replay of creates and deletes for a keyless table),
dropping records a partition already passed (a replay), as a data team's reader does. Every
conformance test applies: a replay re-publishes records, and the materialized state is the
same (``replay_safe``); ``empty()`` deletes the schema's topics.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
import time
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from consumers.changes.readback import ChangeReader, materialize
from consumers.changes.records import ROW_HEADER, SEQNO_HEADER
from stack.service import Service

from ..tables import HOSTILE, Table
from .base import Kind, Row

#: A hostile table name is no Kafka topic name: the kind maps it, as a user would.
HOSTILE_TOPIC = "{service}.{schema}.hostile"


def _comparable(column: str, value: Any) -> Any:
    """One form for a source (pymysql) value and its change-topic twin."""
    if value is None:
        return None
    if column in ("b64", "b1", "b9"):
        if isinstance(value, bytes):
            return int.from_bytes(value, "big")
        return int(value)  # BIT(1) is a boolean in the topic
    if column == "f":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if column == "j":
        return json.loads(value, parse_float=Decimal)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
    if column == "u_big" and isinstance(value, Decimal):
        return int(value)
    if isinstance(value, Decimal) and column in ("id", "qty", "a", "n"):
        return int(value)
    return value


class ChangesKind(Kind):
    name = "changes"
    servers: tuple[str, ...] = ("kafka", "apicurio")
    down: str | None = "apicurio"
    keyless = True
    replay_safe = True
    key_change_stop: str | None = "incompatible"
    key_gained_stop: str | None = "gained a primary key"
    key_lost_stop: str | None = "lost its primary key"
    envelope = "debezium"
    format = "avro"

    def __init__(self, servers: dict[str, Service]) -> None:
        super().__init__(servers)
        self.service = ""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.servers_up['kafka'].port}"

    @property
    def registry_url(self) -> str | None:
        registry = self.servers_up.get("apicurio")
        return getattr(registry, "ccompat_url", None)

    def repair_key_change(self, schema: str, service: str, table: Table) -> bool:
        """The registry refused the new key schema: the key subject takes any schema (the
        message's "change the subject's compatibility"); the group then re-publishes the
        rows by the new key itself."""
        client = SchemaRegistryClient({"url": self.registry_url})
        client.set_compatibility(f"{service}.{schema}.{table.name}-key", "NONE")
        return False

    def target(self, service: str) -> dict[str, Any]:
        self.service = service
        target: dict[str, Any] = {
            "type": "changes", "envelope": self.envelope, "format": self.format,
            "partitions": 3, "topics": {f"*.{HOSTILE.name}": HOSTILE_TOPIC}}
        if self.format == "avro":
            target["schema_registry"] = {"url": self.registry_url}
        return target

    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        """A change topic has no rows to change in place: a delete record for the row's key
        (the value of some other delete, re-keyed), with a seqno no replay has passed, takes
        the row out of what readers fold the topic into."""
        reader = ChangeReader(self.bootstrap, self.registry_url)
        topic = self._topic(schema, table)
        changes = list(reader.records([topic]))
        mine = [c for c in changes if c.key is not None and c.key.get(table.key[0]) == key]
        deletes = [c for c in changes if c.op == "d"]
        assert mine and deletes, f"no record of key {key}, or no delete, in {topic}"
        victim_key, _ = _raw(self.bootstrap, topic, mine[-1].partition, mine[-1].offset)
        _, delete_value = _raw(self.bootstrap, topic, deletes[-1].partition,
                               deletes[-1].offset)
        producer = Producer({"bootstrap.servers": self.bootstrap})
        producer.produce(topic, key=victim_key, value=delete_value,
                         partition=mine[-1].partition,
                         headers=[(SEQNO_HEADER, str(10**15).encode()), (ROW_HEADER, b"0")])
        producer.flush(30)

    def _topic(self, schema: str, table: Table) -> str:
        template = HOSTILE_TOPIC if table is HOSTILE else "{service}.{schema}.{table}"
        return template.format(service=self.service, schema=schema, table=table.name)

    def rows(self, schema: str, table: Table) -> list[Row]:
        reader = ChangeReader(self.bootstrap, self.registry_url)
        state = materialize(reader.records([self._topic(schema, table)]), bool(table.key))
        return [tuple(_comparable(c, row.get(c)) for c in table.columns) for row in state]

    def columns(self, schema: str, name: str) -> set[str] | None:
        """The fields of the rows readers hold (None: no live row)."""
        reader = ChangeReader(self.bootstrap, self.registry_url)
        topic = f"{self.service}.{schema}.{name}"
        state = materialize(reader.records([topic]), True)
        return {field for row in state for field in row} or None

    def explain(self, schema: str, table: Table) -> str:
        """Every record of the table's topic, read committed and uncommitted, with each
        partition's watermarks: whether a missing row was never published, aborted, or
        beyond an open transaction."""
        topic = self._topic(schema, table)
        reader = ChangeReader(self.bootstrap, self.registry_url)
        committed_ends = _watermarks(self.bootstrap, topic, "read_committed")
        all_ends = _watermarks(self.bootstrap, topic, "read_uncommitted")
        # A last stable offset below the high watermark: a transaction still open there.
        lines = [f"topic {topic}:"]
        lines.extend(f"  partition {p}: low {low}, last stable {stable}, high {all_ends[p][1]}"
                     for p, (low, stable) in committed_ends.items())
        for committed in (True, False):
            lines.append("  read_committed:" if committed else "  read_uncommitted:")
            lines.extend(f"    p{c.partition} @{c.offset} seqno {c.seqno} row {c.row} {c.op} "
                         f"{c.key}" for c in reader.records([topic], committed=committed))
        return "\n".join(lines)

    def normalize(self, table: Table, row: Row) -> Row:
        return tuple(_comparable(c, v) for c, v in zip(table.columns, row, strict=True))

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def _delete_topics(self, prefix: str) -> None:
        admin = self._admin()
        names = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
        if not names:
            return
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)
        deadline = time.monotonic() + 60
        # Deletion is asynchronous: the group must not produce into a dying topic.
        while any(t in admin.list_topics(timeout=30).topics for t in names):
            assert time.monotonic() < deadline, f"topics {names} still there after 60 s"
            time.sleep(0.2)

    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        self._delete_topics(f"{self.service}.{schema}.")

    def drop(self, schema: str, service: str) -> None:
        self._delete_topics(f"{service}.")
        self._delete_topics(f"tungsten_{service}.")

    def server(self) -> Service:
        return self.servers_up["apicurio"]


class _RecoveredKafka:
    """The stack's Kafka, whose ``start()`` also waits until every partition has a leader
    again: the test reads the THL right after the restart, before the broker has loaded
    its logs (NOT_LEADER_FOR_PARTITION)."""

    def __init__(self, kafka: Service) -> None:
        self.kafka = kafka

    def stop(self) -> None:
        self.kafka.stop()

    def start(self) -> None:
        self.kafka.start()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.kafka.port}"})
        deadline = time.monotonic() + 120
        while True:
            topics = admin.list_topics(timeout=30).topics.values()
            if all(t.error is None and all(p.leader >= 0 and p.error is None
                                           for p in t.partitions.values()) for t in topics):
                return
            assert time.monotonic() < deadline, "Kafka partitions without a leader"
            time.sleep(0.2)


class ChangesJsonKind(ChangesKind):
    name = "changes_json"
    servers = ("kafka",)
    down = "kafka"
    envelope = "tungsten"
    format = "json"
    #: No registry to refuse the new key schema: the topic follows the key.
    key_change_stop = None

    def server(self) -> Service:
        return _RecoveredKafka(self.servers_up["kafka"])  # type: ignore[return-value]


def _watermarks(bootstrap: str, topic: str, isolation: str) -> dict[int, tuple[int, int]]:
    """(low, high) offsets of every partition of ``topic``; high is the last stable offset
    when ``isolation`` is read_committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "conformance-explain",
                         "isolation.level": isolation})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)
                for p in sorted(meta.partitions)}
    finally:
        consumer.close()


def _raw(bootstrap: str, topic: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    """The key and value bytes of one record, as they are on the topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "conformance-tamper",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None, msg
        key, value = msg.key(), msg.value()
        assert key is not None and value is not None
        return key, value
    finally:
        consumer.close()
