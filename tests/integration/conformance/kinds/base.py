"""What the conformance suite needs to know about a kind of target."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from stack.service import Service

from ..tables import Table

Row = tuple[Any, ...]


class Kind(abc.ABC):
    """A kind of target: how to configure a group for it, read it back and break it."""

    #: Name in test ids.
    name: str
    #: Session fixtures of the stack servers this kind needs (started once per session).
    servers: tuple[str, ...] = ()
    #: The server fixture ``server()`` takes down in the target-down test (its test then
    #: waits for, and holds off, the tests that use it; a core server holds off every test);
    #: None: its outage touches no other test.
    down: str | None = None
    #: Tables without a primary key are applied (else refused with a clear error).
    keyless: bool = True
    #: Every write is guarded by the seqno: replaying applied seqnos is a no-op.
    replay_safe: bool = False
    #: The applier takes part in consistency checks (``Capabilities.checks``); otherwise
    #: ``trepctl check`` must report its tables ``unsupported``.
    checks: bool = True
    #: A check of the type matrix finds the target equal. False where the store cannot give
    #: JSON text back as the source wrote it (the README's known limits say which).
    checks_json_text: bool = True
    #: Zero and partial dates are stored as they are (MySQL family); elsewhere the
    #: default ``zero_dates: null`` stores NULL.
    zero_dates_kept: bool = False
    #: Extra seconds a spawned trep-run needs before it applies (a Spark JVM to start).
    startup_s: float = 0.0
    #: How long a block of the group stays open (``block_commit_ms``).
    block_ms: int = 100
    #: The target replays DDL statements (MySQL family): a dropped table goes in every
    #: ``schema_changes`` mode but ``exception``.
    replays_ddl: bool = False
    #: The largest row the store holds (None: at least the 64 MiB the suite writes); a
    #: larger one stops the group with a data error that names table, column, seqno, size
    #: and what would help.
    max_row_bytes: int | None = None
    #: What a primary key changed on the source does: None, the target follows it (rows
    #: found by the new key); else the group stops at the first row change by the new key
    #: (rather than miss the rows written by the old one), with this in its error.
    key_change_stop: str | None = None
    #: The same for a keyless table gaining a primary key, and a keyed one losing it.
    key_gained_stop: str | None = None
    key_lost_stop: str | None = None

    def repair_key_change(self, schema: str, service: str, table: Table) -> bool:
        """After the group stopped at ``table``'s changed primary key, do what its message
        says on the target; True: the table is to be provisioned again (default: its
        target emptied), False: the group follows the key by itself once online."""
        self.empty(schema, [table])
        return True

    def __init__(self, servers: dict[str, Service]) -> None:
        self.servers_up = servers

    @abc.abstractmethod
    def target(self, service: str) -> dict[str, Any]:
        """The ``target:`` section of a group of this kind for ``service``."""

    def create(self, schema: str, tables: Sequence[Table]) -> None:  # noqa: B027
        """Create what the target cannot create from the THL by itself (default: nothing)."""

    @abc.abstractmethod
    def rows(self, schema: str, table: Table) -> list[Row]:
        """Every row of ``table`` on the target, as comparable tuples in column order."""

    def normalize(self, table: Table, row: Row) -> Row:
        """A source row in the form ``rows`` gives back (default: unchanged)."""
        return row

    @abc.abstractmethod
    def columns(self, schema: str, name: str) -> set[str] | None:
        """The column (field) names the target holds for the source table ``name`` (None:
        it has no such table; change topics: no live row)."""

    @abc.abstractmethod
    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        """Leave the target as it was before the schema's first seqno (for a full replay)."""

    @abc.abstractmethod
    def drop(self, schema: str, service: str) -> None:
        """Remove the schema's data and the service's tracking store."""

    @abc.abstractmethod
    def server(self) -> Service:
        """The server to stop for the 'target down' test."""

    def explain(self, schema: str, table: Table) -> str:
        """What the target holds of ``table`` in more detail, printed when a comparison
        fails (default: nothing more)."""
        return ""

    @abc.abstractmethod
    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        """Change one value of one row on the target behind the replicator's back (the row
        whose single-column key is ``key``), for the consistency check test."""
