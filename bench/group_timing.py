"""One consumer group timed alone, from its process's start until its stored position
reaches the THL's tail.

The position is polled every 50 ms; every applier writes it with (or right after) the
block it covers, so the end is exact to the poll. The first position seen marks the end of
the start-up (imports, ZooKeeper, Kafka, the epoch handshake): from there to the end is the
steady part, the applier's own rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processes import cpu_seconds, start_runner, stop

#: How often the stored position is read while a group is timed: the end of a run is seen
#: this late at most. bench-compare reads the native replica's SQL thread as often, so
#: neither side's figure carries more of it (0.05 s here made a MariaDB group's 1.4-3 s run
#: look up to 1-2% slower than the replica's).
POLL_S = 0.02


@dataclass(frozen=True)
class FirstCommit:
    """The first position seen: when, which seqno, and the CPU seconds used until then."""

    at: float
    seqno: int
    cpu: float


@dataclass(frozen=True)
class GroupRun:
    """A timed run: monotonic start and end, the process's CPU seconds, its first commit."""

    started: float
    ended: float
    cpu: float
    first: FirstCommit | None

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def figures(self, rows: int, tail: int) -> dict[str, Any]:
        """Every rate of the run over ``rows`` rows in seqnos 0..``tail``, rounded as the
        results show them; the steady ones only when a first commit came before the end."""
        events = tail + 1
        out: dict[str, Any] = {
            "wall_seconds": round(self.seconds, 2),
            "rows_per_second": round(rows / self.seconds),
            "events_per_second": round(events / self.seconds),
            "cpu_seconds": round(self.cpu, 2),
            "cpu_seconds_per_million_rows": round(self.cpu / rows * 1e6, 1),
        }
        first = self.first
        if first is not None and self.ended > first.at:
            # Rows applied between the first commit seen and the last.
            steady_rows = rows * (tail - first.seqno) / events
            out["steady_rows_per_second"] = round(steady_rows / (self.ended - first.at))
            if steady_rows:
                out["steady_cpu_seconds_per_million_rows"] = round(
                    (self.cpu - first.cpu) / steady_rows * 1e6, 1)
            out["startup_seconds"] = round(first.at - self.started, 2)
        return out


def pick(figures: dict[str, Any], *names: str) -> dict[str, Any]:
    """The named figures that are there, in that order."""
    return {name: figures[name] for name in names if name in figures}


def time_group(config: Path, log: Path, group: str, position: Callable[[], int], tail: int,
               timeout: float, cpu_children: bool = False,
               online: Callable[[], bool] | None = None) -> GroupRun:
    """Start ``group`` alone (``trep-run --no-extractor --consumer``) and time it until
    ``position()`` (its stored seqno, -1 before the first commit) reaches ``tail``; CPU
    seconds with those of its reaped children when ``cpu_children``.

    ``online``: the group starts OFFLINE (``auto_online: false``); ``online()`` asks for
    ONLINE once the process is ready (False until then), and the run is timed from there,
    as ``START SLAVE SQL_THREAD`` times a replica's SQL thread on a running server."""
    started = now = time.monotonic()
    proc = start_runner(config, log, "--no-extractor", "--consumer", group)
    first: FirstCommit | None = None
    cpu0 = 0.0
    try:
        while online is not None:
            if online():
                started = time.monotonic()
                cpu0 = cpu_seconds(proc.pid, cpu_children)
                break
            if proc.poll() is not None:
                raise SystemExit(f"consumer group {group} exited; see {log}")
            if time.monotonic() - started > timeout:
                raise SystemExit(f"consumer group {group} did not start within {timeout} s; "
                                 f"see {log}")
            time.sleep(0.05)
        while True:
            seqno = position()
            now = time.monotonic()
            # Before poll(): a process that exited but is not reaped still has its figures.
            cpu = cpu_seconds(proc.pid, cpu_children) - cpu0
            if seqno >= 0 and first is None:
                first = FirstCommit(now, seqno, cpu)
            if seqno >= tail:
                break
            if proc.poll() is not None:
                raise SystemExit(f"consumer group {group} exited; see {log}")
            if now - started > timeout:
                raise SystemExit(f"consumer group {group} did not reach seqno {tail} within "
                                 f"{timeout} s; see {log}")
            time.sleep(POLL_S)
        cpu = cpu_seconds(proc.pid, cpu_children) - cpu0
    finally:
        stop(proc)
    return GroupRun(started, now, cpu, first)
