"""CPython's cyclic garbage collector set for a long-running replicator process.

A consumer group or an extractor makes several container objects per row change (the
values' tuples, lists, the event objects) which live for a block at most and are freed by
their reference counts; the cyclic collector still counts every one and, each 700, walks
the youngest generation, every tenth time the middle one too, which by then holds whatever a
block keeps alive (its collapsed rows). ``perf`` on a MariaDB group applying
bench-compare's workload put 20% of its CPU in the collector (``gc_collect_main`` 13%, its
visits the rest), for no cycle found.

So, once a process has started: the objects that live as long as it does (modules, classes,
configuration, the components) are moved out of the collector's sight (``gc.freeze``), and
the youngest generation is walked every ``GEN0_THRESHOLD`` container allocations. Cycles
are still collected, in fewer passes. No full collection first: after a group's imports it
found 5 unreachable objects among 71,000 and cost 44 ms of the start (2026-12-02)."""

from __future__ import annotations

import gc
import sys

#: Container allocations (less deallocations) between two walks of the youngest generation
#: (CPython's default: 700).
GEN0_THRESHOLD = 50_000


def quiet_start(*programs: str) -> None:
    """No cyclic collection while the process starts, if it runs as one of ``programs`` (its
    console script, or its module's path for ``python -m``; never when its module is
    imported by another program, such as the tests). A start makes about 70,000 objects
    that live as long as the process, modules and classes, and no garbage, which the
    collector walked every 700 of them: 40-50 ms of the 0.4 s a consumer group's imports
    took here. ``tune_for_throughput`` turns it back on."""
    if sys.argv and sys.argv[0].endswith(programs):
        gc.disable()


def tune_for_throughput() -> None:
    """Freeze what exists now and walk the youngest generation less often (call once the
    process has started, before its work; the collector on again after ``quiet_start``)."""
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, middle, oldest)
    gc.enable()
