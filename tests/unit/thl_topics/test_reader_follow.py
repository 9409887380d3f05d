"""``ThlReader.follow`` reads on with a new consumer when its own stops fetching while the
topic goes on (librdkafka after a broker restart), and only then. Kafka's consumer is a
stand-in here: the stall cannot be caused on demand with a real broker."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from thl_topics import reader as reader_module
from thl_topics.codec import ThlCodec
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlReader
from thl_topics.records import record_key

CODEC = ThlCodec()


class Msg:
    """A fetched THL record: seqno ``offset`` at offset ``offset``."""

    def __init__(self, offset: int) -> None:
        self._offset = offset
        self._value = CODEC.encode(ThlEvent(offset, 1, "src", f"ev{offset}", "", 0))

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return record_key(self._offset, 0)

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return []

    def error(self) -> None:
        return None


class Broker:
    """The topic's records up to ``end``, and consumers that fetch them or are stuck."""

    def __init__(self, end: int, stuck: set[int]) -> None:
        self.end = end
        #: Which consumers (by the order they were made) never return anything.
        self.stuck = stuck
        self.made: list[Consumer] = []
        self.stop = threading.Event()


class Consumer:
    broker: Broker

    def __init__(self, conf: Any) -> None:
        self.number = len(self.broker.made)
        self.broker.made.append(self)
        self.next = -1
        self.closed = False

    def assign(self, parts: list[Any]) -> None:
        self.next = parts[0].offset

    def unassign(self) -> None:
        self.next = -1

    def poll(self, timeout: float) -> Msg | None:
        if self.number in self.broker.stuck or not 0 <= self.next < self.broker.end:
            return None
        msg, self.next = Msg(self.next), self.next + 1
        return msg

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Broker:
    made = Broker(end=0, stuck=set())
    Consumer.broker = made
    monkeypatch.setattr(reader_module, "Consumer", Consumer)
    return made


def _follow(broker: Broker, start: int, until: int) -> list[int]:
    """Seqnos followed from offset ``start`` until seqno ``until`` is read."""
    reader = ThlReader("127.0.0.1:1", "thl.t", poll_timeout=1.0)
    got = []
    give_up = threading.Timer(10.0, broker.stop.set)  # a follow that stays stuck ends too
    give_up.start()
    try:
        for rec in reader.follow(start, broker.stop, idle=0.0, stall_check_s=0.0):
            got.append(rec.seqno)
            if rec.seqno == until:
                broker.stop.set()
    finally:
        give_up.cancel()
    return got


def test_a_stuck_consumer_is_replaced_at_the_same_offset(broker: Broker) -> None:
    broker.end, broker.stuck = 6, {0}  # the reader's own consumer (0) never fetches
    assert _follow(broker, 2, until=5) == [2, 3, 4, 5]
    reader_consumer, probe, renewed = broker.made
    assert reader_consumer.closed and probe.closed and not renewed.closed
    assert renewed.next == 6


def test_a_quiet_topic_is_no_stall(broker: Broker) -> None:
    broker.end = 3
    reader = ThlReader("127.0.0.1:1", "thl.t", poll_timeout=1.0)
    got = []
    for rec in reader.follow(0, broker.stop, idle=0.0, stall_check_s=0.0):
        got.append(rec.seqno)
        if rec.seqno == 2:
            break
    # Past the end: polls come back empty while the probe finds nothing either.
    followed = reader.follow(3, broker.stop, idle=0.0, stall_check_s=0.0)
    timer = threading.Timer(0.3, broker.stop.set)
    timer.start()
    assert list(followed) == []
    timer.join()
    assert got == [0, 1, 2]
    assert [c.closed for c in broker.made] == [False, True]  # the reader's, the probe
