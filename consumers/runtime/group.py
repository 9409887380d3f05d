"""One consumer group as the parts of its runtime share it: its appliers, limits, control,
preparation, metrics and ZooKeeper mirrors (``Group``), and what it knows of its channels
(``ChannelBook``). ``ConsumerRuntime`` builds both once; the handshake, the sessions and
the streams work with them. A stream works with one online session (``Session``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from consumers.applier import Applier, BlockLimits
from consumers.feed import ThlFeed
from consumers.metrics import ConsumerMetrics
from consumers.position import Position
from consumers.runtime.channel_workers import ChannelSet
from consumers.runtime.control import GroupControl
from consumers.runtime.order import SeqnoReader
from consumers.runtime.preparation import Preparation
from consumers.runtime.shards import ShardMap
from replicator.zk import ServiceNodes, ZkPosition


def mirrored(position: Position) -> ZkPosition:
    """A group's or a channel's position as its ZooKeeper mirror holds it."""
    return ZkPosition(position.seqno, position.epoch, position.event_id, position.fragno,
                      position.last_frag)


class ChannelBook:
    """What a group with ``channels: N`` knows of its channels, across sessions."""

    def __init__(self, name: str, channels: int) -> None:
        self.name = name
        self.count = channels
        #: Parallel apply: the channels of the running session, their shards, and the
        #: stored position of each channel when the session started.
        self.running: ChannelSet | None = None
        self.shards: ShardMap | None = None
        self.start: list[Position | None] = [None] * channels
        #: ... and where each channel is now (for status).
        self.now: list[Position | None] = [None] * channels
        #: Critical seqnos applied alone since the process started.
        self.critical = 0

    def component(self, channel: int) -> str:
        """Where a channel's position is mirrored in ZooKeeper."""
        return f"consumers/{self.name}/channels/{channel}"

    def status(self) -> dict[str, Any]:
        """What ``trepctl status -channels`` shows: each channel's seqno, state, shards."""
        channels = self.running
        shards = self.shards.shards() if self.shards is not None else {}
        rows = []
        for c in range(self.count):
            worker = channels.workers[c] if channels is not None else None
            pos = self.now[c]
            rows.append({
                "channel": c, "appliedLastSeqno": pos.seqno if pos is not None else -1,
                "appliedLastEventId": pos.event_id if pos is not None else "",
                "state": worker.state if worker is not None else "stopped",
                "appliedEvents": worker.events if worker is not None else 0,
                "queued": worker.queue.qsize() if worker is not None else 0,
                "shards": shards.get(c, [])})
        return {"channels": self.count, "criticalEvents": self.critical,
                "channelStatus": rows}


@dataclass(frozen=True)
class Group:
    """The parts of one consumer group that its handshake, sessions and streams use."""

    name: str
    #: One applier per channel (parallel apply), channel 0 first.
    appliers: Sequence[Applier]
    limits: BlockLimits
    control: GroupControl
    prep: Preparation
    metrics: ConsumerMetrics
    #: The service's ZooKeeper nodes: the group's and its channels' position mirrors.
    positions: ServiceNodes
    channel_book: ChannelBook

    @property
    def applier(self) -> Applier:
        """The group's applier (channel 0's)."""
        return self.appliers[0]

    @property
    def parallel(self) -> bool:
        """``channels: N`` with N > 1: the channels apply, the stream routes."""
        return self.channel_book.count > 1


@dataclass
class Session:
    """One online session of a group as its stream sees it: the feed and its reader in
    seqno order, where careful mode ends, and how many blocks the session committed."""

    group: Group
    feed: ThlFeed
    reader: SeqnoReader
    #: After a data error inside a multi-seqno block: commit seqno by seqno up to here.
    careful_until: int
    #: Blocks committed (any channel): a session that committed one made progress.
    commits: int = 0
