"""One online session of a group, the unit the lifecycle's retries repeat: connect the
target, shake hands, seek, stream until offline or a failure.

A data or log error inside a block that holds several seqnos rolls the whole block back,
so it is not yet known which seqno is at fault: the session ends transiently and the next
ones apply seqno by seqno up to the bad one (careful mode), so that the group stops right
before it with everything earlier committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumers.errors import DataError, EpochMismatch, TerminalError, TransientError
from consumers.feed import ThlFeed
from consumers.runtime.dispatch import ParallelStream
from consumers.runtime.group import Group, Session
from consumers.runtime.handshake import Handshake
from consumers.runtime.order import SeqnoOrder
from consumers.runtime.shards import ChannelError
from consumers.runtime.stream import SingleStream
from replicator.state import State

log = logging.getLogger(__package__)


class Progressed(Exception):
    """A session committed blocks, then failed transiently: retry as a new outage."""

    def __init__(self, cause: TransientError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Sessions:
    """The online sessions of one group, one per ``run()``; careful mode and the order
    checks' memory carry from one to the next. ``topic``: the THL topic that ``new_feed``
    reads."""

    def __init__(self, group: Group, topic: str, new_feed: Callable[[], ThlFeed]) -> None:
        self.group = group
        self.name = group.name
        self._new_feed = new_feed
        self._handshake = Handshake(group, topic)
        self._order = SeqnoOrder(group.name, topic)
        #: After a data error inside a multi-seqno block: commit seqno by seqno up to here.
        self._careful_until = -1

    def run(self) -> None:
        control = self.group.control
        control.set_state(State.SYNCHRONIZING)
        feed = self._new_feed()
        try:
            for applier in self.group.appliers:
                # One after the other: channel 0 creates the tracking schema.
                applier.connect()
            start = self._handshake.start(feed)
            # No start: the handshake found the THL starting at seqno 0 (else the group
            # would have to be provisioned), and reads it from there.
            feed.seek(0 if start is None else start)
            self.group.prep.start_session()
            control.status.pendingExceptionMessage = "NONE"
            control.set_state(State.ONLINE)
            self._stream(feed, start)
        except (DataError, TerminalError) as exc:
            self.group.applier.rollback()
            if exc.seqno > self._careful_until and not isinstance(exc, EpochMismatch
                                                                  | ChannelError):
                # The block rolled back whole: commit what precedes the bad seqno one by
                # one, then fail on it alone, so the stored position is right before it.
                log.info("%s: error at seqno %d inside a block; reapplying the block "
                         "one seqno at a time", self.name, exc.seqno)
                self._careful_until = exc.seqno
                raise TransientError(str(exc), seqno=exc.seqno) from exc
            raise
        except BaseException:
            self.group.applier.rollback()
            raise
        finally:
            feed.close()

    def _stream(self, feed: ThlFeed, start: int | None) -> None:
        """Stream from ``start``; a transient failure after a commit is ``Progressed``."""
        session = Session(self.group, feed, self._order.read(feed, start), self._careful_until)
        stream = ParallelStream(session) if self.group.parallel else SingleStream(session)
        try:
            stream.run()
        except TransientError as exc:
            if session.commits:
                raise Progressed(exc) from exc
            raise
