"""The stream of a group with one channel: the THL in seqno order, applied in blocks on the
group's applier; after each commit the group's position goes to its status, its ZooKeeper
mirror and (for lag tools) its Kafka offset.
"""

from __future__ import annotations

import logging
import time

from consumers.errors import ConsumerError, TerminalError
from consumers.feed import ThlFeed
from consumers.position import Position
from consumers.runtime.blocks import Block
from consumers.runtime.control import GoOffline
from consumers.runtime.group import Group
from consumers.runtime.order import SeqnoOrder
from replicator import crashpoints
from replicator.zk import ZkPosition
from thl_topics.event import RowChange

log = logging.getLogger(__package__)


class SingleStream:
    """One session's stream from ``start`` (None: the THL's first seqno)."""

    def __init__(self, group: Group, feed: ThlFeed, order: SeqnoOrder, start: int | None,
                 careful_until: int) -> None:
        self.group = group
        self.name = group.name
        self.feed = feed
        self.order = order
        self.start = start
        self.careful_until = careful_until
        #: Blocks committed: a session that committed one made progress.
        self.commits = 0

    def run(self) -> None:
        g, control, applier = self.group, self.group.control, self.group.applier
        expected = self.start
        block = Block()
        in_seqno: int | None = None
        next_frag = 0
        skips = set(control.desired().skip_seqnos)
        block_s = g.limits.ms / 1000
        idle = g.limits.idle

        def commit() -> None:
            nonlocal block
            if not block.positions:
                return
            # Another process may hold the lock by now: its work, not this block, counts.
            control.check_lead()
            last = block.positions[-1]
            try:
                applier.commit(last)
            except ConsumerError as exc:
                if exc.seqno < 0:
                    # Batched rows are sent at commit: the culprit is somewhere in the block;
                    # careful mode (one seqno per block) will pin it down.
                    exc.seqno, exc.event_id = last.seqno, last.event_id
                raise
            crashpoints.reached("apply-committed")
            self._committed(block)
            block = Block()

        while True:
            if in_seqno is None:
                control.check_lead()
                if not control.wants_online():
                    commit()
                    raise GoOffline
                if block.positions and time.monotonic() - block.opened >= block_s:
                    commit()
            wait = 0.2 if not block.positions else 0.0 if idle and in_seqno is None else max(
                0.0, min(0.2, block.opened + block_s - time.monotonic()))
            rec = self.feed.poll(wait)
            if rec is None:
                if idle and block.positions and in_seqno is None:
                    commit()  # nothing waits: the block need not wait either
                    continue
                if control.stale:
                    control.publish(force=False)  # idle: let the last commit show
                if control.skips_done:
                    control.consume_skips([])
                continue
            if rec.event is None:
                raise TerminalError(f"{rec.error}; the consumer stops here", seqno=rec.seqno)
            event = rec.event
            if in_seqno is None:
                if not self.order.starts_seqno(event, rec, expected):
                    continue
                isolated = event.seqno not in skips and g.prep.isolates(event)
                if block.positions and isolated:
                    commit()
                if not block.positions:
                    applier.begin()
                    block.opened = time.monotonic()
                in_seqno, next_frag = event.seqno, 0
            else:
                self.order.continues_seqno(event, rec, in_seqno, next_frag)
            if event.seqno in skips:
                if event.last_frag:
                    block.skipped.append(event.seqno)
                    log.warning("%s: skipped seqno %d (%s) as the operator asked: its data "
                                "is not applied", self.name, event.seqno, event.event_id)
            else:
                g.prep.apply(applier, event)
            block.rows += sum(item.row_count for item in event.data
                              if isinstance(item, RowChange))
            block.bytes += rec.size
            g.metrics.rows(event)
            next_frag += 1
            if not event.last_frag:
                crashpoints.reached("apply-between-fragments")
                continue
            block.positions.append(Position.of(event, rec.offset))
            in_seqno, expected = None, event.seqno + 1
            if block.full(g.limits) or event.seqno <= self.careful_until or (
                    event.seqno not in skips and g.prep.isolates(event)):
                commit()

    def _committed(self, block: Block) -> None:
        g = self.group
        last = block.positions[-1]
        s = g.control.status
        s.appliedLastSeqno, s.appliedLastEventId = last.seqno, last.event_id
        s.appliedLastEpoch = last.epoch
        s.appliedLatency = round(max(0.0, time.time() - last.tstamp / 1e6), 3)
        g.metrics.applied(len(block.positions), last.seqno, s.appliedLatency)
        g.positions.mirror_position(f"consumers/{self.name}",
                                    ZkPosition(last.seqno, last.epoch, last.event_id,
                                               last.fragno, last.last_frag))
        if not g.applier.capabilities.owns_offsets:
            self.feed.commit(last.offset + 1)
        if block.skipped or g.control.skips_done:
            g.control.consume_skips(block.skipped)
        self.commits += 1
        g.control.publish(force=False)
