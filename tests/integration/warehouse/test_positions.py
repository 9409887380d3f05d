"""The warehouse's ``trep_commit_seqno`` in Delta: the compare-and-set of each block's
position, on the stack's Spark Connect server."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any

from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.warehouse.positions import COMMIT_SEQNO, DeltaTracking, Stored

from ..sparks import connect_session, delta_rows

#: Values a SQL literal must carry exactly: quotes, backslashes, unicode.
AWKWARD = "it's a \\'shard\\' ü \\\\ end\\"


def test_position_moves_only_from_the_expected_seqno_with_every_value(
        tmp_path: Path, spark_connect: Any) -> None:
    base = f"file://{tmp_path}/tracking"
    tracking = DeltaTracking(connect_session(), base)
    tracking.create()
    assert tracking.read() == Stored(None, 0)
    assert tracking.advance(None, None, 3)  # a reset: the row, cleared, in generation 3
    assert tracking.read() == Stored(None, 3)
    stamp = 1_700_000_000_123_456
    first = Position(seqno=7, epoch=2, event_id="mysql-bin.000001:0000000000000456;-1",
                     source_id="db-1", shard_id=AWKWARD, tstamp=stamp)
    second = Position(seqno=2**63 - 1, epoch=2**40, event_id=f"x'{AWKWARD}",
                      source_id=AWKWARD, fragno=3, last_frag=False, shard_id="",
                      tstamp=stamp + 1)
    assert not tracking.advance(first, 6, 3)  # the stored seqno is NULL, not 6
    for position, expected, generation in ((first, None, 3), (second, 7, 4)):
        before = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        assert tracking.advance(position, expected, generation)
        after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        # Read back without the commit time, which trep_commit_seqno keeps apart.
        assert tracking.read() == Stored(replace(position, tstamp=0), generation)
        rows = delta_rows(f"{base}/trep_commit_seqno",
                          ["task_id", "last_frag", "extract_timestamp", "update_timestamp",
                           "applied_latency", "connection_id"])
        assert len(rows) == 1
        task, last_frag, extracted, updated, latency, connection = rows[0]
        assert (task, last_frag, connection) == (0, "1" if position.last_frag else "0", None)
        assert extracted == dt.datetime(1970, 1, 1) + dt.timedelta(
            microseconds=position.tstamp)
        assert before <= updated <= after  # UTC wall time, whatever the process's zone
        assert latency == int((updated - extracted).total_seconds())
        assert not tracking.advance(second, None, 3)  # a seqno is stored now
        assert not tracking.advance(second, 8, 3)


def test_a_table_made_without_the_tasks_row_gets_it_at_the_first_position(
        tmp_path: Path, spark_connect: Any) -> None:
    """Tables made before the row came with the table (or emptied by a reset) start as
    they did: the first position inserts the row."""
    base = f"file://{tmp_path}/tracking"
    spark = connect_session()
    tracking = DeltaTracking(spark, base)
    spark.sql(f"CREATE TABLE {tracking.ref('trep_commit_seqno')} ({COMMIT_SEQNO}) USING delta")
    tracking.create()
    assert tracking.read() == Stored(None, 0)
    first = Position(seqno=4, epoch=1, event_id="mysql-bin.000001:0000000000000099;-1",
                     source_id="db-1")
    assert not tracking.advance(first, 3, 0)
    assert tracking.advance(first, None, 0)
    assert tracking.read() == Stored(first, 0)
    assert len(delta_rows(f"{base}/trep_commit_seqno", ["task_id"])) == 1
    assert not tracking.advance(first, None, 0)


def test_heartbeat_and_consistency_tables_are_made_at_their_first_write(
        tmp_path: Path, spark_connect: Any) -> None:
    """A group's start makes only ``trep_commit_seqno`` (and ``trep_staged_files`` in
    stage-only); the others come with their first row."""
    base = f"file://{tmp_path}/tracking"
    tracking = DeltaTracking(connect_session(), base)
    tracking.create()
    assert [t for t in ("trep_commit_seqno", "heartbeat", "consistency", "trep_staged_files")
            if tracking.created(t)] == ["trep_commit_seqno"]
    now = dt.datetime(2026, 12, 2, 11, 0, tzinfo=dt.UTC)
    beat = Heartbeat(id=1, name="NONE", salt=5, seqno=9, event_id="e", source_tstamp=now,
                     target_tstamp=now, lag_millis=12)
    tracking.heartbeats([beat])
    tracking.heartbeats([replace(beat, seqno=10)])  # made once, then upserted
    assert delta_rows(f"{base}/heartbeat", ["id", "seqno", "lag_millis"]) == [(1, 10, 12)]
    assert not tracking.created("consistency")
    DeltaTracking(connect_session(), base).create(staged_files=True)
    assert tracking.created("trep_staged_files")
