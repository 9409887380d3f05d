"""Kafka: a compacted topic with the right configs, transactional produce, read_committed read."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]

from stack.services.kafka import Kafka

from .kafka_topics import create_served


def test_compacted_topic_transactions_and_headers(kafka: Kafka) -> None:
    admin = kafka.admin()
    topic = f"smoke.{uuid.uuid4().hex[:8]}"
    create_served(admin, NewTopic(topic, num_partitions=1, replication_factor=1, config={
        "cleanup.policy": "compact", "max.message.bytes": "4194304"}))
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = admin.describe_configs([resource])[resource].result(30)
        configs = {name: entry.value for name, entry in entries.items()}
        assert configs["cleanup.policy"] == "compact"
        assert configs["max.message.bytes"] == "4194304"

        producer = Producer({"bootstrap.servers": kafka.bootstrap,
                             "transactional.id": f"smoke-{topic}", "enable.idempotence": True})
        producer.init_transactions(30)
        producer.begin_transaction()
        for seqno in range(3):
            producer.produce(topic, key=f"{seqno:020d}".encode(), value=f"v{seqno}".encode(),
                             partition=0, headers=[("epoch", b"7"), ("seqno", str(seqno).encode())])
        producer.commit_transaction(30)
        # An aborted transaction must stay invisible to read_committed consumers.
        producer.begin_transaction()
        producer.produce(topic, key=b"aborted", value=b"x", partition=0)
        producer.abort_transaction(30)

        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic,
                             "isolation.level": "read_committed",
                             "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no answer from Kafka"
            if msg.error():
                break  # end of partition
            got.append((msg.key(), msg.value(), msg.headers()))
        consumer.close()
        assert got == [(f"{i:020d}".encode(), f"v{i}".encode(),
                        [("epoch", b"7"), ("seqno", str(i).encode())]) for i in range(3)]
    finally:
        admin.delete_topics([topic])[topic].result(30)
