"""What an operator may do from the console, as ``trepctl`` does it: a consumer group's
``online`` (optionally skipping seqnos) and ``offline``, each logged with who asked."""

from __future__ import annotations

import logging
from collections.abc import Callable

from replicator.control import ComponentNodes, Desired, parse_seqno_ranges, request

#: Every action, with who did it: the console's audit trail.
audit = logging.getLogger("console.audit")

ACTIONS = ("online", "offline", "skip")


class ActionRefused(ValueError):
    """A request the console will not send (unknown action, bad seqnos)."""


def change_for(action: str, skip: str = "") -> Callable[[Desired], None]:
    """The desired-state change of ``action`` (``skip``: ``online --skip-seqno``)."""
    if action == "offline":
        def offline(d: Desired) -> None:
            d.state = "OFFLINE"
        return offline
    if action not in ("online", "skip"):
        raise ActionRefused(f"unknown action {action!r}")
    skips: list[int] = []
    if action == "skip":
        try:
            skips = parse_seqno_ranges(skip)
        except ValueError as exc:
            raise ActionRefused(f"seqnos to skip: {exc}") from exc
        if not skips:
            raise ActionRefused("give the seqnos to skip")

    def online(d: Desired) -> None:
        d.state = "ONLINE"
        d.skip_seqnos = sorted({*d.skip_seqnos, *skips})
    return online


def act(nodes: ComponentNodes, service: str, group: str, action: str, skip: str,
        user: str) -> None:
    """Send the request and log it (refusals raise ``ActionRefused`` before anything)."""
    change = change_for(action, skip)
    request(nodes, change)
    audit.info("user %s: %s of group %s of service %s%s", user, action, group, service,
               f" (seqnos {skip})" if action == "skip" else "")
