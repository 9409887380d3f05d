"""Reading the THL from tests, patient with a broker that has just come back."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from thl_topics.errors import ThlTopicMissing, ThlUnavailable
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
