"""Making an extractor that stopped moving visible, whatever the cause.

The binlog connection delivers a heartbeat every 0.2 s when the source is idle, and a read
transaction is committed to the THL within ``batch_ms``. So an extractor that has read
nothing, not even a heartbeat, for ``stall_warning_s``, or that holds read transactions
uncommitted that long, is stuck somewhere: the status says so (``stall``), the log warns
once, and the metrics show the ages, until it moves again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from extractor.binlog_position import BinlogPosition

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """What the extractor's loop last did (monotonic seconds), read by the watchdog."""

    last_event_at: float
    #: Where the binlog was last read.
    read_at: BinlogPosition | None = None
    #: When the oldest transaction read and not yet committed to the THL was read.
    pending_since: float | None = None
    pending: int = 0


def stall_text(progress: Progress, now: float, limit_s: float) -> str:
    """NONE, or what is stuck and for how long."""
    idle = now - progress.last_event_at
    if idle >= limit_s:
        return (f"no binlog event for {idle:.0f} s (the source sends a heartbeat every 0.2 s "
                f"when idle): the binlog connection or the source is stuck; read up to "
                f"{_at(progress)}")
    if progress.pending_since is not None and now - progress.pending_since >= limit_s:
        return (f"{progress.pending} transaction(s) read but not committed to the THL for "
                f"{now - progress.pending_since:.0f} s; read up to {_at(progress)}")
    return "NONE"


def _at(progress: Progress) -> str:
    return progress.read_at.event_id() if progress.read_at is not None else "?"


class Watchdog:
    """A thread that checks ``progress`` every few seconds and reports changes through
    ``report(text)`` (NONE when moving again)."""

    def __init__(self, progress: Progress, limit_s: float,
                 report: Callable[[str], None]) -> None:
        self.progress = progress
        self.limit_s = limit_s
        self._report = report
        self._stop = threading.Event()
        self._text = "NONE"
        self._thread = threading.Thread(target=self._run, name="extractor-watchdog",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(min(5.0, self.limit_s / 4)):
            text = stall_text(self.progress, time.monotonic(), self.limit_s)
            if text == self._text:
                continue
            if text != "NONE" and self._text == "NONE":
                log.warning("extractor stalled: %s", text)
            elif text == "NONE":
                log.info("extractor moving again")
            self._text = text
            try:
                self._report(text)
            except Exception as exc:  # a report must never end the watchdog
                log.warning("extractor watchdog: cannot report: %s", exc)
