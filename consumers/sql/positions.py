"""The group's tracking schema on a SQL target: Tungsten's tables (seeds/003).

``tungsten_<service>`` lives on the target. ``trep_commit_seqno`` holds a row per apply
channel (``task_id``), written in the same transaction as the data it covers: the row is
locked when a block begins, and the block commits only if it still holds the seqno this
applier last read, cleared or wrote (one writer per position). ``heartbeat`` and
``consistency`` are upserted in the block's transaction; ``trep_apply_audit`` records every
applied seqno when ``audit_seqnos`` asks for it. Channel positions and shard assignments of
parallel apply: ``trep_commit_seqno`` rows by ``task_id``, ``trep_shard_channel`` and
``trep_shard`` (``SqlChannelStore``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.check import CheckResult
from consumers.errors import ConsumerError, PositionConflict
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.sql.context import TargetContext
from consumers.sql.render import client_cursor
from replicator.tracking import (
    CommitSeqno,
    CommitSeqnoTable,
    PositionMoved,
    audit_table,
    tracking_metadata,
)

_HEARTBEAT = "heartbeat"


class SqlTracking:
    """One channel's row of ``trep_commit_seqno`` and the tracking tables beside it."""

    def __init__(self, ctx: TargetContext, schema: str, task_id: int, audit: bool) -> None:
        self.ctx = ctx
        self.schema = schema
        self.tracking = CommitSeqnoTable(schema)
        #: This applier's row of trep_commit_seqno: its channel (0 without parallel apply).
        self.task_id = task_id
        tracking = tracking_metadata(schema)
        self.heartbeat_table = tracking.tables[f"{schema}.{_HEARTBEAT}"]
        self.consistency_table = tracking.tables[f"{schema}.consistency"]
        self.audit = audit_table(schema) if audit else None
        #: The seqno stored on the target as this applier last read (``read``), cleared or
        #: wrote it; a block commits only if the target still holds it, so there is one
        #: writer per position. The runtime reads it before any block.
        self.expected: int | None = None
        #: SQL text of the tracking statements sent with the rows (queued path).
        self._texts: dict[str, str] = {}

    def create(self, engine: sa.Engine) -> None:
        """Create the tracking tables that are missing."""
        try:
            with engine.begin() as conn:
                self.tracking.create(conn)
                if self.audit is not None:
                    self.audit.create(conn, checkfirst=True)
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, "creating the tracking schema") from exc

    def read(self, engine: sa.Engine) -> Position | None:
        """This channel's stored position (and the seqno the next block commits against)."""
        try:
            with engine.connect() as conn:
                row = self.tracking.read(conn, self.task_id)
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, "reading trep_commit_seqno") from exc
        self.expected = row.seqno if row else None
        if row is None:
            return None
        return Position(seqno=row.seqno, epoch=row.epoch, event_id=row.eventid,
                        source_id=row.source_id, fragno=row.fragno, last_frag=row.last_frag,
                        shard_id=row.shard_id)

    def clear(self, engine: sa.Engine) -> None:
        """Forget the group's position: every channel's row of trep_commit_seqno."""
        try:
            with engine.begin() as conn:
                conn.execute(sa.delete(self.tracking.table))
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, "clearing trep_commit_seqno") from exc
        self.expected = None

    def lock(self) -> int | None:
        """Lock this channel's row for the block; the seqno it holds."""
        return self.tracking.lock(self.ctx.db, self.task_id)

    def sql(self, which: str, params: dict[str, object]) -> str:
        """A tracking statement (``lock`` or ``advance``) rendered with the driver's escaping
        (compiled once), to be sent with the block's rows."""
        text = self._texts.get(which)
        if text is None:
            stmt = (self.tracking.lock_statement() if which == "lock"
                    else self.tracking.advance_statement())
            text = self._texts[which] = stmt.compile(dialect=self.ctx.local.dialect).string
        cursor = client_cursor(self.ctx.local, self.ctx.dialect)
        try:
            return str(cursor.mogrify(text, params))
        finally:
            cursor.close()

    def commit_row(self, position: Position, now: dt.datetime) -> CommitSeqno:
        """This channel's row of trep_commit_seqno at ``position``, committed at ``now``."""
        source_time = dt.datetime.fromtimestamp(position.tstamp / 1e6, dt.UTC)
        return CommitSeqno(
            seqno=position.seqno, epoch=position.epoch, eventid=position.event_id,
            source_id=position.source_id, shard_id=position.shard_id,
            fragno=position.fragno, last_frag=position.last_frag, task_id=self.task_id,
            applied_latency=max(0, int((now - source_time).total_seconds())),
            extract_timestamp=source_time.replace(tzinfo=None))

    def advance(self, row: CommitSeqno, expected: int | None) -> None:
        """Move this channel's row to ``row`` if it still holds ``expected`` (PositionMoved
        if not)."""
        self.tracking.advance(self.ctx.db, row, expected)

    def record_seqnos(self, seqnos: list[int], now: dt.datetime) -> None:
        """Every seqno of the block into ``trep_apply_audit`` (``audit_seqnos``)."""
        if self.audit is not None:
            self.ctx.db.execute(sa.insert(self.audit), [
                {"seqno": s, "applied_at": now.replace(tzinfo=None)} for s in seqnos])

    def heartbeat(self, beat: Heartbeat) -> None:
        """Upsert the heartbeat row with this target's arrival time and lag."""
        t = self.heartbeat_table
        naive = (beat.source_tstamp.astimezone(dt.UTC).replace(tzinfo=None)
                 if beat.source_tstamp else None)
        values = {"id": beat.id, "seqno": beat.seqno, "eventid": beat.event_id,
                  "source_tstamp": naive,
                  "target_tstamp": beat.target_tstamp.astimezone(dt.UTC).replace(tzinfo=None),
                  "lag_millis": beat.lag_millis, "salt": beat.salt, "name": beat.name}
        try:
            done = self.ctx.db.execute(sa.update(t).where(t.c.id == beat.id).values(values))
            if done.rowcount == 0:
                self.ctx.db.execute(sa.insert(t).values(values))
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, "recording a heartbeat") from exc

    def record_check(self, result: CheckResult) -> None:
        """Upsert the range's row of Tungsten's ``consistency`` table (crc: 40 hex digits of
        the digest, as its CHAR(40) columns hold)."""
        t = self.consistency_table
        values = {"db": result.schema[:64], "tbl": result.table[:64], "id": result.range,
                  "row_offset": result.range * result.limit, "row_limit": result.limit,
                  "this_crc": result.target_digest[:40], "this_cnt": result.target_count,
                  "master_crc": result.source_digest[:40], "master_cnt": result.source_count,
                  "ts": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                  "method": result.method[:32]}
        where = (t.c.db == values["db"], t.c.tbl == values["tbl"], t.c.id == result.range)
        try:
            done = self.ctx.db.execute(sa.update(t).where(*where).values(values))
            if done.rowcount == 0:
                self.ctx.db.execute(sa.insert(t).values(values))
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, "recording a consistency check") from exc

    def conflict(self, exc: PositionMoved, seqno: int = -1) -> PositionConflict:
        """The error of a position that moved under this applier."""
        return PositionConflict(
            f"{self.ctx.target}: {self.schema}.trep_commit_seqno"
            + (f" (task_id {self.task_id})" if self.task_id else "")
            + f" moved under this consumer ({exc}): another process applies the same "
            "consumer group to this target. Nothing of this block was committed; run one "
            "process per group.",
            seqno=seqno)

    def channel_store(self, engine: sa.Engine) -> SqlChannelStore:
        """Every channel's position and the shard assignments (consumers.runtime.shards)."""
        return SqlChannelStore(engine, self.tracking, self.ctx.classify)


class SqlChannelStore:
    """``consumers.runtime.shards.ChannelStore`` in the tracking schema of a SQL target; every
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
