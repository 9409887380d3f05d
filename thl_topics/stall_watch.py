"""Notices a THL feed whose Kafka consumer stopped fetching while the topic goes on.

librdkafka's ``assign()``ed consumers now and then never fetch again after their broker
restarts: ``poll`` returns nothing, no error, forever (confluentinc/librdkafka#5153,
fede1024/rust-rdkafka#597, both open). A group in that state stays ONLINE and applies
nothing, which no operator would notice until the lag alarm. So a feed that has been quiet
for a while asks a second reader for the first committed record past its position; found
twice in a row (one check apart, so a record committed just before a check is not taken for
a stall), the feed is stuck: a consumer group's session starts again with a new consumer
(``consumers.feed``), ``ThlReader.follow`` reads on with a new consumer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from thl_topics.errors import ThlError

#: Seconds of quiet between two looks past the feed's position.
CHECK_EVERY_S = 10.0


class StallWatch:
    """The position of one feed and how long it has been quiet."""

    def __init__(self, probe: Callable[[int], int | None], every_s: float = CHECK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``probe(offset)``: the offset of the first committed record at or after
        ``offset`` (None past the end), read by another consumer than the feed's."""
        self._probe = probe
        self._every_s = every_s
        self._clock = clock
        #: The offset the feed reads next (None: not positioned, nothing to watch).
        self.next_offset: int | None = None
        self._quiet_since: float | None = None
        self._checked = 0.0
        #: The committed record the last look found past the position (None: none).
        self._pending: int | None = None

    def at(self, offset: int) -> None:
        """The feed was sought to ``offset``."""
        self.next_offset = offset
        self._quiet_since = self._pending = None

    def delivered(self, offset: int) -> None:
        """The feed's consumer returned the record at ``offset``."""
        self.next_offset = offset + 1
        self._quiet_since = self._pending = None

    def quiet(self) -> str | None:
        """The feed's poll returned no record: why it is stuck, or None while it is not."""
        if self.next_offset is None:
            return None
        now = self._clock()
        if self._quiet_since is None:
            self._quiet_since = self._checked = now
            return None
        if now - self._checked < self._every_s:
            return None
        self._checked = now
        try:
            found = self._probe(self.next_offset)
        except ThlError:
            # The broker is away: librdkafka reconnects by itself, look again later.
            self._pending = None
            return None
        if found is None or self._pending is None:
            self._pending = found
            return None
        return (f"its consumer returned nothing for {now - self._quiet_since:.0f} s although "
                f"the committed record at offset {found} follows its position "
                f"{self.next_offset} (a consumer that stopped fetching after a broker "
                "restart)")
