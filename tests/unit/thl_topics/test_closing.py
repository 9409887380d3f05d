"""A consumer's close is waited for a bounded time: librdkafka's can hang for good after
a broker outage, and a group's thread must come back from it."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka import KafkaException

from thl_topics.closing import close_consumer


class _Hanging:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.closing = threading.Event()

    def close(self) -> None:
        self.closing.set()
        self.release.wait()


class _Closing:
    def __init__(self, error: Exception | None = None) -> None:
        self.closed = False
        self.error = error

    def close(self) -> None:
        self.closed = True
        if self.error is not None:
            raise self.error


def test_a_close_that_hangs_is_left_behind_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    hanging = _Hanging()
    with caplog.at_level(logging.WARNING, "thl_topics.closing"):
        close_consumer(hanging, "THL feed of thl.x", timeout=0.2)
    assert hanging.closing.is_set()
    assert "THL feed of thl.x: the Kafka consumer did not close within 0.2 s" in caplog.text
    hanging.release.set()


def test_a_close_that_answers_is_done_and_its_error_raised() -> None:
    done = _Closing()
    close_consumer(done, "reader", timeout=5)
    assert done.closed
    with pytest.raises(KafkaException):
        close_consumer(_Closing(KafkaException("broker gone")), "reader", timeout=5)
