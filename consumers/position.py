"""Where a consumer group is: the one position type every applier stores and returns."""

from __future__ import annotations

from dataclasses import dataclass

from thl_topics.event import ThlEvent


@dataclass(frozen=True)
class Position:
    """The last THL event a target holds: always the last fragment of a whole seqno.

    ``event_id`` is the event id of that fragment: each fragment of a seqno has its own, and
    the handshake compares it with the THL's fragment ``fragno`` of ``seqno``.
    """

    seqno: int
    epoch: int
    event_id: str
    source_id: str = ""
    fragno: int = 0
    last_frag: bool = True
    shard_id: str = ""
    #: Source commit time of the seqno, microseconds since the Unix epoch (UTC).
    tstamp: int = 0
    #: Offset of the THL record of this position (-1: unknown, e.g. read back from a target).
    offset: int = -1

    @classmethod
    def of(cls, event: ThlEvent, offset: int = -1) -> Position:
        """The position of a THL event (a seqno's last fragment)."""
        return cls(seqno=event.seqno, epoch=event.epoch, event_id=event.event_id,
                   source_id=event.source_id, fragno=event.fragno, last_frag=event.last_frag,
                   shard_id=event.shard_id, tstamp=event.tstamp, offset=offset)
