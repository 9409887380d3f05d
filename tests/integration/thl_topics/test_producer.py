"""The transactional THL producer against a real broker."""

from __future__ import annotations

import time

from stack.services.kafka import Kafka
from thl_topics.event import Statement, ThlEvent
from thl_topics.producer import ThlProducer
from thl_topics.reader import ThlReader


def _event(seqno: int) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="t", event_id=f"f:{seqno:016d};0",
                    shard_id="s", tstamp=0, fragno=0, last_frag=True,
                    data=[Statement(f"-- {seqno}")])


def test_an_abort_right_behind_a_commit_leaves_the_producer_usable(kafka: Kafka,
                                                                    thl_topic: str) -> None:
    # Right after a commit the coordinator is still writing its markers and answers the next
    # transaction's AddPartitionsToTxn with CONCURRENT_TRANSACTIONS; librdkafka then sent
    # an abort's EndTxn ahead of the retried registration, which the coordinator refused
    # as INVALID_TXN_STATE, killing the producer (confluentinc/librdkafka#4849). Delays
    # of 0-10 ms between the record and the abort walk across that window.
    producer = ThlProducer(kafka.bootstrap, thl_topic, f"t-{thl_topic}")
    for seqno in range(100):
        producer.publish(_event(seqno))
        producer.commit()
        producer.publish(_event(1000 + seqno))
        time.sleep(seqno % 20 / 2000)
        producer.abort()
    producer.close()
    with ThlReader(kafka.bootstrap, thl_topic) as reader:
        assert [rec.seqno for rec in reader.records(0)] == list(range(100))
