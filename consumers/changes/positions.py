"""The group's position in a compacted Kafka topic, written in the same transaction as data.

One topic per group (``tungsten_<service>.<group>.positions``, one partition, compacted), key
= the group, value = the position as JSON (a tombstone after ``trepctl reset``). Because the
record commits in the Kafka transaction of the block's change records, the position read back
``read_committed`` is exactly the last block whose records are visible. One topic per group,
not one per service, so that one group's open or abandoned transaction never holds another
group's read of its position behind the last stable offset.

Read back after ``init_transactions``: that call fences any older producer of the group and
aborts its open transaction, so the last stable offset is then the end of the topic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from consumers.errors import TerminalError, TransientError
from consumers.position import Position
from thl_topics.closing import close_consumer

_FIELDS = ("seqno", "epoch", "event_id", "source_id", "fragno", "last_frag", "shard_id",
           "tstamp", "offset")


def encode_position(position: Position, heartbeat: dict[str, Any] | None = None) -> bytes:
    """The JSON value of a position record (with the block's last heartbeat, if any: where
    this group's lag is read)."""
    data: dict[str, Any] = {f: getattr(position, f) for f in _FIELDS}
    if heartbeat is not None:
        data["heartbeat"] = heartbeat
    return json.dumps(data, separators=(",", ":")).encode()


def decode_position(value: bytes) -> Position:
    """A position record's value (ValueError if it is not one)."""
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return Position(**{f: data[f] for f in _FIELDS if f in data})


def read_position(kafka: Mapping[str, Any], topic: str, group: str, target: str,
                  timeout: float = 30.0) -> Position | None:
    """The last committed position of ``group`` in ``topic`` (None: none, or reset)."""
    consumer = Consumer({**kafka, "group.id": f"{group}.position-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        # Read backwards in growing windows: the last data record before the end wins
        # (transaction markers and aborted records take offsets but are never delivered).
        window = 16
        start = high
        while start > low:
            start = max(low, start - window)
            found, complete = _last_in(consumer, topic, start, high, group, target, timeout)
            if complete:
                return found
            window *= 4
        return None
    except KafkaException as exc:
        raise TransientError(f"{target}: reading the position in {topic}: {exc}") from exc
    finally:
        close_consumer(consumer, f"{target}: the position in {topic}")


def _last_in(consumer: Consumer, topic: str, start: int, end: int, group: str, target: str,
             timeout: float) -> tuple[Position | None, bool]:
    """(last position of ``group`` in [start, end), whether a record of it was seen)."""
    consumer.assign([TopicPartition(topic, 0, start)])
    seen = False
    found: Position | None = None
    while True:
        msg = consumer.poll(timeout)
        if msg is None:
            raise TransientError(f"{target}: no answer reading {topic} at offset {start}")
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return found, seen
            raise TransientError(f"{target}: reading {topic}: {err.str()}")
        offset = msg.offset() or 0
        key = msg.key()
        if key is not None and key.decode(errors="replace") == group:
            seen = True
            value = msg.value()
            if value is None:
                found = None
            else:
                try:
                    found = decode_position(value)
                except (ValueError, TypeError, KeyError) as exc:
                    raise TerminalError(f"{target}: the position record at {topic} offset "
                                        f"{offset} is not a position: {exc}") from exc
        if offset + 1 >= end:
            return found, seen
