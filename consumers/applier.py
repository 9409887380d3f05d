"""What the consumer runtime needs from a target: the contract every applier implements.

The runtime owns everything that is the same for every target: the handshake, ordering,
fragments, blocks, filters, heartbeats, skips, retries and states. An applier only knows its
target. What it can do is data (``Capabilities``), read by the runtime; nothing outside the
registry of applier types branches on what kind of target it is.

A block is opened with ``begin``, receives whole seqnos fragment by fragment through
``apply`` (and heartbeats through ``heartbeat``), and is made durable together with its
position by ``commit``. The target's own store is the source of truth for where the group
is: ``position`` reads it back, and ``commit`` writes it as a compare-and-set against the
position this applier last read or wrote, so a second writer of the same group is refused
(``PositionConflict``) instead of applying twice.

Failure and resume semantics, for every applier:

- ``commit`` returned: the block's data and its position are durable.
- Anything raised before ``commit`` returned: the runtime calls ``rollback`` and starts again
  from ``position()``. A *transactional* applier has then written nothing of the block; a
  *seqno-guarded* one may have written part of its data, and applying the same seqnos again
  must leave the target exactly as one application would (every write is guarded by the
  seqno, so a replay never goes backwards).
- A crash between the data and the position write (the named crash point
  ``apply-before-position``) is the same case.

An applier may also commit in two steps (``Pipelined``): ``commit_begin`` sends the block
and its position and returns a ``PendingCommit`` at once, so the runtime reads and applies
the next block while the target works; ``finish`` waits for the answer. The block is
durable, and counted as committed by the runtime, only once ``finish`` returned.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from consumers.heartbeat import Heartbeat
from consumers.position import Position
from thl_topics.event import ThlEvent
from thl_topics.schema_change import SchemaChange


class Atomicity(StrEnum):
    """How an applier keeps a block's data and its position together."""

    #: Data and position commit in one target transaction.
    TRANSACTIONAL = "transactional"
    #: No multi-write transaction: every write carries the seqno and an older one never
    #: overwrites a newer one, so a replayed block converges; the position is written last.
    SEQNO_GUARDED = "seqno-guarded"


class StatementPolicy(StrEnum):
    """What a target does with statement events (DDL, statement-format DML)."""

    #: Run them (MySQL-family SQL targets); a DDL commits alone, in a block of its own.
    APPLY = "apply"
    #: Leave them out (the target creates or evolves its tables from the row changes).
    SKIP = "skip"
    #: Stop the group at the statement's seqno (OFFLINE:ERROR).
    ERROR = "error"


@dataclass(frozen=True)
class BlockLimits:
    """When the runtime closes a block: whichever limit comes first, on a seqno boundary."""

    #: THL events (whole seqnos) per block.
    events: int = 10
    #: Row changes per block (None: no limit).
    rows: int | None = None
    #: Encoded THL bytes per block (None: no limit).
    bytes: int | None = None
    #: Milliseconds a block stays open waiting for more events.
    ms: int = 500
    #: Commit an open block as soon as no next event is waiting (on a seqno boundary),
    #: without waiting out ``ms``: blocks stay small and latency low while the group keeps
    #: up, and grow to the limits only when a backlog waits. False for appliers whose
    #: commits are expensive (a Delta commit per block).
    idle: bool = False

    def override(self, events: int | None = None, rows: int | None = None,
                 bytes: int | None = None, ms: int | None = None,
                 idle: bool | None = None) -> BlockLimits:
        """These limits with the configured ones in place of the defaults."""
        given: dict[str, Any] = {"events": events, "rows": rows, "bytes": bytes, "ms": ms,
                                 "idle": idle}
        return replace(self, **{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class Capabilities:
    """What an applier can do, as data the runtime reads."""

    atomicity: Atomicity
    statements: StatementPolicy
    #: Tables without a primary key are applied (True) or refused with a data error naming
    #: the table and seqno (False).
    keyless_tables: bool
    #: Default block limits; a consumer group's configuration may override each one.
    block: BlockLimits
    #: The applier commits the group's Kafka offsets itself (inside its own transaction);
    #: otherwise the runtime commits them after each block, for lag tools only.
    owns_offsets: bool = False
    #: The applier takes part in consistency checks (``consumers.check.CheckingApplier``:
    #: it reads a key range back as THL values and records results); otherwise a check
    #: is reported unsupported for its group.
    checks: bool = False
    #: The applier can apply in parallel channels (``channels: N``,
    #: ``consumers.runtime.shards.ChannelApplier``): one instance per channel, each with its
    #: own connection, transaction and stored position; otherwise a group has one channel.
    channels: bool = False


class Applier(Protocol):
    """One target of one consumer group."""

    #: What this applier can do (read by the runtime).
    capabilities: Capabilities
    #: Printable target (no secrets), for errors and status.
    target: str

    def connect(self) -> None:
        """Open the target and create the tracking store if missing (TransientError if down)."""

    def position(self) -> Position | None:
        """The last position committed on the target, or None if it never applied anything.

        Also what the next ``commit`` compares with: the position it expects to replace.
        """

    def begin(self) -> None:
        """Open a block."""

    def apply(self, event: ThlEvent) -> None:
        """Apply one fragment inside the open block (DataError if the target refuses it).

        The event holds only what this target gets: the group's filters ran, heartbeat rows
        went to ``heartbeat``, and statements only arrive when the policy is ``apply``.
        """

    def heartbeat(self, beat: Heartbeat) -> None:
        """Record a heartbeat (with this target's arrival time and lag) in the open block."""

    def commit(self, position: Position) -> None:
        """Write ``position`` (compare-and-set) with the block's data, durably; then the block
        is closed. PositionConflict if the stored position is not the one expected."""

    def rollback(self) -> None:
        """Abandon the open block, if any; must not raise."""

    def reset(self) -> None:
        """Forget the stored position (``trepctl reset``, ``online --from-seqno``)."""

    def close(self) -> None:
        """Release the target; must not raise."""


@runtime_checkable
class Truncates(Protocol):
    """An applier that empties a table where the source ran ``TRUNCATE`` (issue 28): every
    kind whose target does not replay the statement itself."""

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        """Remove every row of the source table ``schema.table`` from the target, in the
        open block (a block of its own: everything before it is committed). Replaying it
        is harmless; a table the target never had is left alone."""


@runtime_checkable
class Restructures(Protocol):
    """An applier that follows renamed tables and columns and dropped tables itself (issue
    28): every kind whose target does not replay the DDL statement. Each call comes in a
    block of its own (everything before it committed) and must be harmless to replay."""

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The target's table for ``change.schema.change.table`` becomes the one for
        ``change.new_schema.change.new_name``, with its rows: renamed, or aliased where the
        store cannot rename. A table the target never had, or already renamed, is left
        alone."""

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        """Column ``change.column`` of the table is now ``change.new_name``. ``keep_old``
        False (``evolve``): rename it. True (``lenient``): add the new column holding the
        old one's value in every row already there, and keep the old column as a dropped
        one (NULL from then on); a key column is renamed all the same, since a kept old key
        would leave later rows unaddressable. Already done: nothing happens."""

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The target's table for ``change.schema.change.table`` goes, with its rows
        (``evolve``; ``lenient`` keeps it and never calls this)."""


@runtime_checkable
class DropsColumns(Protocol):
    """An applier whose stored rows keep a dropped column unless it removes it itself
    (documents, change records): under ``schema_changes: evolve`` it takes the column out
    of every row already there. Tables take their dropped columns out at their next row
    image instead (the SQL and Delta appliers)."""

    def drop_column(self, change: SchemaChange, event: ThlEvent) -> None:
        """Column ``change.column`` of the table goes from every stored row written before
        ``event``, in a block of its own; harmless to replay."""


class PendingCommit(Protocol):
    """A block whose commit was sent but not yet answered (``Pipelined.commit_begin``)."""

    @property
    def rides(self) -> bool:
        """The block's COMMIT went ahead of the next block's statements, in that block's
        round trip: its answer comes with theirs. ``finish`` would wait for the server in
        the middle of the next block, so the runtime finishes it after that one is sent."""

    def finish(self) -> None:
        """Wait for the commit: returns once the block and its position are durable; raises
        its ConsumerError (carrying the block's last seqno) if they are not, and then
        nothing of the block was committed. Idempotent: a second call returns or raises
        the same."""


@runtime_checkable
class Pipelined(Protocol):
    """An applier that overlaps a block's commit with the next block (``PendingCommit``).

    Contract: at most one commit is pending; the applier finishes it itself before anything
    else it does on the target (the next block's first statement, a read, a DDL), so the
    next block's ``begin`` and ``apply`` may come before ``finish``. ``rollback`` abandons
    a pending commit along with the open block (neither is then durable). ``commit`` stays
    the one-step form. A commit that ``rides`` the next block's round trip is the one
    exception: its answers are read, its COMMIT sent, its outcome known once the next
    block's are read; abandoned with that block, its outcome is an error (the target's
    stored position tells whether it was committed).
    """

    def commit_begin(self, position: Position) -> PendingCommit | None:
        """Send the open block with ``position`` (compare-and-set, as ``commit``); the
        block is closed, its outcome is the returned commit's ``finish`` (None: it is
        committed already, as by ``commit``)."""


@runtime_checkable
class WarmsUp(Protocol):
    """An applier whose start costs a standby process can pay ahead of a takeover."""

    def warm_up(self) -> None:
        """Prepare what ``connect`` will need (start an engine, load its classes) while
        another process holds the group's lock: nothing written to the target, no position
        kept for later. A failure is only logged; ``connect`` tries again on takeover."""

