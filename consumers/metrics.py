"""Prometheus metrics of consumer groups: applied seqno, lag, events and rows, errors, values
changed by a target's value policy."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from replicator.state import State

_LABELS = ("service", "group")


@dataclass(frozen=True)
class _Families:
    seqno: Gauge
    latency: Gauge
    events: Counter
    rows: Counter
    errors: Counter
    online: Gauge
    changed: Counter
    channel_seqno: Gauge
    channel_events: Counter
    triggers: Gauge
    cascaded: Counter
    cascade_depth: Gauge
    collapsed: Counter
    set_refused: Counter


#: By the registry itself, weakly: keyed by id() a registry collected and a new one at the
#: same address got the dead one's families (its metrics then went nowhere).
_families: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _families_of(registry: CollectorRegistry) -> _Families:
    """One set of metric families per registry, shared by every group (labels tell apart)."""
    with _lock:
        found = _families.get(registry)
        if found is None:
            found = _Families(
                Gauge("trep_applied_last_seqno", "Last seqno committed on the target",
                      _LABELS, registry=registry),
                Gauge("trep_applied_latency_seconds",
                      "Source commit to target commit of the last applied seqno", _LABELS,
                      registry=registry),
                Counter("trep_applied_events", "THL events (seqnos) applied", _LABELS,
                        registry=registry),
                Counter("trep_applied_rows", "Row changes applied", _LABELS,
                        registry=registry),
                Counter("trep_consumer_errors", "Errors by kind", (*_LABELS, "kind"),
                        registry=registry),
                Gauge("trep_consumer_online", "1 when ONLINE", _LABELS, registry=registry),
                Counter("trep_values_changed",
                        "Values the target could not hold as they were, stored changed by "
                        "the group's policy (zero_date: stored as NULL, nul_character: "
                        "U+0000 stripped)", (*_LABELS, "kind"), registry=registry),
                Gauge("trep_channel_applied_last_seqno",
                      "Last seqno committed by one channel of a parallel group",
                      (*_LABELS, "channel"), registry=registry),
                Counter("trep_channel_applied_events",
                        "THL events (seqnos) applied by one channel of a parallel group",
                        (*_LABELS, "channel"), registry=registry),
                Gauge("trep_target_triggers",
                      "Triggers found on the target tables this group writes (each fires on "
                      "every applied row, on top of what the source's row images carry)",
                      _LABELS, registry=registry),
                Counter("trep_cascaded_rows",
                        "Child rows deleted or re-pointed by foreign-key cascades the binlog "
                        "does not hold, carried out by the group", _LABELS,
                        registry=registry),
                Gauge("trep_cascade_depth",
                      "Deepest foreign-key cascade chain carried out since the process "
                      "started (1: children of the changed row)", _LABELS,
                      registry=registry),
                Counter("trep_rows_collapsed",
                        "Row changes a SQL target got as net effects by primary key "
                        "(apply: set-based), committed", _LABELS, registry=registry),
                Counter("trep_set_based_refused",
                        "Blocks a SQL target refused in set-based form, applied again in "
                        "order", _LABELS, registry=registry))
            _families[registry] = found
        return found


class ConsumerMetrics:
    """The metrics of one consumer group."""

    def __init__(self, registry: CollectorRegistry, service: str, group: str) -> None:
        self._f = _families_of(registry)
        self._values = (service, group)
        #: Triggers found on target tables: ``schema.table`` -> "name (TIMING EVENT)"s.
        self._triggers: dict[str, list[str]] = {}
        self._f.triggers.labels(*self._values).set(0)
        self._f.cascaded.labels(*self._values).inc(0)
        self._f.cascade_depth.labels(*self._values).set(0)
        self._f.collapsed.labels(*self._values).inc(0)
        self._f.set_refused.labels(*self._values).inc(0)
        self._depth = 0
        # Counted for every event: the series looked up once (labels() takes a lock and
        # builds its key each call).
        self._rows = self._f.rows.labels(*self._values)

    @classmethod
    def disabled(cls) -> ConsumerMetrics:
        """Metrics kept in a private registry nobody scrapes."""
        return cls(CollectorRegistry(), "-", "-")

    def state(self, state: State) -> None:
        self._f.online.labels(*self._values).set(1 if state is State.ONLINE else 0)

    def error(self, kind: str) -> None:
        self._f.errors.labels(*self._values, kind).inc()

    def values_changed(self, kind: str, count: int = 1) -> None:
        """``count`` values of ``kind`` committed changed by a value policy (0: show the
        series before anything changed)."""
        self._f.changed.labels(*self._values, kind).inc(count)

    def target_triggers(self, table: str, found: list[str]) -> None:
        """The triggers an applier found on a target table (an empty list: none)."""
        with _lock:
            if found:
                self._triggers[table] = list(found)
            else:
                self._triggers.pop(table, None)
            self._f.triggers.labels(*self._values).set(
                sum(len(t) for t in self._triggers.values()))

    def trigger_notes(self) -> str:
        """``trepctl status``'s ``targetTriggers``: NONE, or each table's triggers."""
        with _lock:
            if not self._triggers:
                return "NONE"
            return "; ".join(f"{table}: {', '.join(found)}"
                             for table, found in sorted(self._triggers.items()))

    def cascaded(self, rows: int, depth: int) -> None:
        """A fragment's cascades changed ``rows`` child rows, ``depth`` levels deep."""
        self._f.cascaded.labels(*self._values).inc(rows)
        gauge = self._f.cascade_depth.labels(*self._values)
        with _lock:
            self._depth = max(self._depth, depth)
            gauge.set(self._depth)

    def collapsed(self, rows: int) -> None:
        """A set-based block committed with ``rows`` row changes collapsed by key."""
        self._f.collapsed.labels(*self._values).inc(rows)

    def set_refused(self, blocks: int = 1) -> None:
        """Set-based blocks refused by the target: they go again, in order."""
        self._f.set_refused.labels(*self._values).inc(blocks)

    def rows(self, rows: int) -> None:
        """A block of ``rows`` row changes committed."""
        self._rows.inc(rows)

    def applied(self, events: int, last_seqno: int, latency: float) -> None:
        """A block of ``events`` seqnos committed, up to ``last_seqno``."""
        self._f.events.labels(*self._values).inc(events)
        self._f.seqno.labels(*self._values).set(last_seqno)
        self._f.latency.labels(*self._values).set(latency)

    def channel_applied(self, channel: int, events: int, seqno: int) -> None:
        """Channel ``channel`` of a parallel group committed ``events`` seqnos (0: moved its
        position only), its position now ``seqno``."""
        self._f.channel_events.labels(*self._values, str(channel)).inc(events)
        self._f.channel_seqno.labels(*self._values, str(channel)).set(seqno)
