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

from consumers.position import Position
from consumers.runtime.blocks import Fragment
from consumers.runtime.channel_workers import ChannelSet
from consumers.runtime.control import GoOffline
from consumers.runtime.group import Session, mirrored
from replicator.zk import PositionMirror
from thl_topics.event import ThlEvent

log = logging.getLogger(__package__)


class ParallelStream:
    """One session's stream of a group with channels."""

    def __init__(self, session: Session) -> None:
        group = session.group
        self.session = session
        self.group = group
        self.name = group.name
        #: Seqnos the operator asked to skip (as the dispatch started).
        self.skips: set[int] = set()
        book = group.channel_book
        #: Each channel's position and the group's in ZooKeeper, for operators and THL
        #: retention: at most once a second each while blocks follow each other, at once
        #: when the stream is quiet or stops (a write per channel and block kept kazoo's
        #: thread busy for a third of a 2-channel run).
        self._channel_mirrors = [PositionMirror(group.positions, book.component(c))
                                 for c in range(len(group.appliers))]
        self._group_mirror = PositionMirror(group.positions, f"consumers/{self.name}")
        if book.shards is None:
            raise RuntimeError("parallel stream before the handshake")
        self.shards = book.shards
        self.channels = book.running = ChannelSet(
            self.name, group.appliers, group.limits, book.start, group.prep,
            group.control.check_lead, group.metrics.rows)

    def run(self) -> None:
        """Stream with channels: the channels apply, this thread routes and keeps books."""
        channels = self.channels
        channels.start()
        try:
            self._dispatch()
        finally:
            channels.stop()
            try:
                self._absorb(failures=False)  # what committed still counts
                self._flush_mirrors()
            except Exception as exc:  # never hide why the session ended
                log.warning("%s: after the channels stopped: %s", self.name, exc)
            self.group.channel_book.running = None
            self.group.control.publish(force=False)

    def _dispatch(self) -> None:
        """Route every seqno to its channel, in THL order, until offline or a failure.

        A seqno goes to its shard's channel unless that channel applied it already (its
        stored position is at or after it: a restart from the lowest channel). A critical
        seqno waits for every channel to commit what it holds, is applied alone and
        committed before the next seqno is routed. A fresh group (no channel positions)
        applies its first seqno so, then moves every channel to it.
        """
        control, reader = self.group.control, self.session.reader
        channel: int | None = None
        alone = False
        self.skips = set(control.desired().skip_seqnos)
        while True:
            self._absorb()
            if reader.in_seqno is None:
                self._between_seqnos()
            rec = reader.poll(0.2)
            if rec is None:
                self.session.feed.flush_offset()  # held back by ThlFeed.commit
                self._flush_mirrors()
                if control.stale:
                    control.publish(force=False)
                if control.skips_done:
                    control.consume_skips([])
                continue
            event = reader.accept(rec)
            if event is None:
                continue
            if event.fragno == 0:  # a seqno's first record
                channel, alone = self._route(event)
            if channel is not None:
                self.channels.put(channel, Fragment(
                    event, rec.offset, rec.size, skip=event.seqno in self.skips,
                    alone=alone or event.seqno <= self.session.careful_until), self._waiting)
            if event.last_frag:
                self._passed(Position.of(event, rec.offset), channel, alone)

    def _waiting(self) -> None:
        # The stream waits for channels (a drain, a full queue): a blocked channel may
        # commit nothing for long, so show the channels as they are (throttled).
        self._absorb()
        self.group.control.publish(force=False)

    def _between_seqnos(self) -> None:
        """The lock check; on the operator's offline, a clean stop of every channel."""
        control, channels = self.group.control, self.channels
        control.check_lead()
        passed = channels.passed
        if not control.wants_online() and (
                passed is None or passed.seqno >= channels.highest):
            # Tungsten's clean offline: every channel commits and moves its position
            # to the last seqno passed, so they all stop at one seqno (the channel
            # count may change now). After a crash, first read on to the highest
            # channel position: below it some channels are ahead of others.
            channels.drain(self._waiting, sync=True)
            self._absorb()
            raise GoOffline

    def _route(self, event: ThlEvent) -> tuple[int | None, bool]:
        """The channel of a seqno (None: no channel applies it) and whether it applies
        alone, from its first fragment; before one that does, every channel commits."""
        book, channels = self.group.channel_book, self.channels
        route = self.shards.route(event)
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
            channels.drain(self._waiting)
        return channel, alone

    def _passed(self, position: Position, channel: int | None, alone: bool) -> None:
        """The stream is done with a seqno (queued whole, or nothing to queue)."""
        channels = self.channels
        channels.pass_seqno(position)
        if alone:
            channels.drain(self._waiting, sync=not channels.positioned)
        elif channel is None:
            if position.seqno in self.skips:
                # Nothing to apply there anyway.
                self.group.control.consume_skips([position.seqno])
            if not channels.positioned:
                channels.drain(self._waiting, sync=True)

    def _flush_mirrors(self) -> None:
        for mirror in (*self._channel_mirrors, self._group_mirror):
            mirror.flush()

    def _absorb(self, failures: bool = True) -> None:
        """The channels' commits since the last call: metrics and channel mirrors, then the
        group's position (the lowest channel's) in status, ZooKeeper and Kafka; a channel's
        failure is raised here (``failures``)."""
        g, book, channels = self.group, self.group.channel_book, self.channels
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
                self._channel_mirrors[r.channel].mirror(mirrored(pos))
                skipped.extend(r.skipped)
                events += r.events
                s.appliedRows += r.rows
                if r.events:
                    s.appliedLatency = round(max(0.0, time.time() - pos.tstamp / 1e6), 3)
            self.session.commits += len(reports)
            low = channels.lowest()
            if low is not None and low.seqno > s.appliedLastSeqno:
                s.appliedLastSeqno, s.appliedLastEventId = low.seqno, low.event_id
                s.appliedLastEpoch = low.epoch
                self._group_mirror.mirror(mirrored(low))
                if not g.applier.capabilities.owns_offsets and low.offset >= 0:
                    self.session.feed.commit(low.offset + 1)
            g.metrics.applied(events, s.appliedLastSeqno, s.appliedLatency)
            if skipped or g.control.skips_done:
                g.control.consume_skips(skipped)
            g.control.publish(force=False)
        if failures:
            channels.check()
