"""Where the extractor resumes: the THL tail, then trep_commit_seqno, then ZooKeeper.

The log is the truth (whitepaper, "THL position during extraction and apply"): what is in
the THL topic was extracted, whatever the tracking table says.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import sqlalchemy as sa

from extractor.binlog_position import BinlogPosition
from extractor.errors import ExtractorError
from extractor.xa import decode_open
from replicator.tracking import CommitSeqno, CommitSeqnoTable
from replicator.zk import ServiceNodes, ZkPosition
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartPoint:
    """Resume here: ``position`` in the binlog (None: as configured), ``next_seqno`` next;
    ``xa_open``: the XA transactions prepared before ``position`` and not yet decided there
    (their prepares are read again first)."""

    position: BinlogPosition | None
    next_seqno: int
    origin: str
    xa_open: dict[str, BinlogPosition] = field(default_factory=dict)


def last_complete_event(reader: ThlReader) -> ThlEvent | None:
    """The newest event of the THL whose last fragment is in, or None for an empty log."""
    rec = reader.tail()
    if rec is None:
        return None
    if rec.event is None:
        raise ExtractorError(
            f"the THL tail does not decode ({rec.error}); the extractor will not guess a "
            "position. Inspect it with 'thl list -last 5'.")
    if not rec.event.last_frag:
        # All fragments of a seqno are in one Kafka transaction, so read_committed never
        # shows a partial one; a partial tail means the topic was written by something else.
        raise ExtractorError(
            f"the THL tail (seqno {rec.seqno} fragno {rec.fragno}, offset {rec.offset}) is an "
            "incomplete transaction; refusing to resume from it")
    return rec.event


def find_start(reader: ThlReader, source: sa.Engine, tracking: CommitSeqnoTable,
               nodes: ServiceNodes) -> StartPoint:
    """The restart point, in DESIGN.md's order."""
    tail = last_complete_event(reader)
    if tail is not None:
        return StartPoint(BinlogPosition.parse(tail.event_id), tail.seqno + 1, "thl",
                          decode_open(tail.metadata))
    with source.connect() as conn:
        stored: CommitSeqno | None = tracking.read(conn)
    mirrored: ZkPosition | None = nodes.read_position("extractor")
    if stored is not None:
        if stored.seqno < 0:
            # Written when the service first went ONLINE: nothing extracted yet, but what
            # the source committed since then must be.
            log.info("nothing extracted yet; resuming at the first start's position %s",
                     stored.eventid)
            return StartPoint(BinlogPosition.parse(stored.eventid), 0, "first position")
        log.warning("THL topic is empty; resuming from trep_commit_seqno seqno=%d", stored.seqno)
        return StartPoint(BinlogPosition.parse(stored.eventid), stored.seqno + 1,
                          "trep_commit_seqno", _xa_open(mirrored, stored.seqno))
    if mirrored is not None:
        log.warning("THL and trep_commit_seqno are empty; resuming from ZooKeeper seqno=%d",
                    mirrored.seqno)
        return StartPoint(BinlogPosition.parse(mirrored.event_id), mirrored.seqno + 1,
                          "zookeeper", _xa_open(mirrored, mirrored.seqno))
    return StartPoint(None, 0, "new")


def _xa_open(mirrored: ZkPosition | None, seqno: int) -> dict[str, BinlogPosition]:
    """The open XA prepares the ZooKeeper mirror lists at ``seqno`` (none if it is at
    another seqno: then the THL tail that listed them is lost, and a warning says so)."""
    if mirrored is None or mirrored.seqno != seqno:
        log.warning("no record of XA transactions open at seqno %d: one prepared before it "
                    "and committed after it would be missed", seqno)
        return {}
    return {xid: BinlogPosition.parse(e) for xid, e in mirrored.xa_open.items()}
