"""The group's position, heartbeats and check results in the service's tracking index.

The tracking index (``tungsten_<service>``, lower-cased) holds documents of every group of
the service, told apart by ``kind`` and ``group``: the position (``trep_commit_seqno:<group>:0``,
Tungsten's columns as fields), one ``heartbeat`` per heartbeat id, one ``check`` per checked
table and range. The position is written last in every block, as a compare-and-set against the
document's ``_seq_no``/``_primary_term`` as last read or written (``op_type=create`` when there
is none), so a second writer of the group gets a PositionConflict instead of moving it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from elasticsearch import ApiError, TransportError

from consumers.check import CheckResult
from consumers.elasticsearch.context import TargetContext
from consumers.elasticsearch.errors import error_kind, request_error
from consumers.elasticsearch.indices import wait_for_primary
from consumers.elasticsearch.types import dumps, iso
from consumers.errors import DataError, PositionConflict, TransientError
from consumers.heartbeat import Heartbeat
from consumers.position import Position

#: The tracking index: positions and heartbeats of every group of the service.
TRACKING_MAPPING: dict[str, Any] = {"dynamic": "strict", "properties": {
    "kind": {"type": "keyword"}, "group": {"type": "keyword"},
    "task_id": {"type": "integer"}, "seqno": {"type": "long"},
    "fragno": {"type": "integer"}, "last_frag": {"type": "boolean"},
    "source_id": {"type": "keyword"}, "epoch_number": {"type": "long"},
    "eventid": {"type": "keyword"}, "applied_latency": {"type": "long"},
    "update_timestamp": {"type": "date"}, "shard_id": {"type": "keyword"},
    "extract_timestamp": {"type": "date"}, "id": {"type": "long"},
    "source_tstamp": {"type": "date"}, "target_tstamp": {"type": "date"},
    "lag_millis": {"type": "long"}, "salt": {"type": "long"}, "name": {"type": "keyword"},
    # A consistency check's result, kept as it is (not searched).
    "check": {"type": "object", "enabled": False},
}}

#: The position document's (_seq_no, _primary_term) as last read or written; None: no
#: position stored (the next write creates it).
Expected = tuple[int, int] | None


class TrackingIndex:
    """One group's documents in the tracking index."""

    def __init__(self, ctx: TargetContext, service: str, group: str, index: str) -> None:
        self.ctx = ctx
        self.service = service
        self.group = group
        self.index = index
        self.position_id = f"trep_commit_seqno:{group}:0"

    def create(self) -> None:
        """Create the tracking index, or add the fields an older one lacks; then wait for it."""
        try:
            self.ctx.es.indices.create(index=self.index, mappings={
                **TRACKING_MAPPING, "_meta": {"tungsten": {"tracking": self.service}}},
                settings=self.ctx.cfg.index_settings or None)
        except ApiError as exc:
            if error_kind(exc) != "resource_already_exists_exception":
                raise
            # An index made by an earlier version: add the fields it lacks (a no-op else).
            self.ctx.es.indices.put_mapping(index=self.index,
                                            properties=TRACKING_MAPPING["properties"])
        wait_for_primary(self.ctx.es, self.index, self.ctx.target)

    def read(self) -> tuple[Position | None, Expected]:
        """The stored position, and its document's (_seq_no, _primary_term) to write it
        back against."""
        try:
            found = self.ctx.es.options(ignore_status=404).get(
                index=self.index, id=self.position_id).body
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.ctx.target, "reading the position") from exc
        if not found.get("found"):
            return None, None
        doc = found["_source"]
        stored = Position(seqno=doc["seqno"], epoch=doc["epoch_number"],
                          event_id=doc["eventid"], source_id=doc.get("source_id") or "",
                          fragno=doc.get("fragno") or 0, last_frag=doc.get("last_frag", True),
                          shard_id=doc.get("shard_id") or "")
        return stored, (found["_seq_no"], found["_primary_term"])

    def clear(self) -> None:
        """Delete the group's position document."""
        try:
            self.ctx.es.options(ignore_status=404).delete(index=self.index, id=self.position_id,
                                                          refresh=False)
        except (ApiError, TransportError) as exc:
            raise request_error(exc, self.ctx.target, "clearing the position") from exc

    def write(self, position: Position, expected: Expected) -> Expected:
        """Write ``position`` if the stored one is still ``expected`` (compare-and-set);
        its document's new (_seq_no, _primary_term). PositionConflict if it moved."""
        now = dt.datetime.now(dt.UTC)
        source_time = dt.datetime.fromtimestamp(position.tstamp / 1e6, dt.UTC)
        doc = {"kind": "trep_commit_seqno", "group": self.group, "task_id": 0,
               "seqno": position.seqno, "fragno": position.fragno,
               "last_frag": position.last_frag, "source_id": position.source_id,
               "epoch_number": position.epoch, "eventid": position.event_id,
               "applied_latency": max(0, int((now - source_time).total_seconds())),
               "update_timestamp": iso(now), "shard_id": position.shard_id,
               "extract_timestamp": iso(source_time)}
        guard: dict[str, Any] = ({"op_type": "create"} if expected is None else
                                 {"if_seq_no": expected[0], "if_primary_term": expected[1]})
        try:
            done = self.ctx.es.index(index=self.index, id=self.position_id,
                                     document=doc, **guard).body
        except ApiError as exc:
            if exc.status_code != 409:
                raise request_error(exc, self.ctx.target, f"writing the position {position.seqno}",
                                    seqno=position.seqno) from exc
            return self._conflicting(position)
        except TransportError as exc:
            raise request_error(exc, self.ctx.target, f"writing the position {position.seqno}",
                                seqno=position.seqno) from exc
        return done["_seq_no"], done["_primary_term"]

    def _conflicting(self, position: Position) -> Expected:
        """A 409 on the position: our own write retried by the client, or another writer."""
        try:
            stored, expected = self.read()
        except TransientError:
            stored = None
        if stored is not None and (stored.seqno, stored.epoch, stored.event_id) == (
                position.seqno, position.epoch, position.event_id):
            return expected  # the first attempt went through: its _seq_no is read back
        raise PositionConflict(
            f"{self.ctx.target}: the position document {self.index}/{self.position_id} "
            f"moved under this consumer (now at seqno "
            f"{stored.seqno if stored else 'none'}): another process applies the same "
            "consumer group to this cluster. This block's documents are seqno-guarded and "
            "change nothing a later seqno wrote; run one process per group.",
            seqno=position.seqno)

    def heartbeat(self, beat: Heartbeat) -> bytes:
        """A ``heartbeat`` document in the tracking index, as bulk lines (sent with the
        block's data)."""
        doc = {"kind": "heartbeat", "group": self.group, "id": beat.id, "seqno": beat.seqno,
               "eventid": beat.event_id,
               "source_tstamp": iso(beat.source_tstamp) if beat.source_tstamp else None,
               "target_tstamp": iso(beat.target_tstamp), "lag_millis": beat.lag_millis,
               "salt": beat.salt, "name": beat.name}
        action = {"index": {"_index": self.index,
                            "_id": f"heartbeat:{self.group}:{beat.id}"}}
        return dumps(action) + b"\n" + dumps(doc) + b"\n"

    def record_check(self, result: CheckResult) -> None:
        """A ``check`` document in the tracking index, per table and range."""
        doc = {"kind": "check", "group": self.group, "seqno": result.seqno,
               "check": result.to_json()}
        try:
            self.ctx.es.index(index=self.index, document=doc,
                              id=f"check:{self.group}:{result.schema}.{result.table}:"
                                 f"{result.range}")
        except ApiError as exc:
            kind = TransientError if exc.meta.status in (429, 503) else DataError
            raise kind(f"{self.ctx.target}: recording a check: {exc}") from exc
        except TransportError as exc:
            raise TransientError(f"{self.ctx.target}: recording a check: {exc}") from exc
