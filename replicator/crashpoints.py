"""Named crash points: ``TREP_CRASH_AT=<point>[:<n>]`` kills the process at an exact step.

The n-th time (default: the first) the process passes ``<point>`` it exits at once with
status 137, as a SIGKILL would: no cleanup, no flush, no rollback. Tests arm one point per
process to prove that a restart from there loses nothing and applies nothing twice.

Points (where they are, and what is durable when the process dies there):

=========================  ===============================================================
``apply-handshake``        consumer: stored position read, before seeking the THL
``apply-between-fragments`` consumer: a fragment of a seqno applied, the next not yet
``apply-after-ddl``        SQL consumer: a DDL ran (MySQL committed it), its position not
``apply-between-tables``   warehouse consumer: one table of the block merged into Delta,
                           the next table not yet
``apply-before-position``  consumer: the block's data written, the position not yet
``apply-commit-sent``      consumer with overlapped commits: the block's last round trip
                           sent with its position, not committed; the next block comes
``apply-committed``        consumer: data and position committed, ZooKeeper mirror and
                           Kafka offset not yet
``extract-between-fragments`` extractor: a fragment produced, the next not yet
``extract-committed``      extractor: Kafka transaction committed, the source's
                           ``trep_commit_seqno`` and the ZooKeeper mirror not yet
``extract-xa-open``        extractor: a Kafka transaction committed while an XA
                           transaction with replicated changes is prepared and not yet
                           decided (between its PREPARE and its COMMIT or ROLLBACK);
                           positions written
=========================  ===============================================================
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

POINTS = frozenset({
    "apply-handshake", "apply-between-fragments", "apply-after-ddl", "apply-before-position",
    "apply-between-tables", "apply-commit-sent", "apply-committed", "extract-between-fragments",
    "extract-committed", "extract-xa-open",
})
ENV = "TREP_CRASH_AT"
EXIT_STATUS = 137


def _parse(spec: str) -> tuple[str, int]:
    point, _, count = spec.partition(":")
    if point not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: unknown crash point {point!r}; known: "
                         f"{', '.join(sorted(POINTS))}")
    if count and (not count.isdigit() or int(count) < 1):
        raise ValueError(f"{ENV}={spec!r}: the count after ':' must be 1 or more")
    return point, int(count or 1)


_armed: tuple[str, int] | None = _parse(os.environ[ENV]) if os.environ.get(ENV) else None
_passed = 0
_lock = threading.Lock()


def reached(point: str) -> None:
    """Exit with status 137 here if this point is armed and this is its n-th pass."""
    global _passed
    if _armed is None or _armed[0] != point:
        return
    with _lock:
        _passed += 1
        if _passed < _armed[1]:
            return
    sys.stderr.write(f"crash point {point} reached (pass {_passed}): exiting with "
                     f"{EXIT_STATUS}\n")
    sys.stderr.flush()
    os._exit(EXIT_STATUS)
