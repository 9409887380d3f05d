"""Reading a change topic to its end while its producer commits: the reader sees every
transaction committed before it began, even when the broker has not yet written the commit
markers (``commit_transaction`` returns first), and names a transaction that stays open."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from consumers.changes.readback import ChangeReader, materialize
from consumers.changes.records import ROW_HEADER, SEQNO_HEADER
from stack.service import Service

from ...kafka_topics import create_served

PARTITIONS = 3


@pytest.fixture
def topic(kafka: Service) -> Iterator[str]:
    name = f"reader-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka.port}"})
    create_served(admin, NewTopic(name, PARTITIONS, 1))
    yield name
    admin.delete_topics([name])[name].result(30)


def _producer(kafka: Service, topic: str) -> Producer:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{kafka.port}",
                         "transactional.id": f"{topic}-writer", "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def _rows(producer: Producer, topic: str, seqno: int, ids: range) -> None:
    """One insert record per id (Tungsten's envelope, JSON without schemas)."""
    for row, i in enumerate(ids):
        producer.produce(topic, key=json.dumps({"id": i}).encode(),
                         value=json.dumps({"record": {"id": i}, "_optype": "INSERT"}).encode(),
                         headers=[(SEQNO_HEADER, str(seqno).encode()),
                                  (ROW_HEADER, str(row).encode())])


def test_every_transaction_committed_before_reading_is_read(kafka: Service,
                                                            topic: str) -> None:
    producer = _producer(kafka, topic)
    reader = ChangeReader(f"127.0.0.1:{kafka.port}")
    for seqno in range(10):
        producer.begin_transaction()
        _rows(producer, topic, seqno, range(seqno * 10, seqno * 10 + 10))
        producer.commit_transaction(30)
        # Straight after the commit: the markers may still be on their way.
        ids = sorted(r["id"] for r in materialize(reader.records([topic]), True))
        assert ids == list(range(seqno * 10 + 10)), f"after seqno {seqno}"


def test_a_transaction_committing_while_reading_begins_is_read(kafka: Service,
                                                               topic: str) -> None:
    producer = _producer(kafka, topic)
    producer.begin_transaction()
    _rows(producer, topic, 1, range(30))
    producer.flush(30)
    committer = threading.Timer(3.0, producer.commit_transaction, (30,))
    committer.start()
    try:
        started = time.monotonic()
        rows = materialize(ChangeReader(f"127.0.0.1:{kafka.port}").records([topic]), True)
        assert time.monotonic() - started >= 2.9  # it waited for the commit
    finally:
        committer.join()
    assert sorted(r["id"] for r in rows) == list(range(30))


def test_a_transaction_left_open_is_named(kafka: Service, topic: str) -> None:
    producer = _producer(kafka, topic)
    producer.begin_transaction()
    _rows(producer, topic, 1, range(30))
    producer.flush(30)
    reader = ChangeReader(f"127.0.0.1:{kafka.port}")
    try:
        with pytest.raises(TimeoutError, match=rf"{topic} partition \d: a transaction is "
                                               r"still open at offset 0"):
            list(reader.records([topic], timeout=2))
        # Read uncommitted (diagnosis), the open transaction's records are there.
        assert len(list(reader.records([topic], timeout=10, committed=False))) == 30
    finally:
        producer.abort_transaction(30)
    assert list(reader.records([topic])) == []
