"""Closing a Kafka consumer without waiting forever.

librdkafka's ``rd_kafka_consumer_close`` can block for good when a broker goes away around
the close (librdkafka#1002, confluent-kafka-python#1667). Seen here on 2026-12-01 in
``test_kafka_down_under_load_everything_waits_and_converges``: a consumer group's thread
stopped by the outage never came back from ``ThlFeed.close`` (native stack:
``rd_kafka_consumer_close0`` waiting on its queue, the broker long back up), so the group
never went online again. A production group must come back after any Kafka outage, so the
close runs on a thread of its own and is waited for ``timeout`` seconds; after that the
handle is left to that thread (nothing of ours depends on it: positions live on the
targets and in ZooKeeper, the offsets a consumer commits are informational) and a warning
says so.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger(__name__)

#: Seconds a close is waited for: librdkafka's own close takes milliseconds when the
#: brokers answer.
CLOSE_TIMEOUT_S = 10.0


class Closable(Protocol):
    def close(self) -> None: ...


def close_consumer(consumer: Closable, what: str, timeout: float = CLOSE_TIMEOUT_S) -> None:
    """Close ``consumer`` (``what`` names it in the warning); its error is raised if it
    closed with one within ``timeout``, nothing if it did not close by then."""
    failed: list[BaseException] = []

    def close() -> None:
        try:
            consumer.close()
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    closer = threading.Thread(target=close, name=f"closing {what}", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():
        log.warning("%s: the Kafka consumer did not close within %g s (librdkafka's close "
                    "can hang after a broker outage); it is left to close in the background",
                    what, timeout)
        return
    if failed:
        raise failed[0]
