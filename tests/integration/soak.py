"""How hard the fault tests push: a few kills in ``make test``, the long runs in ``make soak``.

Every kill test runs in both tiers: ``make test`` proves each fault path once or a few
times, ``make soak`` (``TREP_SOAK=1``) repeats it as many times as a release deserves.
"""

from __future__ import annotations

import os

#: ``make soak``: the long versions of the fault tests.
SOAK = os.environ.get("TREP_SOAK", "") not in ("", "0")


def kills(quick: int = 3, soak: int = 20) -> int:
    """How many kills a kill test does in this tier."""
    return soak if SOAK else quick


def outage_s(quick: float = 10.0, soak: float = 30.0) -> float:
    """How long an outage test keeps a server down in this tier: long enough in ``make
    test`` for the retries to run and the workload to pile up behind the outage."""
    return soak if SOAK else quick
