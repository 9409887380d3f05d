"""Where a group starts applying: its stored position, checked against the THL.

The target holds the position of record. The handshake reads it (with channels: every
channel's, after checking the stored channel count against the group's), waits until the
THL holds that seqno's last fragment and checks that it carries the stored epoch and event
id, Tungsten's epoch handshake: another log under the same topic name, or a log purged past
the position, is refused with the way out rather than applied. An operator's
``--from-seqno`` replaces the stored position instead.
"""

from __future__ import annotations

import logging
from typing import cast

from consumers.errors import EpochMismatch, Purged, TerminalError
from consumers.feed import ThlFeed
from consumers.position import Position
from consumers.runtime.control import GoOffline
from consumers.runtime.group import Group
from consumers.runtime.shards import ChannelApplier, ChannelError, ShardMap, plan_channels
from replicator import crashpoints
from replicator.control import Desired
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlRecord

log = logging.getLogger(__package__)


class Handshake:
    """The start of every session of one group; ``topic``: the THL topic it reads."""

    def __init__(self, group: Group, topic: str) -> None:
        self.group = group
        self.name = group.name
        self.topic = topic
        self.capabilities = group.applier.capabilities

    def start(self, feed: ThlFeed) -> int | None:
        """The next seqno to apply (None: from the THL's start), after the epoch check."""
        control, applier = self.group.control, self.group.applier
        desired = control.desired()
        if desired.from_seqno is not None:
            start = desired.from_seqno
            log.info("%s: starting at seqno %d as the operator asked", self.name, start)
            # Replay really means replay: drop the stored position first.
            applier.reset()
            if self.capabilities.channels:
                self._stored_position()  # every channel's row is gone: start them afresh
            control.zk(lambda: control.nodes.update_desired(_clear_from),
                       "clearing the --from-seqno request")
            control.on_desired(control.nodes.desired())
            return start
        stored = self._stored_position()
        crashpoints.reached("apply-handshake")
        if stored is None:
            first = control.wait_for(feed.first_seqno)
            if first > 0:
                raise Purged(
                    f"the THL topic {self.topic} starts at seqno {first}: the "
                    "events before it were purged (or the topic was recreated), and this "
                    "target never applied anything. Provision the target (trepctl provision), "
                    f"then `trepctl online -group {self.name} --from-seqno {first}`.",
                    seqno=0)
            return None
        control.status.appliedLastSeqno = stored.seqno
        control.status.appliedLastEventId = stored.event_id
        control.status.appliedLastEpoch = stored.epoch
        # The stream starts right after it: the records that follow must be the same log's.
        feed.follows(self._verify(feed, stored))
        # Parallel apply: every channel's position must be in this log too, before any
        # channel applies anything.
        for pos in {(p.seqno, p.fragno, p.epoch, p.event_id): p
                    for p in self.group.channel_book.start if p is not None}.values():
            if pos.seqno != stored.seqno:
                self._verify(feed, pos)
        return stored.seqno + 1

    def _stored_position(self) -> Position | None:
        """The stored position the group starts from: the applier's or, with channels, the
        lowest channel's, after the stored channel count was checked against ours."""
        applier, book = self.group.applier, self.group.channel_book
        store = None
        if self.capabilities.channels:
            store = cast(ChannelApplier, applier).channel_store()
            plan_channels(store, book.count, self.name, applier.target)
        if not self.group.parallel or store is None:
            return applier.position()
        # Each applier reads its own row: what its next commit expects to replace.
        positions = [a.position() for a in self.group.appliers]
        if None in positions and any(p is not None for p in positions):
            raise ChannelError(
                f"{applier.target}: trep_commit_seqno lacks the rows of channel(s) "
                f"{', '.join(str(c) for c, p in enumerate(positions) if p is None)} of "
                f"consumer group {self.name} while others have one: another process may be "
                "writing them. Stop every process of the group, then start one.")
        book.start, book.now = positions, list(positions)
        book.shards = ShardMap(book.count, store.assignments(),
                               store.critical_shards(), store.assign,
                               where=f"{applier.target}: ")
        known = [p for p in positions if p is not None]
        return min(known, key=lambda p: p.seqno) if known else None

    def _verify(self, feed: ThlFeed, stored: Position) -> ThlRecord:
        """The THL holds ``stored`` (epoch and event id): the epoch handshake."""
        control = self.group.control
        rec: ThlRecord | None = None
        while rec is None:
            # The position names the seqno's last fragment: each fragment has its own
            # event id, so compare with that one, not with fragment 0.
            rec = feed.record_at(stored.seqno, stored.fragno)
            if rec is None:
                control.status.pendingExceptionMessage = (
                    f"waiting for the THL to reach seqno {stored.seqno}")
                control.publish(force=False)
                control.check_lead()
                if not control.wants_online():
                    raise GoOffline
                control.wakeup.wait(0.5)
        same = (rec.seqno, rec.fragno) == (stored.seqno, stored.fragno)
        kept = None if same else feed.first_seqno()  # a look-up only a miss needs
        if kept is not None and kept > stored.seqno:
            raise Purged(
                f"seqno {stored.seqno + 1}, the next one this group needs, was purged from "
                f"the THL topic {self.topic} (it starts at seqno {kept}). "
                "Re-provision the target (trepctl provision) and restart it with `trepctl "
                f"reset -group {self.name}` and `online -group {self.name} --from-seqno "
                f"{kept}`.", seqno=stored.seqno + 1)
        if same and rec.event is None:
            raise TerminalError(f"THL record of seqno {stored.seqno} cannot be read: "
                                f"{rec.error}", seqno=stored.seqno)
        server = rec.event if same else None
        if server is None or server.epoch != stored.epoch \
                or server.event_id != stored.event_id:
            # No such fragment, or another epoch or event id there: another log.
            found = (self._differs(server, stored) if server is not None else
                     f"server has no fragment {stored.fragno} of seqno {stored.seqno} (next "
                     f"record: seqno {rec.seqno} fragment {rec.fragno}) client epoch "
                     f"number={stored.epoch}")
            raise self._epoch_mismatch(stored, found)
        return rec

    @staticmethod
    def _differs(server: ThlEvent, stored: Position) -> str:
        return (f"server epoch number={server.epoch} client epoch number={stored.epoch} "
                f"(server event id {server.event_id}, client event id {stored.event_id})")

    def _epoch_mismatch(self, stored: Position, found: str) -> EpochMismatch:
        return EpochMismatch(
            "Client handshake failure: Client response validation failed: Log epoch "
            f"numbers do not match: client source ID={stored.source_id} "
            f"seqno={stored.seqno} {found}. The THL topic {self.topic} "
            "is not the log this target was applied from; compare the THL and the "
            "target, then `trepctl reset` and `online --from-seqno N`.",
            seqno=stored.seqno, event_id=stored.event_id)


def _clear_from(d: Desired) -> None:
    d.from_seqno = None
