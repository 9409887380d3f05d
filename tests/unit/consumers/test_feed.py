"""The feed's same-log rule (a run id changes only where an epoch starts) and its held-back
offset commits."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from consumers.feed import OFFSET_COMMIT_S, ThlFeed, another_log
from replicator.held_back import HeldBack
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlRecord


def record(seqno: int, epoch: int, run: str, fragno: int = 0, offset: int = 0) -> ThlRecord:
    event = ThlEvent(seqno=seqno, epoch=epoch, source_id="src", event_id=f"b.1:{seqno};0",
                     shard_id="s", tstamp=0, fragno=fragno)
    return ThlRecord(offset or seqno, seqno, fragno, event, run_id=run)


def test_records_of_one_run_follow_each_other() -> None:
    assert another_log(record(4, 0, "a"), record(5, 0, "a")) is None


def test_an_extractor_restart_starts_an_epoch_with_its_new_run() -> None:
    assert another_log(record(4, 0, "a"), record(5, 5, "b")) is None
    # Records written before run ids existed, then an upgraded extractor's first start.
    assert another_log(record(4, 0, ""), record(5, 5, "b")) is None


def test_a_recreated_topic_whose_seqnos_follow_on_is_another_log() -> None:
    # The old log's seqno 22 at offset 23, then the new topic's offset 24: seqno 23, epoch 0.
    change = another_log(record(22, 0, "a", offset=23), record(23, 0, "b", offset=24))
    assert change is not None
    assert "seqno 23 at offset 24 was written by extractor run b (epoch 0)" in change
    assert "deleted and recreated" in change


def test_another_run_in_the_middle_of_a_seqno_is_another_log() -> None:
    # An epoch starts at a seqno's first fragment, never at a later one.
    assert another_log(record(5, 5, "a"), record(5, 5, "b", fragno=1)) is not None
    assert another_log(record(4, 0, "a"), record(5, 3, "b")) is not None


class _Consumer:
    def __init__(self) -> None:
        self.sent: list[int] = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous
        self.sent.extend(tp.offset for tp in offsets)


def test_offsets_are_committed_at_most_once_a_second_and_the_last_when_quiet() -> None:
    """Blocks in quick succession: the first offset goes at once, the ones within
    ``OFFSET_COMMIT_S`` after it are held back (only the latest is kept) and go with the next
    one due, or when the group is quiet or closes."""
    now = [100.0]
    feed: Any = ThlFeed.__new__(ThlFeed)
    feed.topic, feed.group_id = "thl", "g"
    feed._offsets = HeldBack(feed._send_offset, OFFSET_COMMIT_S, clock=lambda: now[0])
    feed._consumer = consumer = _Consumer()
    feed.commit(10)
    assert consumer.sent == [10]
    now[0] += OFFSET_COMMIT_S / 4
    feed.commit(20)
    feed.commit(30)
    assert consumer.sent == [10]
    now[0] += OFFSET_COMMIT_S
    feed.commit(40)
    assert consumer.sent == [10, 40]
    feed.commit(50)
    feed.flush_offset()
    feed.flush_offset()  # nothing held back any more
    assert consumer.sent == [10, 40, 50]
