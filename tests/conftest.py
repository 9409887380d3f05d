"""Marks every test under tests/integration so ``-m 'not integration'`` runs the fast tier,
and stops at the end of a run the servers the run started.

Under pytest-xdist these hooks run in the controller too, which outlives every worker: it
alone decides what to stop, so no worker stops a server another one still uses.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.harness.processes import kill_orphans, own_spawned
from tests.integration.sharing import CORE, take_started

_INTEGRATION = Path(__file__).parent / "integration"


@pytest.hookimpl(trylast=True)  # after the conformance hook has marked its exclusive tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    # xdist hands tests out in this order (one at a time: the Makefile's --maxschedchunk).
    # A test that takes one target down first: it waits for every test using that server
    # and holds them back, which costs least while few of them have started (mid-run, one
    # kept two workers idle for two minutes); one per server, so that they run side by
    # side. The long ones next, so that none of them ends the run alone, then the other
    # tests that take a target down. Those that take a server every test needs run alone
    # (tests/integration/sharing.py), so last. (A stable sort: every worker must see the
    # same order.)
    taken: set[tuple[str, ...]] = set()
    ranks = {item.nodeid: _rank(item, taken) for item in items}  # in collection order
    items.sort(key=lambda item: ranks[item.nodeid])
    _spread(items, [i for i in items if ranks[i.nodeid] == 1 and _spark(i)][1:],
            [i for i in items if ranks[i.nodeid] == 3
             and _INTEGRATION in Path(str(i.fspath)).parents])


def _spark(item: pytest.Item) -> bool:
    """A test of the warehouse's own suite: its Spark work takes a core for minutes."""
    return _INTEGRATION / "warehouse" in Path(str(item.fspath)).parents


def _spread(items: list[pytest.Item], apart: list[pytest.Item],
            among: list[pytest.Item]) -> None:
    """Move each of ``apart`` into ``among`` at equal distances: started together (one
    run, 2026-11-27), the two longest Spark tests took 347 and 248 s, against 226 and
    164 s in a run where one followed the other."""
    if not apart or not among:
        return
    for item in apart:
        items.remove(item)
    step = len(among) // (len(apart) + 1)
    for n, item in enumerate(apart, start=1):
        items.insert(items.index(among[n * step]), item)


def _rank(item: pytest.Item, taken: set[tuple[str, ...]]) -> int:
    """0: the first to take its target down; 1: long; 2: another taking a target down;
    3: the rest; 4: alone."""
    mark = item.get_closest_marker("exclusive")
    if mark is None:
        return 1 if item.get_closest_marker("slow") is not None else 3
    if not mark.args or set(mark.args) & CORE:
        return 4
    if mark.args in taken:
        return 2
    taken.add(mark.args)
    return 0


def pytest_sessionstart(session: pytest.Session) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        take_started()  # a list left by a dead run of the same process id
        killed = kill_orphans()
        if killed:
            print(f"killed {len(killed)} trep process(es) left by a killed test run: "
                  f"{', '.join(map(str, killed))}")
    own_spawned()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    from stack import services

    # Only what this run's own workers started (tests/integration/sharing.py): a run of the
    # unit tests beside an integration run once stopped every server the other one had
    # started in the meantime.
    started = take_started()
    for name in reversed(services.NAMES):
        if name in started:
            services.get(name).stop()
