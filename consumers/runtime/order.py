"""The THL in seqno order: each seqno whole, from its first fragment, once, from where the
target stopped, and never past a hole. One ``SeqnoReader`` per session reads the feed so,
for the single stream and for the parallel dispatch alike.

A record before the start was applied already and is passed over. A seqno after the
expected one is a hole or another log under the same topic name (recreated): the first time
the session ends transiently so that the handshake looks at the log again, the second time
the group stops there (``SeqnoGap``).
"""

from __future__ import annotations

import logging

from consumers.errors import SeqnoGap, TerminalError, TransientError
from consumers.feed import ThlFeed
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlRecord

log = logging.getLogger(__package__)


class SeqnoOrder:
    """The order checks of one group; a gap seen once is remembered across sessions."""

    def __init__(self, name: str, topic: str) -> None:
        self.name = name
        self.topic = topic
        #: The expected seqno at which a gap was seen once (then re-checked by handshake).
        self._gap_checked = -1

    def read(self, feed: ThlFeed, start: int | None) -> SeqnoReader:
        """One session's read of ``feed``, sought to ``start`` (None: the THL's start)."""
        return SeqnoReader(self, feed, start)

    def starts_seqno(self, event: ThlEvent, rec: ThlRecord, expected: int | None) -> bool:
        """Checks at the first record of a seqno; False: before the start, already applied."""
        if expected is not None and event.seqno < expected:
            log.debug("%s: seqno %d already applied", self.name, event.seqno)
            return False
        if expected is not None and event.seqno > expected \
                and self._gap_checked != expected:
            # A hole, or another log under the same topic name (recreated): go back
            # through the handshake once before calling it a gap.
            self._gap_checked = expected
            raise TransientError(f"seqno {event.seqno} follows {expected - 1} at "
                                 f"offset {rec.offset}; checking the log again",
                                 seqno=expected)
        if expected is not None and event.seqno > expected:
            raise SeqnoGap(f"THL topic {self.topic} jumps from seqno "
                           f"{expected - 1} to {event.seqno} at offset {rec.offset}: "
                           "never applying past a hole", seqno=expected)
        if event.fragno != 0:
            raise TerminalError(f"seqno {event.seqno} starts at fragment "
                                f"{event.fragno} (offset {rec.offset})",
                                seqno=event.seqno)
        return True

    @staticmethod
    def continues_seqno(event: ThlEvent, rec: ThlRecord, in_seqno: int,
                        next_frag: int) -> None:
        """Checks at a later record of a seqno: its next fragment, nothing else."""
        if event.seqno != in_seqno or event.fragno != next_frag:
            raise TerminalError(
                f"seqno {in_seqno} is missing fragment {next_frag}: found seqno "
                f"{event.seqno} fragment {event.fragno} at offset {rec.offset}",
                seqno=in_seqno)


class SeqnoReader:
    """One session's read of the THL in seqno order: ``poll`` for the next record, then
    ``accept`` it. Between seqnos ``in_seqno`` is None; a seqno's first fragment is
    fragment 0, so ``event.fragno == 0`` tells the first record of a seqno."""

    def __init__(self, order: SeqnoOrder, feed: ThlFeed, start: int | None) -> None:
        self._order = order
        self._feed = feed
        #: The next seqno to apply (None: whichever the THL starts with).
        self.expected = start
        #: The seqno whose fragments are being read (None: between seqnos).
        self.in_seqno: int | None = None
        self._next_frag = 0

    def poll(self, timeout: float) -> ThlRecord | None:
        """The next record, or None if none came within ``timeout`` seconds."""
        return self._feed.poll(timeout)

    def accept(self, rec: ThlRecord) -> ThlEvent | None:
        """The event of ``rec`` if it is the next fragment to apply; None for a seqno
        applied before the start. An unreadable record, a hole, a fragment out of place
        raise."""
        if rec.event is None:
            raise TerminalError(f"{rec.error}; the consumer stops here", seqno=rec.seqno)
        event = rec.event
        if self.in_seqno is None:
            if not self._order.starts_seqno(event, rec, self.expected):
                return None
            self.in_seqno, self._next_frag = event.seqno, 0
        else:
            self._order.continues_seqno(event, rec, self.in_seqno, self._next_frag)
        self._next_frag += 1
        if event.last_frag:
            self.in_seqno, self.expected = None, event.seqno + 1
        return event
