"""Channel positions and shard assignments on a SQL target: Tungsten's ``trep_commit_seqno``
rows by ``task_id``, ``trep_shard_channel`` and ``trep_shard`` (seeds/003)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import ConsumerError
from consumers.position import Position
from replicator.tracking import CommitSeqnoTable


class SqlChannelStore:
    """``consumers.channels.ChannelStore`` in the tracking schema of a SQL target; every
    method runs in a short transaction of its own."""

    def __init__(self, engine: sa.Engine, tracking: CommitSeqnoTable,
                 classify: Callable[[sa_exc.DBAPIError, str], ConsumerError]) -> None:
        self.engine = engine
        self.tracking = tracking
        self.commit_seqno = tracking.table
        self.shard_channel = tracking.metadata.tables[f"{tracking.schema}.trep_shard_channel"]
        self.shard = tracking.metadata.tables[f"{tracking.schema}.trep_shard"]
        self._classify = classify

    def positions(self) -> dict[int, Position]:
        t = self.commit_seqno
        try:
            with self.engine.connect() as conn:
                tasks = conn.execute(sa.select(t.c.task_id).where(
                    t.c.seqno.is_not(None))).scalars().all()
                rows = {task: self.tracking.read(conn, task) for task in tasks}
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading trep_commit_seqno") from exc
        return {task: Position(seqno=r.seqno, epoch=r.epoch, event_id=r.eventid,
                               source_id=r.source_id, fragno=r.fragno, last_frag=r.last_frag,
                               shard_id=r.shard_id)
                for task, r in rows.items() if r is not None}

    def assignments(self) -> dict[str, int]:
        t = self.shard_channel
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(t.c.shard_id, t.c.channel)).all()
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading trep_shard_channel") from exc
        return {shard: int(channel) for shard, channel in rows if channel is not None}

    def critical_shards(self) -> set[str]:
        t = self.shard
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(sa.select(t.c.shard_id).where(t.c.critical == 1)).all()
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading trep_shard") from exc
        return {shard for (shard,) in rows}

    def assign(self, shard: str, channel: int) -> int:
        t = self.shard_channel
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.insert(t).values(shard_id=shard, channel=channel))
            return channel
        except sa_exc.IntegrityError:
            pass  # assigned meanwhile (an operator): theirs counts
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"assigning shard {shard!r} to channel {channel}"
                                 ) from exc
        try:
            with self.engine.connect() as conn:
                found = conn.execute(sa.select(t.c.channel).where(
                    t.c.shard_id == shard)).scalar()
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading trep_shard_channel") from exc
        return channel if found is None else int(found)

    def rechannel(self, channels: int) -> None:
        t = self.commit_seqno
        try:
            with self.engine.begin() as conn:
                tasks = conn.execute(sa.select(t.c.task_id).where(
                    t.c.seqno.is_not(None)).with_for_update()).scalars().all()
                common = self.tracking.read(conn, min(tasks)) if tasks else None
                conn.execute(sa.delete(t))
                if common is not None:
                    for task in range(channels):
                        self.tracking.write(conn, dataclasses.replace(common, task_id=task))
                conn.execute(sa.delete(self.shard_channel))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"rewriting trep_commit_seqno for {channels} "
                                 "channel(s)") from exc

    def clear_assignments(self, at_or_above: int) -> None:
        t = self.shard_channel
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.delete(t).where(t.c.channel >= at_or_above))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "clearing trep_shard_channel") from exc
