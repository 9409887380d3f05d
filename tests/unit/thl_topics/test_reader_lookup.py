"""A new ``ThlReader`` looks its topic up once before its first offsets query: librdkafka
drops a partition-leader query sent while a new client moves from its bootstrap connection
to the broker that the first metadata answer names, and asks again only at its next timed
refresh (about 0.7 s). Kafka's consumer is a stand-in: the race cannot be caused on demand."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from thl_topics import reader as reader_module
from thl_topics.reader import ThlReader


class Consumer:
    """Records the calls that reach the broker."""

    def __init__(self, conf: dict[str, Any], *, refuse_lookup: bool = False) -> None:
        self.calls: list[str] = []
        self.conf = conf
        self.refuse_lookup = refuse_lookup

    def list_topics(self, topic: str, timeout: float) -> None:
        self.calls.append(f"list_topics {topic}")
        if self.refuse_lookup:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls.append("watermarks")
        return 3, 9

    def close(self) -> None:
        pass


def _reader(monkeypatch: pytest.MonkeyPatch, **kwargs: bool) -> tuple[ThlReader, Consumer]:
    made: list[Consumer] = []

    def consumer(conf: dict[str, Any]) -> Consumer:
        made.append(Consumer(conf, **kwargs))
        return made[-1]

    monkeypatch.setattr(reader_module, "Consumer", consumer)
    return ThlReader("127.0.0.1:1", "thl.t"), made[0]


def test_the_topic_is_looked_up_once_before_the_first_offsets_query(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader, consumer = _reader(monkeypatch)
    assert consumer.calls == []  # making a reader asks nothing yet
    assert reader.watermarks() == (3, 9)
    assert reader.watermarks() == (3, 9)
    assert consumer.calls == ["list_topics thl.t", "watermarks", "watermarks"]


def test_a_failed_look_up_leaves_the_answer_to_the_offsets_query(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader, consumer = _reader(monkeypatch, refuse_lookup=True)
    assert reader.watermarks() == (3, 9)
    assert consumer.calls == ["list_topics thl.t", "watermarks"]


def test_a_reader_reconnects_quickly_the_first_time_unless_configured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its first question waits for the broker its first metadata answer names, which
    librdkafka connects to after half of ``reconnect.backoff.ms``."""
    _, consumer = _reader(monkeypatch)
    assert consumer.conf["reconnect.backoff.ms"] == 20
    configured = ThlReader({"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 250},
                           "thl.t")
    assert configured._consumer.conf["reconnect.backoff.ms"] == 250  # type: ignore[attr-defined]
