"""Heartbeats (``trepctl heartbeat``): a source row that every target records with its lag.

The row travels through the THL as an ordinary row change of the source's
``tungsten_<service>.heartbeat`` table; the runtime takes it out of the event and hands the
applier a ``Heartbeat`` with this target's arrival time, so every kind of target measures lag
the same way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

from thl_topics.event import RowAction, RowChange
from thl_topics.values import from_thl

HEARTBEAT_TABLE = "heartbeat"


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat as a target records it (Tungsten's ``heartbeat`` table columns)."""

    id: int
    name: str
    salt: int
    seqno: int
    event_id: str
    source_tstamp: dt.datetime | None
    target_tstamp: dt.datetime
    lag_millis: int | None


def heartbeats(change: RowChange, seqno: int, event_id: str,
               now: dt.datetime | None = None) -> Iterator[Heartbeat]:
    """The heartbeats of a row change of the heartbeat table (none for a delete)."""
    if change.action is RowAction.DELETE:
        return
    now = now or dt.datetime.now(dt.UTC)
    for raw in change.column_values:
        row = {spec.name: from_thl(spec, value)
               for spec, value in zip(change.column_specs, raw, strict=True)}
        source = row.get("source_tstamp")
        lag = None
        if isinstance(source, dt.datetime):
            source = source if source.tzinfo else source.replace(tzinfo=dt.UTC)
            lag = int((now - source).total_seconds() * 1000)
        else:
            source = None
        yield Heartbeat(id=_int(row.get("id")), name=str(row.get("name") or ""),
                        salt=_int(row.get("salt")), seqno=seqno, event_id=event_id,
                        source_tstamp=source, target_tstamp=now, lag_millis=lag)


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
