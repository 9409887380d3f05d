"""The stream of a group with channels (``channels: N``): this thread reads the THL in seqno
order and routes each seqno to its shard's channel (``shards``); the channels apply side by
side (``channel_workers``) and report their commits, which this thread turns into the
group's position: the lowest channel's, in status, ZooKeeper and Kafka.

A critical seqno waits for every channel to commit what it holds, is applied alone and
committed before the next seqno is routed. An ``offline`` request drains every channel to
one seqno first (Tungsten's clean offline), so the channel count may change afterwards.
"""

from __future__ import annotations

import logging
import queue
import time

from consumers.errors import TerminalError
from consumers.feed import ThlFeed
from consumers.position import Position
from consumers.runtime.channel_workers import ChannelSet, Fragment
from consumers.runtime.control import GoOffline
from consumers.runtime.group import Group
from consumers.runtime.order import SeqnoOrder
from consumers.runtime.shards import ShardMap
from replicator.zk import ZkPosition

log = logging.getLogger(__package__)


class ParallelStream:
    """One session's stream from ``start`` (None: the THL's first seqno), with channels."""

    def __init__(self, group: Group, feed: ThlFeed, order: SeqnoOrder, start: int | None,
                 careful_until: int) -> None:
        self.group = group
        self.name = group.name
        self.feed = feed
        self.order = order
        self.start = start
        self.careful_until = careful_until
        #: Blocks committed (any channel): a session that committed one made progress.
        self.commits = 0

    def run(self) -> None:
        """Stream with channels: the channels apply, this thread routes and keeps books."""
        g, book = self.group, self.group.channel_book
        if book.shards is None:
            raise RuntimeError("parallel stream before the handshake")
        channels = book.running = ChannelSet(
            self.name, g.appliers, g.limits, book.start, g.prep.apply,
            g.control.check_lead, g.metrics.rows)
        channels.start()
        try:
            self._dispatch(channels, book.shards)
        finally:
            channels.stop()
            try:
                self._absorb(channels, failures=False)  # what committed still counts
            except Exception as exc:  # never hide why the session ended
                log.warning("%s: after the channels stopped: %s", self.name, exc)
            book.running = None
            g.control.publish(force=False)

    def _dispatch(self, channels: ChannelSet, shards: ShardMap) -> None:
        """Route every seqno to its channel, in THL order, until offline or a failure.

        A seqno goes to its shard's channel unless that channel applied it already (its
        stored position is at or after it: a restart from the lowest channel). A critical
        seqno waits for every channel to commit what it holds, is applied alone and
        committed before the next seqno is routed. A fresh group (no channel positions)
        applies its first seqno so, then moves every channel to it.
        """
        control, book, feed = self.group.control, self.group.channel_book, self.feed
        expected = self.start
        in_seqno: int | None = None
        next_frag = 0
        channel: int | None = None
        alone = False
        skips = set(control.desired().skip_seqnos)

        def tick() -> None:
            self._absorb(channels)

        def waiting() -> None:
            # The stream waits for channels (a drain, a full queue): a blocked channel may
            # commit nothing for long, so show the channels as they are (throttled).
            tick()
            control.publish(force=False)

        while True:
            tick()
            if in_seqno is None:
                control.check_lead()
                passed = channels.passed
                if not control.wants_online() and (
                        passed is None or passed.seqno >= channels.highest):
                    # Tungsten's clean offline: every channel commits and moves its position
                    # to the last seqno passed, so they all stop at one seqno (the channel
                    # count may change now). After a crash, first read on to the highest
                    # channel position: below it some channels are ahead of others.
                    channels.drain(waiting, sync=True)
                    tick()
                    raise GoOffline
            rec = feed.poll(0.2)
            if rec is None:
                if control.stale:
                    control.publish(force=False)
                if control.skips_done:
                    control.consume_skips([])
                continue
            if rec.event is None:
                raise TerminalError(f"{rec.error}; the consumer stops here", seqno=rec.seqno)
            event = rec.event
            if in_seqno is None:
                if not self.order.starts_seqno(event, rec, expected):
                    continue
                route = shards.route(event)
                channel = route.channel
                done = book.start[channel] if channel is not None else None
                if channel is not None and done is not None and event.seqno <= done.seqno:
                    channel = None  # applied by its channel before the restart
                alone = channel is not None and (route.critical is not None
                                                 or not channels.positioned)
                if alone:
                    if route.critical is not None:
                        book.critical += 1
                        log.debug("%s: seqno %d is critical (%s): every channel commits, "
                                  "then it applies alone", self.name, event.seqno,
                                  route.critical)
                    channels.drain(waiting)
                in_seqno, next_frag = event.seqno, 0
            else:
                self.order.continues_seqno(event, rec, in_seqno, next_frag)
            if channel is not None:
                channels.put(channel, Fragment(
                    event, rec.offset, rec.size, skip=event.seqno in skips,
                    alone=alone or event.seqno <= self.careful_until), waiting)
            next_frag += 1
            if not event.last_frag:
                continue
            in_seqno, expected = None, event.seqno + 1
            channels.pass_seqno(Position.of(event, rec.offset))
            if alone:
                channels.drain(waiting, sync=not channels.positioned)
            elif channel is None:
                if event.seqno in skips:
                    control.consume_skips([event.seqno])  # nothing to apply there anyway
                if not channels.positioned:
                    channels.drain(waiting, sync=True)

    def _absorb(self, channels: ChannelSet, failures: bool = True) -> None:
        """The channels' commits since the last call: metrics and channel mirrors, then the
        group's position (the lowest channel's) in status, ZooKeeper and Kafka; a channel's
        failure is raised here (``failures``)."""
        g, book = self.group, self.group.channel_book
        reports = []
        while True:
            try:
                reports.append(channels.reports.get_nowait())
            except queue.Empty:
                break
        if reports:
            skipped: list[int] = []
            events = 0
            s = g.control.status
            for r in reports:
                pos = r.position
                book.now[r.channel] = pos
                g.metrics.channel_applied(r.channel, r.events, pos.seqno)
                g.positions.mirror_position(
                    book.component(r.channel),
                    ZkPosition(pos.seqno, pos.epoch, pos.event_id, pos.fragno, pos.last_frag))
                skipped.extend(r.skipped)
                events += r.events
                if r.events:
                    s.appliedLatency = round(max(0.0, time.time() - pos.tstamp / 1e6), 3)
            self.commits += len(reports)
            low = channels.lowest()
            if low is not None and low.seqno > s.appliedLastSeqno:
                s.appliedLastSeqno, s.appliedLastEventId = low.seqno, low.event_id
                s.appliedLastEpoch = low.epoch
                g.positions.mirror_position(
                    f"consumers/{self.name}",
                    ZkPosition(low.seqno, low.epoch, low.event_id, low.fragno, low.last_frag))
                if not g.applier.capabilities.owns_offsets and low.offset >= 0:
                    self.feed.commit(low.offset + 1)
            g.metrics.applied(events, s.appliedLastSeqno, s.appliedLatency)
            if skipped or g.control.skips_done:
                g.control.consume_skips(skipped)
            g.control.publish(force=False)
        if failures:
            channels.check()
