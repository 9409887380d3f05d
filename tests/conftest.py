"""Marks every test under tests/integration so ``-m 'not integration'`` runs the fast tier,
and stops at the end of a run the servers the run started.

Under pytest-xdist these hooks run in the controller too, which outlives every worker: it
alone decides what to stop, so no worker stops a server another one still uses.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_INTEGRATION = Path(__file__).parent / "integration"
#: The stack's servers that were running when the run began (None in an xdist worker).
_before: set[str] | None = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    # xdist hands tests out in this order. The long ones first, so none of them ends the
    # run alone; tests that take a server down run alone (tests/integration/sharing.py),
    # so last, when the other workers are running out of work anyway, instead of idling
    # them mid-run. (A stable sort: every worker must see the same order.)
    items.sort(key=lambda item: (item.get_closest_marker("exclusive") is not None,
                                 item.get_closest_marker("slow") is None))


def _running() -> set[str]:
    from stack import services

    return {name for name in services.NAMES if services.get(name).running()}


def pytest_sessionstart(session: pytest.Session) -> None:
    global _before
    if "PYTEST_XDIST_WORKER" not in os.environ:
        _before = _running()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _before is None:
        return
    from stack import services

    started = _running() - _before
    for name in reversed(services.NAMES):
        if name in started:
            services.get(name).stop()
