"""Where a seqno is in the THL topic: a search over offsets, each probe one Kafka fetch.

The THL's offsets grow with its keys (seqno, fragno), and nearly evenly: one record per
fragment, plus a transaction marker per commit, chunks of large fragments, aborted records
and purged ones. So the search interpolates, as one looks a word up in a dictionary, and
bisects after two guesses in a row that did not halve the range. On simulated THLs of
20,000 seqnos (``tests/unit/thl_topics/test_offset_search.py``) it takes about six probes
where a binary search takes 15 (each a fetch of 3-25 ms), and on the most uneven layouts
never more than three times a binary search's count.
"""

from __future__ import annotations

from collections.abc import Callable

Key = tuple[int, int]
"""A record's key: (seqno, fragno)."""

Probe = Callable[[int], "tuple[int, Key] | None"]
"""The first record at or after an offset: (its offset, its key), None if there is none."""


def search(target: Key, low: int, high: int, probe: Probe) -> int:
    """The offset from which the first record with a key at or after ``target`` is read,
    within the offsets ``low`` (the first kept) to ``high`` (one past the last).

    Every record before the returned offset has a smaller key, and the first record at or
    after it (if any) has a key at or after ``target``.
    """
    lo, hi = low, high
    seen = _Seen()
    misses = 0  # guesses in a row that did not halve the range
    while lo < hi:
        span = hi - lo
        guessed = seen.last is not None  # the first probe is at ``lo``, not a guess
        at = (lo + hi) // 2 if misses >= 2 else seen.guess(target[0], lo, hi)
        found = probe(at)
        if found is None or found[0] >= hi:
            hi = at  # nothing kept from ``at`` to ``hi``
        elif found[1] >= target:
            hi = at
            seen.above = (at, found[1][0])
        else:
            lo = found[0] + 1
            seen.below(found[0], found[1][0])
        if misses >= 2 or (hi - lo) * 2 <= span:
            misses = 0
        elif guessed:
            misses += 1
    return lo


class _Seen:
    """What the probes found: the ends the next guess interpolates between."""

    def __init__(self) -> None:
        #: The first and the last record found before the target: (offset, seqno).
        self.first: tuple[int, int] | None = None
        self.last: tuple[int, int] | None = None
        #: The last probe that found the target or a record after it: (offset, seqno).
        self.above: tuple[int, int] | None = None

    def below(self, offset: int, seqno: int) -> None:
        if self.first is None:
            self.first = (offset, seqno)
        self.last = (offset, seqno)

    def guess(self, seqno: int, lo: int, hi: int) -> int:
        """The offset to probe next, in [lo, hi)."""
        if self.last is None or self.first is None:
            # Where a reader usually starts (the beginning, or a seqno the topic starts
            # after): the first probe answers it.
            return lo
        offset, found = self.last
        if self.above is not None and self.above[1] > found:
            rate = (self.above[0] - offset) / (self.above[1] - found)
        elif found > self.first[1]:
            rate = (offset - self.first[0]) / (found - self.first[1])
        else:
            rate = 1.0  # at least one record per seqno, where nothing was purged
        guess = offset + int((seqno - found) * rate)
        return min(max(guess, lo), hi - 1)
