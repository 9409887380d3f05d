"""The column layout each table's topic was last written with, kept in a compacted topic.

A TRUNCATE, a table or column rename or a dropped table re-publishes or deletes the rows a
topic's readers hold, which takes the table's column specs (the THL's DDL event carries none).
A process that wrote the table knows them; one started since then reads them here: every
first write of a layout in a process also writes it (key ``[schema, table]`` as JSON, value
the specs as JSON) into ``tungsten_<service>.<group>.layouts``, in the block's Kafka
transaction, so the layout is committed exactly when the records written with it are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from consumers.changes.transaction import BlockTransaction
from consumers.errors import TransientError
from thl_topics.closing import close_consumer
from thl_topics.event import ColumnSpec

Specs = tuple[ColumnSpec, ...]


def _key(schema: str, table: str) -> bytes:
    return json.dumps([schema, table], ensure_ascii=False).encode()


class LayoutLog:
    """The last written layout per table: what this process wrote, else what the topic has."""

    def __init__(self, kafka: Mapping[str, Any], topic: str, target: str,
                 timeout: float) -> None:
        self.kafka = kafka
        self.topic = topic
        self.target = target
        self.timeout = timeout
        self._read: dict[bytes, Specs] | None = None

    def forget(self) -> None:
        """Read the topic again at the next lookup (a new session: another process may have
        written since)."""
        self._read = None

    def write(self, txn: BlockTransaction, schema: str, table: str, specs: Specs,
              seqno: int) -> None:
        """``specs`` as the table's layout, in the open transaction."""
        value = json.dumps([s.to_avro() for s in specs], ensure_ascii=False).encode()
        txn.produce(self.topic, _key(schema, table), value, None, seqno, partition=0)
        if self._read is not None:
            self._read[_key(schema, table)] = specs

    def remove(self, txn: BlockTransaction, schema: str, table: str, seqno: int) -> None:
        """The table has no topic of its own any more (renamed, or dropped): a tombstone."""
        txn.produce(self.topic, _key(schema, table), None, None, seqno, partition=0)
        if self._read is not None:
            self._read.pop(_key(schema, table), None)

    def tables(self) -> list[tuple[str, str]]:
        """Every table whose layout the topic holds."""
        if self._read is None:
            self._read = self._all()
        return [(schema, table) for schema, table in map(json.loads, self._read)]

    def last(self, schema: str, table: str) -> Specs | None:
        """The layout the table's topic was last written with (None: never written)."""
        if self._read is None:
            self._read = self._all()
        return self._read.get(_key(schema, table))

    def _all(self) -> dict[bytes, Specs]:
        consumer = Consumer({**self.kafka, "group.id": f"{self.topic}.reader",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest", "enable.partition.eof": True})
        found: dict[bytes, Specs] = {}
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0),
                                                       timeout=self.timeout)
            if high <= low:
                return found
            consumer.assign([TopicPartition(self.topic, 0, low)])
            while True:
                msg = consumer.poll(self.timeout)
                if msg is None:
                    raise TransientError(f"{self.target}: no answer reading {self.topic}")
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return found
                    raise TransientError(f"{self.target}: reading {self.topic}: {err.str()}")
                key, value = msg.key(), msg.value()
                if key is not None:
                    if value is None:
                        found.pop(key, None)
                    else:
                        found[key] = tuple(ColumnSpec.from_avro(s) for s in json.loads(value))
                if (msg.offset() or 0) + 1 >= high:
                    return found
        except KafkaException as exc:
            raise TransientError(f"{self.target}: reading {self.topic}: {exc}") from exc
        finally:
            close_consumer(consumer, f"{self.target}: layouts in {self.topic}")
