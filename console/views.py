"""What the console shows of a service: its extractor and consumer groups, read from
ZooKeeper as ``trepctl status`` reads them, and the lag history the console samples itself.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace

from thl_topics.event import DataItem, RowChange, ThlEvent

#: What an anonymous reader sees in place of a value or a statement's text.
HIDDEN = "(hidden: log in to see values)"

#: Seconds between two samples of every component (lag chart, rows/s).
SAMPLE_EVERY_S = 5.0
#: Lag samples kept per component: an hour of them.
HISTORY = int(3600 / SAMPLE_EVERY_S)


@dataclass
class LagHistory:
    """(time, lag seconds) samples per component, the newest last; and each group's rows/s
    between its last two samples (from ``appliedRows``)."""

    samples: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    rows: dict[str, tuple[float, int]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)

    def add(self, component: str, lag: float, now: float | None = None,
            applied_rows: int | None = None) -> None:
        at = time.time() if now is None else now
        kept = self.samples.setdefault(component, deque(maxlen=HISTORY))
        kept.append((at, lag))
        if applied_rows is not None:
            before = self.rows.get(component)
            if before is not None and at > before[0] and applied_rows >= before[1]:
                self.rates[component] = round((applied_rows - before[1]) / (at - before[0]), 1)
            self.rows[component] = (at, applied_rows)

    def of(self, component: str) -> list[tuple[float, float]]:
        return list(self.samples.get(component, ()))


def redacted(event: ThlEvent) -> ThlEvent:
    """The event as an anonymous reader sees it: its shape (tables, actions, columns, row
    counts), no value and no statement text."""
    data: list[DataItem] = []
    for item in event.data:
        if isinstance(item, RowChange):
            data.append(replace(item, column_values=[[HIDDEN] * len(r)
                                                     for r in item.column_values],
                                key_values=[[HIDDEN] * len(r) for r in item.key_values]))
        else:
            data.append(replace(item, sql=HIDDEN))
    return replace(event, data=data)


def svg_points(samples: list[tuple[float, float]], width: int = 600, height: int = 120
               ) -> str:
    """The samples as an SVG polyline's points, time across and lag up (no chart library:
    the page stays server-rendered)."""
    if not samples:
        return ""
    t0, t1 = samples[0][0], samples[-1][0]
    top = max(max(lag for _, lag in samples), 1.0)
    span = max(t1 - t0, 1.0)
    return " ".join(f"{(t - t0) / span * width:.1f},{height - lag / top * height:.1f}"
                    for t, lag in samples)
