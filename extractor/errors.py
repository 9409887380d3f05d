"""Errors of the extractor. Each says what happened, where, and what the operator can do.

DESIGN.md's kinds: a *transient* failure (source or Kafka unreachable, a THL commit whose
outcome is unknown) is retried from the THL tail, exactly as a restart would; anything else
stops the extractor.
"""

from __future__ import annotations

import pymysql
import sqlalchemy.exc as sa_exc
from confluent_kafka import KafkaException
from kazoo.exceptions import KazooException

from replicator.lifecycle import LockLost
from thl_topics.errors import ThlUnavailable, is_passing

#: Client and server errors of a MySQL server that is down, restarting or unreachable.
_SOURCE_GONE = {1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055}


class ExtractorError(RuntimeError):
    """The extractor cannot go on; it stopped on a transaction boundary."""


class BinlogPurgedError(ExtractorError):
    """The resume position is no longer in the source's binlog."""


class ThlCommitUnknown(ExtractorError):
    """A Kafka commit failed or timed out: whether it landed is unknown until the THL tail
    is read again by a new producer."""


class SameServerId(ExtractorError):
    """The source dropped this extractor's binlog connection because a newer client
    announced the same ``server_id`` (MariaDB and MySQL keep only the newest): a standby that
    took over, or another replica or extractor that must be given a ``server_id`` of its own.
    A restarted extractor never sees it: its own connection is the newer one."""


class LeaderLost(ExtractorError, LockLost):
    """This instance no longer holds the service's leader lock (its ZooKeeper session
    expired, or a standby took over and fenced it): wait as standby and lead again."""


def is_transient(exc: BaseException) -> bool:
    """True when starting again from the THL tail may succeed: the source or Kafka is down."""
    if isinstance(exc, (ThlCommitUnknown, ThlUnavailable, KazooException, SameServerId)):
        # ZooKeeper away while the THL is empty (its mirror is the last resort position).
        return True
    if isinstance(exc, KafkaException):
        return is_passing(exc.args[0])
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if exc.orig is not None else exc
    if isinstance(exc, pymysql.err.InterfaceError):
        return True  # the connection was closed under us
    if isinstance(exc, pymysql.err.OperationalError):
        code = exc.args[0] if exc.args else None
        return code in _SOURCE_GONE
    return False
