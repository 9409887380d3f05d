"""Side records sent at most once per period while they follow each other: the latest is
held back and goes with the next one due, or when its sender is quiet or stops.

For what only operators and lag tools read (a group's Kafka offset, its ZooKeeper position
mirror), where one send per block cost more CPU than the block's own bookkeeping; the
position of record is elsewhere (the target's), so a held-back value is never lost work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class HeldBack(Generic[T]):
    """``send`` at most once per ``every`` seconds; ``flush`` sends the value held back."""

    def __init__(self, send: Callable[[T], None], every: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._send = send
        self.every = every
        self._clock = clock
        self._held: T | None = None
        self._sent = float("-inf")

    def offer(self, value: T) -> None:
        """Send ``value`` now if nothing went within ``every`` seconds, else with a later
        one or at ``flush``."""
        self._held = value
        if self._clock() - self._sent >= self.every:
            self.flush()

    def flush(self) -> None:
        """Send the value held back, if any."""
        value, self._held = self._held, None
        if value is not None:
            self._sent = self._clock()
            self._send(value)
