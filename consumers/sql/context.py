"""What every part of the SQL applier works with: which target it writes to (its dialect, its
name in messages), the open block's connection, and how the driver's errors become the
consumer's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import ConsumerError

#: A driver error as the consumer's, naming what was being done.
Classify = Callable[[sa_exc.DBAPIError, str], ConsumerError]


@dataclass(frozen=True)
class TargetContext:
    """The target as the applier's parts see it."""

    #: ``mysql``, ``mariadb``, ``postgresql``, ``oracle`` ...
    dialect: str
    #: The target's URL without its password, as errors and log lines name it.
    target: str
    #: The open block's connection (RuntimeError outside a block); the applier's commit
    #: still pending on it (``SqlApplier.commit_begin``) is finished first.
    connection: Callable[[], sa.Connection]
    classify: Classify
    #: The same connection for work that sends nothing (escaping, compiling): a pending
    #: commit may still be on the wire.
    local_connection: Callable[[], sa.Connection]

    @property
    def db(self) -> sa.Connection:
        """The open block's connection, ready for a round trip."""
        return self.connection()

    @property
    def local(self) -> sa.Connection:
        """The open block's connection, to render statements with (no round trip)."""
        return self.local_connection()
