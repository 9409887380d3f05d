"""MySQL's zero and partial dates on targets that have no such date: one policy, one count.

MariaDB accepts '0000-00-00', '2024-00-00' and '2024-03-00 10:00:00' (``sql_mode`` without
NO_ZERO_DATE / NO_ZERO_IN_DATE); the THL carries them exactly as stored, as text
(``thl_topics.values``). No calendar type outside the MySQL family holds them, so each
target kind's ``zero_dates`` setting says what they become:

- ``null`` (the default): the value is stored as NULL, counted in
  ``trep_values_changed_total{kind="zero_date"}`` when its block commits, and logged at
  most once a minute per column;
- ``text``: the text MySQL prints, where the store can hold text in that field (MongoDB);
- ``error``: the group stops at the seqno with a data error naming table and column.

MySQL-family SQL targets store them as they are, whatever the setting. The SQL applier
(PostgreSQL, Oracle) keeps its own count in its value policy (``consumers.sql.types``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

from consumers.metrics import ConsumerMetrics
from thl_topics.event import ColumnSpec, RowChange
from thl_topics.values import incomplete_date

ZeroDates = Literal["null", "text", "error"]

#: One warning per table and column at most this often.
_WARN_EVERY_S = 60.0
_DATE_TYPES = frozenset({"DATE", "DATETIME", "TIMESTAMP"})


def date_column(spec: ColumnSpec) -> bool:
    """A column whose values may be zero or partial dates."""
    return spec.type.upper() in _DATE_TYPES


class ZeroDateRefused(ValueError):
    """A zero date under ``zero_dates: error``."""

    def __init__(self, column: str, value: str) -> None:
        super().__init__(f"column {column}: zero date {value!r} (zero_dates: error; set "
                         "zero_dates: null to store it as NULL)")
        self.column = column


def zero_or_value(value: object, column: str, policy: ZeroDates) -> tuple[object, bool]:
    """``value`` as ``policy`` stores it, and whether it was a zero date made NULL."""
    if not isinstance(value, str) or not incomplete_date(value):
        return value, False
    if policy == "error":
        raise ZeroDateRefused(column, str(value))
    if policy == "text":
        return value, False
    return None, True


class ZeroDateTally:
    """Zero dates stored as NULL in the open block, counted once the block commits."""

    def __init__(self, target: str, metrics: ConsumerMetrics, log: logging.Logger) -> None:
        self.target = target
        self.metrics = metrics
        self.log = log
        self._open: Counter[tuple[str, str]] = Counter()
        self._warned: dict[tuple[str, str], float] = {}
        # A zero-valued series from the start, so a dashboard sees it before any change.
        metrics.values_changed("zero_date", 0)

    def note(self, table: str, column: str) -> None:
        self._open[table, column] += 1

    def rollback(self) -> None:
        """The block is rolled back: what it changed never happened."""
        self._open.clear()

    def take(self) -> Counter[tuple[str, str]]:
        """The open block's zero dates, handed over to a commit that finishes later
        (``count``); the next block starts from none."""
        done, self._open = self._open, Counter()
        return done

    def commit(self, seqno: int) -> None:
        """The block up to ``seqno`` committed: count and warn."""
        self.count(self.take(), seqno)

    def count(self, done: Counter[tuple[str, str]], seqno: int) -> None:
        """``done`` (a block's ``take``) committed with the block up to ``seqno``."""
        now = time.monotonic()
        for (table, column), count in sorted(done.items()):
            self.metrics.values_changed("zero_date", count)
            if now - self._warned.get((table, column), -_WARN_EVERY_S) >= _WARN_EVERY_S:
                self._warned[table, column] = now
                self.log.warning(
                    "%s: %s.%s: %d zero date(s) stored as NULL in the block up to seqno %d "
                    "(zero_dates: null; counted in trep_values_changed_total"
                    "{kind=\"zero_date\"})", self.target, table, column, count, seqno)


def count_zero_dates(tally: ZeroDateTally, table: str, change: RowChange) -> None:
    """Note the zero dates of ``change``'s after images (stored as NULL)."""
    specs = change.column_specs
    dates = [i for i, spec in enumerate(specs) if date_column(spec)]
    if dates:
        for row in change.column_values:
            note_zero_dates(tally, table, specs, dates, row)


def note_zero_dates(tally: ZeroDateTally, table: str, specs: Sequence[ColumnSpec],
                    dates: Iterable[int], row: Sequence[object]) -> None:
    """Note the zero dates of one after image ``row`` at the positions ``dates`` (those of
    ``date_column`` specs)."""
    for i in dates:
        value = row[i]
        if isinstance(value, str) and incomplete_date(value):
            tally.note(table, specs[i].name)
