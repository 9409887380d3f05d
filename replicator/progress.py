"""Progress of long runs (rebuild, export, catch-up of a backlog): rows/s and an ETA.

On a terminal it is a rich progress bar on stderr; otherwise (a service under a supervisor,
CI, a pipe) one plain log line every ``interval`` seconds, so logs stay greppable. Progress
is counted in seqnos (the range is known up front, so the ETA is honest); rows are counted
beside it for the rate.
"""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType
from typing import IO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = logging.getLogger("progress")


class RunProgress:
    """Progress over the seqno range [low, high] (inclusive)."""

    def __init__(self, title: str, low: int, high: int, *, unit: str = "rows",
                 stream: IO[str] | None = None, terminal: bool | None = None,
                 interval: float = 10.0) -> None:
        self.title = title
        self.low, self.high = low, high
        self.unit = unit
        self.interval = interval
        self.rows = 0
        self.done = 0
        self.started = time.monotonic()
        self._last_line = self.started
        out = stream if stream is not None else sys.stderr
        self.terminal = out.isatty() if terminal is None else terminal
        self._bar: Progress | None = None
        self._task = None
        if self.terminal:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TaskProgressColumn(), TextColumn("{task.fields[rate]}"),
                TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(),
                console=Console(file=out), transient=False)
            self._task = self._bar.add_task(title, total=self.total, rate="")
            self._bar.start()

    @property
    def total(self) -> int:
        """Seqnos in the range."""
        return max(0, self.high - self.low + 1)

    def rate(self) -> float:
        """Rows per second so far."""
        return self.rows / max(1e-6, time.monotonic() - self.started)

    def eta(self) -> float | None:
        """Seconds left at the seqno rate so far (None before any progress)."""
        if self.done <= 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.done * max(0, self.total - self.done)

    def advance_to(self, seqno: int, rows: int = 0) -> None:
        """Everything up to ``seqno`` is done; ``rows`` more rows went by."""
        self.rows += rows
        self.done = min(self.total, max(self.done, seqno - self.low + 1))
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.done,
                             rate=f"{self.rows:,} {self.unit} {self.rate():,.0f} {self.unit}/s")
            return
        now = time.monotonic()
        if now - self._last_line >= self.interval:
            self._last_line = now
            log.info("%s", self.line())

    def line(self) -> str:
        """The plain progress line."""
        eta = self.eta()
        left = "?" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.title}: seqno {self.low + self.done - 1} of {self.high} ({pct:.1f} %), "
                f"{self.rows:,} {self.unit}, {self.rate():,.0f} {self.unit}/s, ETA {left}")

    def close(self) -> None:
        """Finish the bar (or log the last line)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        else:
            log.info("%s (done in %.1f s)", self.line(), time.monotonic() - self.started)

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class CatchUp:
    """A consumer's progress through a backlog: shown only while it is far behind."""

    def __init__(self, title: str, threshold: int = 10_000) -> None:
        self.title = title
        self.threshold = threshold
        self._run: RunProgress | None = None

    def start(self, applied: int, tail: int) -> None:
        """The group stands at ``applied``, the THL ends at ``tail``."""
        self.stop()
        if tail - applied >= self.threshold:
            log.info("%s: catching up %d seqnos (%d..%d)", self.title, tail - applied,
                     applied + 1, tail)
            self._run = RunProgress(f"{self.title} catch-up", applied + 1, tail)

    def committed(self, seqno: int, rows: int) -> None:
        """A block up to ``seqno`` with ``rows`` rows committed."""
        if self._run is None:
            return
        self._run.advance_to(seqno, rows)
        if seqno >= self._run.high:
            self.stop()

    def stop(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None
