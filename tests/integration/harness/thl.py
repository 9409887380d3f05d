"""Reading the THL from tests, patient with a broker that has just come back."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from thl_topics.errors import ThlTopicMissing, ThlUnavailable
from thl_topics.event import RowChange
from thl_topics.reader import ThlReader, ThlRecord


def tail_record(kafka: Mapping[str, Any] | str, topic: str, timeout: float = 60
                ) -> ThlRecord | None:
    """The THL's last record (None: no topic or no record yet).

    A broker restarted by an outage test answers NOT_LEADER for a few seconds while its
    partitions get their leader back: that is waited out, not reported.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with ThlReader(kafka, topic) as reader:
                return reader.tail()
        except ThlTopicMissing:
            return None
        except ThlUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def tail_seqno(kafka: Mapping[str, Any] | str, topic: str) -> int:
    """Seqno of the THL's last record, -1 if there is none (or no topic yet)."""
    try:
        with ThlReader(kafka, topic) as reader:
            tail = reader.tail()
    except ThlTopicMissing:
        return -1
    return -1 if tail is None else tail.seqno


def commit_marker(src: Callable[..., list[Any]], schema: str) -> int:
    """Commit a marker row to the source's ``<schema>.ready``; its number."""
    marker: int = src(f"INSERT INTO {schema}.ready VALUES ()", "SELECT LAST_INSERT_ID()")[0][0]
    return marker


def wait_marker(tail: Callable[[], ThlRecord | None], marker: int, deadline: float) -> int:
    """The seqno of the marker row ``marker`` once the THL's tail (read by ``tail``) holds it.

    The marker is the source's last commit: when the THL ends with it, the THL holds all
    the source committed before it.
    """
    while True:
        assert time.monotonic() < deadline, f"marker {marker} never reached the THL"
        record = tail()
        if record is not None and record.event is not None and any(
                isinstance(item, RowChange) and item.table == "ready"
                and item.column_values and item.column_values[-1][0] == marker
                for item in record.event.data):
            return record.seqno
        time.sleep(0.2)
