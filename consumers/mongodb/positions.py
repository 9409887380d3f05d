"""The group's tracking collections in the tracking database (``tungsten_<service>``).

- ``trep_commit_seqno``: the position, one document (``_id`` = Tungsten's ``task_id``, 0)
  with Tungsten's columns as fields. Written last in every block as a compare-and-set
  against the seqno this applier last read or wrote: an upsert of ``{_id: 0, seqno:
  expected}``, which collides with the stored document if another writer moved it.
- ``heartbeat``: one document per heartbeat id, guarded by its seqno like any write.
- ``consistency``: Tungsten's ``consistency`` columns as fields, per checked table and range.
- ``provisioned``: per collection, the seqno of the last provisioning clear
  (``blocks.Clear``), so that a replay does not empty it again.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from bson.int64 import Int64
from pymongo.client_session import ClientSession

from consumers.check import CheckResult
from consumers.errors import DataError, PositionConflict
from consumers.heartbeat import Heartbeat
from consumers.mongodb.blocks import Write, row_document, update
from consumers.mongodb.context import TargetContext
from consumers.mongodb.errors import DUPLICATE_KEY, classified, error_text
from consumers.mongodb.naming import Namespace
from consumers.mongodb.types import ID
from consumers.position import Position

#: The position document's ``_id`` (Tungsten's ``task_id``: one apply channel).
TASK_ID = 0
COMMIT_SEQNO = "trep_commit_seqno"
HEARTBEAT = "heartbeat"
#: Per collection, the seqno of the last provisioning clear (``blocks.Clear``).
PROVISIONED = "provisioned"
CONSISTENCY = "consistency"
#: Which source table each collection holds (``_id``: ``database.collection``), so that a
#: table mapped onto another's collection is refused across sessions too.
NAMES = "trep_names"


class MongoTracking:
    """One group's documents in the tracking database."""

    def __init__(self, ctx: TargetContext, tracking_db: str, group: str) -> None:
        self.ctx = ctx
        self.tracking_db = tracking_db
        self.group = group

    def read(self) -> tuple[Position | None, int | None]:
        """The stored position, and its seqno to write the next one against."""
        coll = self.ctx.client[self.tracking_db][COMMIT_SEQNO]
        doc = classified(lambda: coll.find_one({ID: TASK_ID}), self.ctx.target,
                         f"reading {COMMIT_SEQNO}")
        if doc is None or doc.get("seqno") is None:
            return None, None
        stored = Position(seqno=int(doc["seqno"]), epoch=int(doc.get("epoch_number") or 0),
                          event_id=str(doc.get("eventid") or ""),
                          source_id=str(doc.get("source_id") or ""),
                          fragno=int(doc.get("fragno") or 0),
                          last_frag=bool(doc.get("last_frag", True)),
                          shard_id=str(doc.get("shard_id") or ""))
        return stored, int(doc["seqno"])

    def clear(self) -> None:
        """Delete the task's position document."""
        coll = self.ctx.client[self.tracking_db][COMMIT_SEQNO]
        classified(lambda: coll.delete_one({ID: TASK_ID}), self.ctx.target,
                   f"clearing {COMMIT_SEQNO}")

    def names(self) -> dict[str, str]:
        """The recorded owners: ``database.collection`` -> ``schema.table``."""
        coll = self.ctx.client[self.tracking_db][NAMES]
        docs = classified(lambda: list(coll.find({})), self.ctx.target, f"reading {NAMES}")
        return {str(d[ID]): str(d["source"]) for d in docs}

    def record_name(self, name: str, source: str) -> None:
        """Record that collection ``name`` holds table ``source`` (before its first write)."""
        coll = self.ctx.client[self.tracking_db][NAMES]
        classified(lambda: coll.replace_one({ID: name}, {ID: name, "source": source},
                                            upsert=True), self.ctx.target, f"writing {NAMES}")

    def forget_name(self, name: str) -> None:
        """Forget who holds collection ``name`` (renamed or dropped with its table)."""
        coll = self.ctx.client[self.tracking_db][NAMES]
        classified(lambda: coll.delete_one({ID: name}), self.ctx.target, f"writing {NAMES}")

    def heartbeat(self, beat: Heartbeat) -> Write:
        """The guarded write of a heartbeat's document (``_id``: the heartbeat id)."""
        def naive(value: dt.datetime | None) -> dt.datetime | None:
            return value.astimezone(dt.UTC).replace(tzinfo=None) if value else None
        fields = {"seqno": Int64(beat.seqno), "eventid": beat.event_id,
                  "source_tstamp": naive(beat.source_tstamp),
                  "target_tstamp": naive(beat.target_tstamp), "lag_millis": beat.lag_millis,
                  "salt": beat.salt, "name": beat.name}
        return Write(beat.seqno, 0, beat.event_id, f"{self.tracking_db}.{HEARTBEAT}",
                     Int64(beat.id), row_document(Int64(beat.id), beat.seqno, fields.items()))

    def record_check(self, result: CheckResult) -> None:
        """Upsert the range's document in ``tungsten_<service>.consistency`` (Tungsten's
        ``consistency`` table's columns as fields)."""
        doc = {ID: {"db": result.schema, "tbl": result.table, "id": result.range},
               "db": result.schema, "tbl": result.table, "id": result.range,
               "row_offset": result.range * result.limit, "row_limit": result.limit,
               "this_crc": result.target_digest[:40], "this_cnt": result.target_count,
               "master_crc": result.source_digest[:40], "master_cnt": result.source_count,
               "ts": dt.datetime.now(dt.UTC).replace(tzinfo=None), "method": result.method,
               "group": self.group, "seqno": Int64(result.seqno), "check": result.to_json()}
        coll = self.ctx.client[self.tracking_db][CONSISTENCY]
        classified(lambda: coll.replace_one({ID: doc[ID]}, doc, upsert=True), self.ctx.target,
                   "recording a consistency check", result.seqno)

    def advance(self, position: Position, expected: int | None,
                session: ClientSession | None) -> None:
        """Write ``position`` if the stored seqno is still ``expected`` (compare-and-set);
        PositionConflict if it moved."""
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        source_time = dt.datetime.fromtimestamp(position.tstamp / 1e6, dt.UTC).replace(
            tzinfo=None)
        doc = {ID: TASK_ID, "task_id": TASK_ID, "seqno": Int64(position.seqno),
               "fragno": position.fragno, "last_frag": position.last_frag,
               "source_id": position.source_id, "epoch_number": Int64(position.epoch),
               "eventid": position.event_id,
               "applied_latency": max(0, int((now - source_time).total_seconds())),
               "update_timestamp": now, "shard_id": position.shard_id,
               "extract_timestamp": source_time}
        # Matches only the position this applier expects; otherwise the upsert collides with
        # the stored document's _id and nothing is written.
        stored_seqno: Any = Int64(expected) if expected is not None else None
        reply = update(self.ctx.client, Namespace(self.tracking_db, COMMIT_SEQNO),
                       [{"q": {ID: TASK_ID, "seqno": stored_seqno}, "u": doc,
                         "upsert": True}], session)
        errors = reply.get("writeErrors")
        if errors:
            if errors[0].get("code") == DUPLICATE_KEY:
                stored = self.ctx.client[self.tracking_db][COMMIT_SEQNO].find_one(
                    {ID: TASK_ID}, session=session)
                found = stored.get("seqno") if stored else None
                raise PositionConflict(
                    f"{self.ctx.target}: {self.tracking_db}.{COMMIT_SEQNO} moved under this "
                    f"consumer (expected stored seqno "
                    f"{'none' if expected is None else expected}, found "
                    f"{'none' if found is None else found}): another process applies the same "
                    "consumer group to this target. The position was not written; run one "
                    "process per group.", seqno=position.seqno)
            raise DataError(f"{self.ctx.target}: writing {COMMIT_SEQNO}: "
                            f"{error_text(errors[0])}", seqno=position.seqno)
