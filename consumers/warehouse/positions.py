"""The group's tracking store as Delta tables under ``<tracking_uri>``.

- ``trep_commit_seqno``: Tungsten's columns (seeds/003) plus ``generation``: one row per
  task, made with the table. Written last in every block, as a compare-and-set (an UPDATE
  of the row holding the seqno this applier read; Delta's optimistic concurrency refuses a
  concurrent writer).
  ``generation`` counts ``reset`` / ``--from-seqno``: it is part of every Delta transaction
  id, so a replay after a reset is applied instead of being skipped as already done.
- ``heartbeat``: Tungsten's heartbeat columns, one row per heartbeat id (made at the first
  heartbeat, like ``consistency`` at the first check).
- ``consistency``: Tungsten's ``consistency`` columns plus the group, the seqno and the
  result as JSON: one row per group, table and checked range (``readback.py`` reads the
  range back).
- ``trep_staged_files``: in ``stage-only`` mode, every staging file written, with its seqno
  range, table, row count and column layout, for the external loader.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consumers.check import CheckResult
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.warehouse.merge import TXN_APP_ID, TXN_VERSION, USER_METADATA
from consumers.warehouse.naming import quote_name
from consumers.warehouse.staging import Segment
from consumers.warehouse.storage import present

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMIT_SEQNO = (
    "task_id INT, seqno BIGINT, fragno INT, last_frag STRING, source_id STRING, "
    "epoch_number BIGINT, eventid STRING, applied_latency INT, update_timestamp TIMESTAMP, "
    "shard_id STRING, extract_timestamp TIMESTAMP, connection_id BIGINT, generation BIGINT")
HEARTBEAT = ("id BIGINT, seqno BIGINT, eventid STRING, source_tstamp TIMESTAMP, "
             "target_tstamp TIMESTAMP, lag_millis BIGINT, salt BIGINT, name STRING")
STAGED_FILES = ("seqno_low BIGINT, seqno_high BIGINT, schema_name STRING, table_name STRING, "
                "uri STRING, row_count BIGINT, columns STRING, key_columns STRING, "
                "staged_at TIMESTAMP, generation BIGINT")
CONSISTENCY = (
    "db STRING, tbl STRING, id INT, row_offset BIGINT, row_limit INT, this_crc STRING, "
    "this_cnt BIGINT, master_crc STRING, master_cnt BIGINT, ts TIMESTAMP, method STRING, "
    "group_name STRING, seqno BIGINT, result STRING")


_COLUMNS = [c.split()[0] for c in COMMIT_SEQNO.split(", ")]


def _commit_seqno(position: Position | None, task_id: int, generation: int
                  ) -> tuple[Any, ...]:
    """The ``trep_commit_seqno`` row of ``position`` (None: a cleared position), its times
    aware (a naive one would be taken as the Python process's local time)."""
    now = dt.datetime.now(dt.UTC)
    if position is None:
        return (task_id, None, None, None, None, None, None, None, now, None, None, None,
                generation)
    source = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
        microseconds=position.tstamp)
    latency = max(0, int((now - source).total_seconds()))
    return (task_id, position.seqno, position.fragno, "1" if position.last_frag else "0",
            position.source_id, position.epoch, position.event_id, latency, now,
            position.shard_id, source, None, generation)


def _literal(value: Any) -> str:
    """A Spark SQL literal of a ``trep_commit_seqno`` value (timestamps are UTC: the
    session's time zone is forced to UTC)."""
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{utc.isoformat(sep=' ')}'"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Stored:
    """What ``trep_commit_seqno`` holds for a task."""

    position: Position | None
    generation: int


class DeltaTracking:
    """Reads and writes the tracking tables of one group."""

    def __init__(self, spark: SparkSession, base_uri: str) -> None:
        self.spark = spark
        self.base = base_uri.rstrip("/")
        #: Tables known to exist (``_ensure``).
        self._made: set[str] = set()

    def uri(self, table: str) -> str:
        return f"{self.base}/{table}"

    def ref(self, table: str) -> str:
        return "delta." + quote_name(self.uri(table))

    def created(self, table: str) -> bool:
        """Whether ``table`` exists (its ``_delta_log`` folder is there)."""
        return present(self.spark, f"{self.uri(table)}/_delta_log")

    def create(self, staged_files: bool = False) -> None:
        """Create ``trep_commit_seqno`` if missing, and ``trep_staged_files`` if asked
        (``stage-only``: its loader reads it from the start). ``heartbeat`` and
        ``consistency`` are made at their first write (``_ensure``): each table is a Delta
        commit, about 0.4 s of a group's start on a warm JVM, and most groups never
        write a consistency row.

        A table whose ``_delta_log`` folder is there is not touched: CREATE TABLE IF NOT
        EXISTS would load its snapshot, a Spark job per table on every restart."""
        if not self.created("trep_commit_seqno"):
            # Made with task 0's row (no position, generation 0), so that even the first
            # ``advance`` is an UPDATE: a MERGE that inserts costs twice its Delta commit.
            self._plain()
            self.spark.createDataFrame([_commit_seqno(None, 0, 0)], COMMIT_SEQNO).write \
                .format("delta").mode("ignore").save(self.uri("trep_commit_seqno"))
        if staged_files:
            self._ensure("trep_staged_files", STAGED_FILES)

    def _ensure(self, table: str, columns: str) -> None:
        """Create ``table`` unless it exists."""
        if table in self._made:
            return
        if not self.created(table):
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {self.ref(table)} ({columns}) "
                           "USING delta")
        self._made.add(table)

    def read(self, task_id: int = 0) -> Stored:
        rows = self.spark.sql(f"SELECT * FROM {self.ref('trep_commit_seqno')} "
                              f"WHERE task_id = {int(task_id)}").collect()
        if not rows:
            return Stored(None, 0)
        row = rows[0]
        generation = int(row["generation"] or 0)
        if row["seqno"] is None:
            return Stored(None, generation)
        return Stored(Position(seqno=row["seqno"], epoch=row["epoch_number"],
                               event_id=row["eventid"] or "", source_id=row["source_id"] or "",
                               fragno=row["fragno"] or 0, last_frag=row["last_frag"] != "0",
                               shard_id=row["shard_id"] or ""), generation)

    def advance(self, position: Position | None, expected: int | None, generation: int,
                task_id: int = 0) -> bool:
        """Move the position from ``expected`` to ``position`` (None: clear it), with
        ``generation``; False if the stored seqno is not ``expected`` (nothing written)."""
        values = _commit_seqno(position, task_id, generation)
        # An UPDATE guarded by the expected seqno: one Delta commit like a MERGE's, at
        # about half its cost (no join with a source; measured 0.75 s against 1.3 s a
        # block on local[2]), and the same conflict with a concurrent writer.
        sets = ", ".join(f"{name} = {_literal(value)}"
                         for name, value in zip(_COLUMNS, values, strict=True)
                         if name != "task_id")
        guard = "seqno IS NULL" if expected is None else f"seqno = {int(expected)}"
        sql = (f"UPDATE {self.ref('trep_commit_seqno')} SET {sets} "
               f"WHERE task_id = {int(task_id)} AND {guard}")
        self._plain()
        done = self.spark.sql(sql).collect()
        if bool(done) and int(done[0]["num_affected_rows"]) == 1:
            return True
        if expected is not None:
            return False
        # No position yet and no row of the task to update (a reset deleted it, or the
        # table was made without it): insert it, unless a position is stored by now.
        view = f"tungsten_position_{uuid.uuid4().hex}"
        self.spark.createDataFrame([values], COMMIT_SEQNO).createOrReplaceTempView(view)
        sql = (f"MERGE INTO {self.ref('trep_commit_seqno')} t USING {view} s "
               "ON t.task_id = s.task_id WHEN MATCHED AND t.seqno IS NULL THEN UPDATE SET * "
               "WHEN NOT MATCHED THEN INSERT *")
        try:
            self._plain()
            done = self.spark.sql(sql).collect()
        finally:
            self.spark.catalog.dropTempView(view)
        return bool(done) and int(done[0]["num_affected_rows"]) == 1

    def bump_generation(self, task_id: int = 0) -> int:
        """Clear the position and start a new generation; the new generation."""
        stored = self.read(task_id)
        generation = stored.generation + 1
        self._plain()
        self.spark.sql(f"DELETE FROM {self.ref('trep_commit_seqno')} "
                       f"WHERE task_id = {int(task_id)}")
        if not self.advance(None, None, generation, task_id):
            raise RuntimeError("trep_commit_seqno changed during a reset")
        return generation

    def heartbeats(self, beats: list[Heartbeat]) -> None:
        """Upsert heartbeat rows (the last one per id)."""
        latest = {b.id: b for b in beats}

        def naive(t: dt.datetime | None) -> dt.datetime | None:
            return t.astimezone(dt.UTC).replace(tzinfo=None) if t is not None else None
        rows = [(b.id, b.seqno, b.event_id, naive(b.source_tstamp), naive(b.target_tstamp),
                 b.lag_millis, b.salt, b.name) for b in latest.values()]
        self._upsert("heartbeat", rows, HEARTBEAT, ["id"])

    def record_staged(self, segments: list[Segment], generation: int, app_id: str) -> None:
        """Append the block's staging files to ``trep_staged_files`` (idempotent per block:
        Delta's transaction id, version = the block's last seqno)."""
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        rows = [(s.low, s.high, s.schema, s.table, s.uri, s.rows,
                 json.dumps([c.to_avro() for c in s.columns]), ",".join(s.key), now,
                 generation) for s in segments]
        if not rows:
            return
        self._ensure("trep_staged_files", STAGED_FILES)
        frame = self.spark.createDataFrame(rows, STAGED_FILES)
        conf = self.spark.conf
        conf.set(TXN_APP_ID, app_id)
        conf.set(TXN_VERSION, str(max(s.high for s in segments)))
        try:
            frame.write.format("delta").mode("append").save(self.uri("trep_staged_files"))
        finally:
            self._plain()

    def record_check(self, group: str, result: CheckResult) -> None:
        """Upsert one checked range's row of the ``consistency`` table."""
        self._upsert("consistency", [consistency_row(group, result)],
                     CONSISTENCY, ["db", "tbl", "id", "group_name"])

    def _upsert(self, table: str, rows: list[tuple[Any, ...]], columns: str,
                key: list[str]) -> None:
        """MERGE ``rows`` into a tracking table by ``key``: matched rows replaced."""
        self._ensure(table, columns)
        view = f"tungsten_{table}_{uuid.uuid4().hex}"
        self.spark.createDataFrame(rows, columns).createOrReplaceTempView(view)
        on = " AND ".join(f"t.{k} = s.{k}" for k in key)
        try:
            self._plain()
            self.spark.sql(f"MERGE INTO {self.ref(table)} t USING {view} s ON {on} "
                           "WHEN MATCHED THEN UPDATE SET * "
                           "WHEN NOT MATCHED THEN INSERT *").collect()
        finally:
            self.spark.catalog.dropTempView(view)

    def _plain(self) -> None:
        """No transaction id or metadata of a data MERGE may leak into a tracking write."""
        for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA):
            self.spark.conf.unset(key)


def consistency_row(group: str, result: CheckResult) -> tuple[Any, ...]:
    """The ``consistency`` table's row of a checked range (``CONSISTENCY`` columns)."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return (result.schema, result.table, result.range, result.range * result.limit,
            result.limit, result.target_digest[:40], result.target_count,
            result.source_digest[:40], result.source_count, now, result.method, group,
            result.seqno, json.dumps(result.to_json()))
