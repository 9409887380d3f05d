"""What the consumer runtime needs from a target: the contract every applier implements.

The runtime owns ordering, fragments, blocks, retries and states; an applier only knows its
target. A block is opened with ``begin``, receives whole seqnos fragment by fragment through
``apply``, and is made durable together with its position by ``commit``: the target's own
store is the source of truth for where this consumer is.
"""

from __future__ import annotations

from typing import Protocol

from replicator.tracking import CommitSeqno
from thl_topics.event import ThlEvent


class Applier(Protocol):
    """One target of one consumer group."""

    #: Printable target (no secrets), for errors and status.
    target: str

    def connect(self) -> None:
        """Open the target and create the tracking store if missing (TransientError if down)."""

    def position(self) -> CommitSeqno | None:
        """The last seqno committed on the target, or None if it never applied anything."""

    def isolates(self, event: ThlEvent) -> bool:
        """True if ``event`` must be applied alone in its block (e.g. DDL with implicit commit)."""

    def begin(self) -> None:
        """Open a block (a target transaction)."""

    def apply(self, event: ThlEvent) -> None:
        """Apply one fragment inside the open block (DataError if the target refuses it)."""

    def skip(self, event: ThlEvent) -> None:
        """An operator skipped this seqno: do not apply its data, only move past it."""

    def commit(self, last: ThlEvent) -> None:
        """Write ``last`` as the position in the same transaction, then commit the block."""

    def rollback(self) -> None:
        """Abandon the open block, if any; must not raise."""

    def reset(self) -> None:
        """Forget the stored position (``trepctl reset``)."""

    def close(self) -> None:
        """Release the target; must not raise."""
