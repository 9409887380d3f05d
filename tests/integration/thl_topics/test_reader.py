"""Seek by seqno over a real topic with offset gaps; topic verification refuses bad topics."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from stack.services.kafka import Kafka
from thl_topics.admin import ThlTopicError, ThlTopicSpec, describe_configs, ensure_thl_topic
from thl_topics.event import Statement, ThlEvent
from thl_topics.producer import ThlProducer
from thl_topics.reader import ThlReader


def _event(seqno: int, fragno: int = 0, last: bool = True) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="t", event_id=f"f:{seqno:016d};0",
                    shard_id="s", tstamp=0, fragno=fragno, last_frag=last,
                    data=[Statement(f"-- {seqno}")])


def test_offset_of_finds_every_seqno_across_markers_and_aborts(kafka: Kafka,
                                                              thl_topic: str) -> None:
    topic = thl_topic
    producer = ThlProducer(kafka.bootstrap, topic, f"t-{topic}")
    offsets_of_seqno: dict[int, int] = {}
    seqno = 0
    for batch in range(12):
        for _ in range(batch % 3 + 1):
            producer.publish(_event(seqno, 0, last=False))
            producer.publish(_event(seqno, 1, last=True))
            seqno += 1
        if batch % 4 == 3:
            producer.abort()  # aborted records and markers leave holes in the offsets
            seqno -= batch % 3 + 1
        else:
            producer.commit()
    producer.close()
    with ThlReader(kafka.bootstrap, topic) as reader:
        for rec in reader.records(0):
            if rec.fragno == 0:
                offsets_of_seqno[rec.seqno] = rec.offset
        assert sorted(offsets_of_seqno) == list(range(seqno))
        for s, offset in offsets_of_seqno.items():
            assert reader.offset_of(s) == offset
            if s:  # from just past the seqno before it (a restart's stored position)
                assert reader.offset_of(s, after=offsets_of_seqno[s - 1] + 1) == offset
        assert reader.offset_of(seqno + 100) == reader.watermarks()[1]
        # The last batch was aborted: the tail is found behind its records and marker.
        tail = reader.tail()
        assert tail is not None and (tail.seqno, tail.fragno) == (seqno - 1, 1)


def test_tail_after_a_commit_takes_one_read(kafka: Kafka, thl_topic: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The THL's last offset is a commit marker: the tail is read in one go, not after a
    read of the marker alone (each read ends waiting for a fetch at the topic's end)."""
    producer = ThlProducer(kafka.bootstrap, thl_topic, f"t-{thl_topic}")
    for seqno in range(3):
        producer.publish(_event(seqno))
        producer.commit()
    producer.close()
    with ThlReader(kafka.bootstrap, thl_topic) as reader:
        reads: list[int] = []
        raw = reader.raw

        def counted(start: int, end: int | None = None) -> Iterator[Message]:
            reads.append(start)
            return raw(start, end)

        monkeypatch.setattr(reader, "raw", counted)
        tail = reader.tail()
    assert tail is not None and tail.seqno == 2
    assert len(reads) == 1, reads


def test_existing_topic_with_wrong_settings_is_refused(kafka: Kafka) -> None:
    admin = kafka.admin()
    name = f"thl.bad{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1,
                                  config={"cleanup.policy": "delete"})])[name].result(30)
    try:
        with pytest.raises(ThlTopicError, match="3 partitions; the THL is one total order"):
            ensure_thl_topic(admin, ThlTopicSpec(name))
    finally:
        admin.delete_topics([name])[name].result(30)
    name2 = f"thl.del{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name2, num_partitions=1, replication_factor=1,
                                  config={"cleanup.policy": "compact,delete"})])[name2].result(30)
    try:
        # compact,delete with Kafka's default retention (7 days) would lose history.
        with pytest.raises(ThlTopicError, match=r"cleanup.policy=compact,delete "
                                                r"retention.ms=604800000.*would delete history"):
            ensure_thl_topic(admin, ThlTopicSpec(name2))
    finally:
        admin.delete_topics([name2])[name2].result(30)
    name3 = f"thl.new{uuid.uuid4().hex[:8]}"
    try:
        ensure_thl_topic(admin, ThlTopicSpec(name3))  # made purgeable, never deleting by itself
        configs = describe_configs(admin, name3)
        assert (configs["cleanup.policy"], configs["retention.ms"],
                configs["retention.bytes"]) == ("compact,delete", "-1", "-1")
    finally:
        admin.delete_topics([name3])[name3].result(30)
