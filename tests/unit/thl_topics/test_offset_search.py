"""The search for a seqno's offset over simulated THL layouts: the same answer as a scan of
every record, in a handful of probes where the layout is even, and a bounded number where it
is not."""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

import pytest

from thl_topics.offset_search import Key, search


@dataclass
class Topic:
    """Kept records (offset, key) in offset order; ``end`` is the high watermark."""

    records: list[tuple[int, Key]]
    end: int

    @property
    def low(self) -> int:
        return self.records[0][0] if self.records else self.end

    def first_at(self, offset: int) -> tuple[int, Key] | None:
        i = bisect.bisect_left([o for o, _ in self.records], offset)
        return self.records[i] if i < len(self.records) else None

    def answer(self, target: Key) -> tuple[int, Key] | None:
        return next((r for r in self.records if r[1] >= target), None)


def layout(seqnos: int, rng: random.Random, per_commit: tuple[int, int] = (1, 10),
           fragments: float = 0.05, aborted: float = 0.02, purged: int = 0) -> Topic:
    """A THL as the extractor writes it: transactions of several events, a marker after
    each, some events in two fragments, some transactions aborted, the first records gone."""
    records: list[tuple[int, Key]] = []
    offset = seqno = 0
    while seqno < seqnos:
        abort = rng.random() < aborted
        for _ in range(rng.randint(*per_commit)):
            for fragno in range(2 if rng.random() < fragments else 1):
                if not abort:
                    records.append((offset, (seqno, fragno)))
                offset += 1
            if not abort:
                seqno += 1
        offset += 1  # the commit's (or abort's) marker
    return Topic(records[purged:], offset)


def found(topic: Topic, target: Key) -> tuple[tuple[int, Key] | None, int]:
    """The record ``search`` leads to, and how many probes it took."""
    probes = 0

    def probe(offset: int) -> tuple[int, Key] | None:
        nonlocal probes
        probes += 1
        return topic.first_at(offset)

    at = search(target, topic.low, topic.end, probe)
    return topic.first_at(at), probes


LAYOUTS = {
    "even": {},
    "a marker per event": {"per_commit": (1, 1)},
    "purged start": {"purged": 5_000},
    "uneven": {"per_commit": (1, 200), "fragments": 0.3, "aborted": 0.2},
}


@pytest.mark.parametrize("shape", LAYOUTS)
def test_every_target_leads_to_the_first_record_at_or_after_it(shape: str) -> None:
    rng = random.Random(shape)
    topic = layout(20_000, rng, **LAYOUTS[shape])  # type: ignore[arg-type]
    last = topic.records[-1][1][0]
    targets = [(rng.randrange(last + 2), rng.randrange(2)) for _ in range(300)]
    targets += [topic.records[0][1], (0, 0), (last, 0), (last, 1), (last + 1, 0), (10**9, 0)]
    bound = 3 * math.ceil(math.log2(topic.end)) + 2
    for target in targets:
        record, probes = found(topic, target)
        assert record == topic.answer(target), target
        assert probes <= bound, (target, probes)


def test_an_even_layout_takes_far_fewer_probes_than_a_binary_search() -> None:
    rng = random.Random(1)
    topic = layout(20_000, rng)
    counts = [found(topic, (rng.randrange(20_000), 0))[1] for _ in range(300)]
    binary = math.ceil(math.log2(topic.end))
    assert binary == 15
    assert sum(counts) / len(counts) <= 7, counts
    assert max(counts) <= binary, counts


def test_the_first_record_wanted_takes_one_probe() -> None:
    topic = layout(1_000, random.Random(2), purged=100)
    record, probes = found(topic, (0, 0))
    assert record == topic.records[0] and probes == 1


def test_an_empty_range_probes_nothing() -> None:
    assert search((5, 0), 7, 7, lambda offset: pytest.fail("probed")) == 7
