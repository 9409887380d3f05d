"""The feed over a real topic: a consumer that stopped fetching is noticed, an idle THL is
not taken for one."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from consumers.errors import TransientError
from consumers.feed import ThlFeed
from stack.services.kafka import Kafka
from thl_topics.event import Statement, ThlEvent
from thl_topics.producer import ThlProducer


def _publish(producer: ThlProducer, seqnos: range) -> None:
    for seqno in seqnos:
        producer.publish(ThlEvent(seqno=seqno, epoch=0, source_id="t",
                                  event_id=f"f:{seqno:016d};0", shard_id="s", tstamp=0,
                                  data=[Statement(f"-- {seqno}")]))
    producer.commit()


def _read(feed: ThlFeed, count: int) -> list[int]:
    seqnos: list[int] = []
    deadline = time.monotonic() + 30
    while len(seqnos) < count:
        assert time.monotonic() < deadline, f"{count} records within 30 s, got {seqnos}"
        rec = feed.poll(0.2)
        if rec is not None:
            seqnos.append(rec.seqno)
    return seqnos


def test_a_consumer_that_stopped_fetching_ends_the_session(kafka: Kafka,
                                                          thl_topic: str) -> None:
    topic = thl_topic
    producer = ThlProducer(kafka.bootstrap, topic, f"t-{topic}")
    _publish(producer, range(3))
    feed = ThlFeed(kafka.bootstrap, topic, f"g-{topic}", stall_check_s=0.5)
    try:
        feed.seek(0)
        assert _read(feed, 3) == [0, 1, 2]
        # Idle: the THL ends at a transaction marker, nothing past the position to miss.
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            assert feed.poll(0.2) is None
        # What librdkafka's stall after a broker restart looks like from here: polls that
        # return nothing while the topic goes on.
        feed._consumer.pause([TopicPartition(topic, 0)])
        _publish(producer, range(3, 6))
        with pytest.raises(TransientError, match=r"returned nothing for \d+ s although the "
                                                 r"committed record at offset 4 follows its "
                                                 r"position 3"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                assert feed.poll(0.2) is None
    finally:
        feed.close()
        producer.close()
    # The session's next feed (a new consumer) reads on from the position.
    again = ThlFeed(kafka.bootstrap, topic, f"g-{topic}", stall_check_s=0.5)
    try:
        again.seek(3)
        assert _read(again, 3) == [3, 4, 5]
    finally:
        again.close()
