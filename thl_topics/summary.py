"""What ``thl info`` and the console say of a THL topic: seqno range, epochs, records and
bytes, read from the record headers (no value is decoded)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from thl_topics.reader import ThlReader
from thl_topics.records import RecordHeaders, parse_chunk


@dataclass
class ThlSummary:
    """First and last seqno kept, offsets, records, value bytes, and events per epoch."""

    low: int
    high: int
    first: int | None = None
    last: int | None = None
    records: int = 0
    size: int = 0
    epochs: Counter[int] = field(default_factory=Counter)


def summarize(reader: ThlReader) -> ThlSummary:
    """One pass over the topic's records, headers only."""
    low, high = reader.watermarks()
    found = ThlSummary(low, high)
    for msg in reader.raw(low, high):
        found.records += 1
        found.size += len(msg.value() or b"")
        try:
            h = RecordHeaders.parse(msg.headers())
        except (KeyError, ValueError):
            continue
        chunk = parse_chunk(msg.key() or b"")
        if h.fragno == 0 and (chunk is None or chunk[0] == 0):
            found.epochs[h.epoch] += 1
        found.first = h.seqno if found.first is None else found.first
        found.last = h.seqno
    return found
