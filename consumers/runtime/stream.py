"""The stream of a group with one channel: the THL in seqno order (``order``), applied in
blocks on the group's applier by the block loop (``blocks``). Between seqnos it answers to
the operator (offline) and to the lock; after each commit the group's position goes to its
status, its ZooKeeper mirror and (for lag tools) its Kafka offset.
"""

from __future__ import annotations

import time

from consumers.runtime.blocks import Block, BlockLoop, Fragment, Quiet
from consumers.runtime.control import GoOffline
from consumers.runtime.group import Session, mirrored
from replicator.zk import PositionMirror


class SingleStream(BlockLoop):
    """One session's stream of a group with one channel."""

    tick = 0.2
    due_between_seqnos = True
    patient_until_first_seqno = True
    overlaps_commits = True

    def __init__(self, session: Session) -> None:
        group = session.group
        super().__init__(group.name, group.applier, group.limits, group.prep,
                         group.metrics.rows, group.control.check_lead)
        self.session = session
        self.group = group
        #: Seqnos the operator asked to skip (as the session started).
        self.skips: set[int] = set()
        #: The group's position in ZooKeeper, for operators and THL retention: at most once
        #: a second while blocks follow each other, at once when quiet or stopping.
        self.mirror = PositionMirror(group.positions, f"consumers/{group.name}")

    def run(self) -> None:
        self.skips = set(self.group.control.desired().skip_seqnos)
        try:
            super().run()
        finally:
            self.mirror.flush()  # the last committed block's, whatever ends the session

    def between_seqnos(self) -> None:
        control = self.group.control
        control.check_lead()
        if not control.wants_online():
            self.commit()
            self.settle()
            raise GoOffline

    def receive(self, wait: float) -> Fragment | Quiet:
        rec = self.session.reader.poll(wait)
        if rec is None:
            return Quiet.NOTHING
        event = self.session.reader.accept(rec)
        if event is None:
            return Quiet.HANDLED
        skip = event.seqno in self.skips
        # Alone: a statement the target commits by itself or a check (``isolates``), and
        # every seqno in careful mode.
        return Fragment(event, rec.offset, rec.size, skip=skip,
                        alone=event.seqno <= self.session.careful_until or (
                            not skip and self.group.prep.isolates(event)))

    def quiet(self) -> None:
        self.session.feed.flush_offset()  # the last block's, held back (``ThlFeed.commit``)
        self.mirror.flush()
        control = self.group.control
        if control.stale:
            control.publish(force=False)  # idle: let the last commit show
        if control.skips_done:
            control.consume_skips([])

    def committed(self, block: Block) -> None:
        """The group's position after a commit: status, metrics, mirror, Kafka offset."""
        g = self.group
        last = block.last
        s = g.control.status
        s.appliedLastSeqno, s.appliedLastEventId = last.seqno, last.event_id
        s.appliedLastEpoch = last.epoch
        s.appliedLatency = round(max(0.0, time.time() - last.tstamp / 1e6), 3)
        s.appliedRows += block.rows
        g.metrics.applied(block.seqnos, last.seqno, s.appliedLatency)
        self.mirror.mirror(mirrored(last))
        if not g.applier.capabilities.owns_offsets:
            self.session.feed.commit(last.offset + 1)
        if block.skipped or g.control.skips_done:
            g.control.consume_skips(block.skipped)
        self.session.commits += 1
        g.control.publish(force=False)
