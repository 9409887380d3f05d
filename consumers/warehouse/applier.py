"""The warehouse applier: Tungsten's batch apply on Spark and Delta Lake.

A block (default: up to 300,000 rows or 30 s) is staged as CSV files, one per table and
column layout (``staging.py``, seeds/002), and materialized by Spark: typed per the THL column
specs, collapsed to the last operation per key by (seqno, row), and MERGEd into one Delta
table per source table (``merge.py``). Statements (DDL) are not replayed: new source columns
become new Delta columns from the row changes themselves.

Exactly once (atomicity: seqno-guarded). Delta has no transaction across tables, so a block
commits table by table, then the position (``trep_commit_seqno``, a Delta table) last, as a
compare-and-set. A crash anywhere in between leaves tables that are ahead of the position;
the replay from the position changes nothing in them: every MERGE carries Delta's
transaction id (``tungsten.<service>.<group>.g<generation>``, version = the segment's last
seqno), which Delta skips when it already committed it, and a row is only ever replaced by
a change with a higher seqno (``_seqno`` is kept in every row). ``reset`` and
``--from-seqno`` start a new generation, so a deliberate replay is applied, converging to the
same tables.

Overlapped position (``consumers.applier.Pipelined``): ``commit_begin`` merges the block's
tables and leaves the position's Delta commit (about 1 s on ``local[2]`` whatever the block
holds) to a thread of its own while the runtime reads and stages the next block; the block
counts as committed once that commit is done (``finish``), and the applier's next Spark
operation of any kind waits for it, so the order of Delta commits is unchanged.

Provisioning (``consumers.provisioning``): a table's first provisioned chunk empties its
Delta table inside the chunk's own MERGE (``Segment.truncate``); chunks and ``provisioning``
row changes are upserts already.

Schema changes (``restructure.py``): TRUNCATE, renamed tables and columns and (``evolve``)
dropped tables are carried out on the Delta tables at commit, each in a block of its own,
replay-safe (Delta transaction ids where a commit carries data, state checks elsewhere).
In ``stage-only`` mode they are only logged: the job that merges the staging files (kept
per table name) must follow them.

Consistency checks (``readback.py``): a checked range is read back from its Delta table as
THL values, after every earlier seqno committed; results go to the Delta ``consistency``
table. Parallel channels are not supported (``Capabilities.channels`` False).

Crash points: ``apply-between-tables`` (one table of the block merged, the next not),
``apply-before-position`` (every table merged, the position not written),
``apply-commit-sent`` (the position being written), ``apply-committed``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consumers.applier import (
    Atomicity,
    BlockLimits,
    Capabilities,
    PendingCommit,
    StatementPolicy,
)
from consumers.check import CheckRange, CheckResult
from consumers.errors import (
    ConsumerError,
    DataError,
    PositionConflict,
    TerminalError,
    TransientError,
)
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.warehouse import readback
from consumers.warehouse import session as spark_sessions
from consumers.warehouse.config import WarehouseTarget
from consumers.warehouse.errors import classify
from consumers.warehouse.merge import DeltaWriter, Plan
from consumers.warehouse.positions import DeltaTracking
from consumers.warehouse.restructure import Restructurer
from consumers.warehouse.staging import BatchStager, Segment, StagingArea, StagingError
from consumers.zero_dates import ZeroDateTally
from replicator import crashpoints
from replicator.progress import CatchUp
from thl_topics.errors import ThlError
from thl_topics.event import ColumnSpec, ThlEvent, ThlValue
from thl_topics.reader import ThlReader
from thl_topics.schema_change import ChangeKind, SchemaChange

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Spark deaths in a row, with no block committed between them, before the group stops.
SPARK_DEATHS = 3
#: Seconds after taking over a remote session with operations still running during which a
#: Delta conflict is taken for one of those (they were interrupted; one may still commit).
ORPHAN_WINDOW_S = 120.0

#: 300,000 rows or 30 seconds, whichever comes first (or 256 MiB of THL). Tungsten's
#: example is 10,000 rows, but every block pays seconds of Delta commits (each table's
#: MERGE, the position) however few rows it holds: a backlog drains at about 3,500 rows/s
#: on local[2] with 10,000-row blocks, 15,000 with 100,000-row blocks, 25,000 with 300,000
#: (docs/thl.md). The row limit counts only under a backlog; at low load the 30 s do.
DEFAULT_BLOCK = BlockLimits(events=1_000_000, rows=300_000, bytes=256 << 20, ms=30_000)


class WarehouseApplier:
    """Applies THL events to Delta tables through CSV staging and Spark MERGEs."""

    def __init__(self, cfg: WarehouseTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.service = ctx.service.service
        #: Until then, a conflict may be a killed predecessor's last commit (``_acquire``).
        self._orphans_until = 0.0
        self.group = ctx.group
        self.schema_changes = ctx.schema_changes
        self.target = f"warehouse {cfg.location}"
        self.capabilities = Capabilities(
            atomicity=Atomicity.SEQNO_GUARDED, statements=StatementPolicy.SKIP,
            keyless_tables=cfg.keyless == "history", checks=True, block=DEFAULT_BLOCK)
        self.area = StagingArea(cfg.staging(), self.service, self.group)
        self._spark: SparkSession | None = None
        #: Times Spark died since the last committed block.
        self._deaths = 0
        self._writer: DeltaWriter | None = None
        self._tracking: DeltaTracking | None = None
        self._zeros = ZeroDateTally(self.target, ctx.metrics, log)
        self._stager = self._new_stager()
        self._written: list[Segment] = []
        self._beats: list[Heartbeat] = []
        #: Tables a TRUNCATE of the open block empties: (schema, table, seqno).
        self._truncates: list[tuple[str, str, int]] = []
        #: Renames and drops of the open block: (change, keep_old, seqno).
        self._changes: list[tuple[SchemaChange, bool, int]] = []
        self._generation = 0
        #: The stored seqno this applier last read or wrote (compare-and-set).
        self._expected: int | None = None
        self._settings = ctx.service
        self._catch_up = CatchUp(f"warehouse {self.group}")
        #: Writes a block's position while the runtime stages the next block.
        self._positions: ThreadPoolExecutor | None = None
        #: The block whose position is being written (``commit_begin``).
        self._pending: _PendingPosition | None = None

    def _new_stager(self) -> BatchStager:
        # Files an external loader or a reader of the kept history gets hold every operation.
        return BatchStager(self.cfg.separator, self.cfg.quote_all, self.cfg.zero_dates,
                           collapse=self.cfg.mode == "merge" and not self.cfg.keep_staging,
                           zeros=self._zeros)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            raise RuntimeError("not connected: connect() first")
        return self._spark

    @property
    def tracking(self) -> DeltaTracking:
        if self._tracking is None:
            raise RuntimeError("not connected: connect() first")
        return self._tracking

    @property
    def writer(self) -> DeltaWriter:
        if self._writer is None:
            raise RuntimeError("not connected: connect() first")
        return self._writer

    def app_id(self) -> str:
        """Delta's transaction application id of this group and generation."""
        return f"tungsten.{self.service}.{self.group}.g{self._generation}"

    # -- connection -------------------------------------------------------------------------

    def connect(self) -> None:
        try:
            if self._spark is not None and not spark_sessions.alive(self._spark):
                spark_sessions.release(self._spark)
                self._spark = None
                # A Spark that dies again and again on the same block (out of memory on a
                # row of many MiB) would be restarted forever: after a few, stop and say so.
                self._deaths += 1
                if self._deaths >= SPARK_DEATHS:
                    raise TerminalError(
                        f"{self.target}: Spark died {self._deaths} times in a row before a "
                        f"block after seqno {self._expected} committed (see Spark's log: out "
                        "of memory on a large row?); give the driver more memory "
                        "(spark.conf spark.driver.memory) and put the group online again")
                log.warning("%s: Spark went away; starting a new session", self.target)
                spark_sessions.forget_dead_jvm()
            if self._spark is None:
                self._spark = self._acquire()
            self._writer = DeltaWriter(self.spark, self.cfg,
                                       schema_changes=self.schema_changes)
            self._tracking = DeltaTracking(self.spark, self.cfg.tracking(self.service))
            self.tracking.create(staged_files=self.cfg.mode == "stage-only")
            if self.cfg.mode == "merge" and not self.cfg.keep_staging:
                # Whatever is left was staged by a block that did not commit: it is staged
                # again from the THL.
                self.area.clear(self._spark)
        except ConsumerError:
            raise
        except Exception as exc:
            raise self._classify(exc, "opening the warehouse") from exc

    def _acquire(self) -> SparkSession:
        spark = spark_sessions.acquire(self.cfg.spark, owner=f"{self.service}/{self.group}")
        taken = spark_sessions.takeovers.get(id(spark))
        if taken is not None and taken.interrupted:
            self._orphans_until = time.monotonic() + ORPHAN_WINDOW_S
        return spark

    def _after_takeover(self, exc: ConsumerError) -> ConsumerError:
        """A conflict right after taking over a remote session whose operations were still
        running: the killed predecessor's MERGE committed first. The block is applied again
        (Delta's transaction ids skip what it committed), not stopped as a second writer."""
        if isinstance(exc, PositionConflict) and time.monotonic() < self._orphans_until:
            return TransientError(f"{exc} (an operation of this group's previous process, "
                                  "interrupted on the Spark Connect server, committed first; "
                                  "applying the block again)", seqno=exc.seqno)
        return exc

    def warm_up(self) -> None:
        """A standby starts its Spark and reads the position once: the JVM, Spark's and
        Delta's classes and the first Delta read are most of a warehouse start."""
        if self.cfg.spark.remote is not None:
            # Nothing to warm on a Connect server; and the group's session must not be
            # taken over (its running operations interrupted) before the lead is ours.
            return
        if self._spark is None:
            self._spark = self._acquire()
        tracking = DeltaTracking(self._spark, self.cfg.tracking(self.service))
        if tracking.created("trep_commit_seqno"):
            tracking.read()

    def position(self) -> Position | None:
        self._settle()
        try:
            stored = self.tracking.read()
        except Exception as exc:
            raise self._classify(exc, "reading trep_commit_seqno") from exc
        self._generation = stored.generation
        self._expected = stored.position.seqno if stored.position else None
        self._watch_backlog(self._expected)
        return stored.position

    def _watch_backlog(self, applied: int | None) -> None:
        """Show catch-up progress when the THL is far ahead of the stored position."""
        try:
            with ThlReader(self._settings.kafka.client(), self._settings.thl_topic,
                           poll_timeout=2.0) as reader:
                tail = reader.tail()
        except ThlError as exc:  # progress is informational; the runtime reports the THL
            log.debug("%s: no THL tail for progress: %s", self.target, exc)
            return
        if tail is not None:
            self._catch_up.start(-1 if applied is None else applied, tail.seqno)

    def reset(self) -> None:
        self._settle()
        try:
            self._generation = self.tracking.bump_generation()
        except Exception as exc:
            raise self._classify(exc, "clearing trep_commit_seqno") from exc
        self._expected = None
        log.info("%s: position cleared; generation %d", self.target, self._generation)

    def close(self) -> None:
        self.rollback()
        if self._positions is not None:
            self._positions.shutdown()
            self._positions = None
        self._catch_up.stop()
        if self._spark is not None:
            spark_sessions.release(self._spark)
            self._spark = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self._stager = self._new_stager()
        self._written = []
        self._beats = []
        self._truncates = []
        self._changes = []

    def apply(self, event: ThlEvent) -> None:
        try:
            self._stager.add(event)
        except StagingError as exc:
            raise DataError(str(exc), seqno=event.seqno, event_id=event.event_id) from exc
        if event.last_frag and self._stager.rows >= self.cfg.staging_flush_rows:
            # On a seqno boundary only: a seqno's rows of one table stay in one file.
            self._write_staged()

    def heartbeat(self, beat: Heartbeat) -> None:
        self._beats.append(beat)

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        """The Delta table is emptied when the block commits (a block of its own: no rows
        are staged before it), as one DELETE commit (``DeltaWriter.empty``)."""
        self._truncates.append((schema, table, event.seqno))

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The Delta table moves to the new name's path (or is renamed in the catalog) when
        the block commits (``restructure.py``)."""
        self._changes.append((change, False, event.seqno))

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        """The Delta column is renamed (or, ``keep_old``, copied into a new one) when the
        block commits (``restructure.py``)."""
        self._changes.append((change, keep_old, event.seqno))

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The Delta table goes when the block commits (``restructure.py``)."""
        self._changes.append((change, False, event.seqno))

    def _write_staged(self) -> None:
        for seg in self._stager.segments:
            try:
                self.area.write(seg, len(self._written), self._spark)
            except OSError as exc:
                raise TransientError(f"{self.target}: cannot write staging file "
                                     f"{self.area.uri_of(seg, len(self._written))}: {exc}",
                                     seqno=seg.low) from exc
            seg.lines = []
            self._written.append(seg)
        self._stager.clear()

    def commit(self, position: Position) -> None:
        self.commit_begin(position).finish()

    def commit_begin(self, position: Position) -> PendingCommit:
        """Merge the block's tables (one Delta commit each), then hand the position's
        compare-and-set to the applier's position thread: the runtime reads and stages the
        next block while Delta commits the position (about 1 s a block on ``local[2]``
        whatever the block holds). Every later Spark operation of this applier waits for
        it first (``_settle``), so Delta still sees: tables, position, next tables. Reading
        this block's staged rows back (typed and checkpointed, no Delta commit) does not
        wait: it overlaps that position unless a TRUNCATE or a schema change of the block
        must come before (``plan`` reads the schemas they change)."""
        plans: list[Plan] | None = None
        if self._pending is not None and self.cfg.mode != "stage-only" \
                and not self._truncates and not self._changes:
            try:
                self._write_staged()
                plans = self._read(self._written)
            except Exception as exc:
                self._settle()  # the block before commits (or fails) first
                raise self._failed(exc, position) from exc
        self._settle()
        try:
            self._write_staged()
            segments = self._written
            if self.cfg.mode == "stage-only":
                self.tracking.record_staged(segments, self._generation, self.app_id())
                for schema, table, seqno in self._truncates:
                    log.warning("%s: TRUNCATE of %s.%s at seqno %d is not staged (mode "
                                "stage-only): the job that merges the staging files must "
                                "empty the table", self.target, schema, table, seqno)
                for change, _, seqno in self._changes:
                    log.warning("%s: %s at seqno %d is not carried out (mode stage-only): "
                                "staging files are kept per table name, so the job that "
                                "merges them must follow it", self.target,
                                change.describe(), seqno)
            else:
                self._empty_truncated(position)
                self._restructure(position)
                self._merge(self._read(segments) if plans is None else plans, position)
            if self._beats:
                self.tracking.heartbeats(self._beats)
            crashpoints.reached("apply-before-position")
        except Exception as exc:
            raise self._failed(exc, position) from exc
        if self._positions is None:
            self._positions = ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix=f"position-{self.group}")
        written = self._positions.submit(self.tracking.advance, position, self._expected,
                                         self._generation)
        self._pending = _PendingPosition(self, written, position, segments,
                                         self._zeros.take())
        self._written = []
        self._beats = []
        return self._pending

    def _settle(self) -> None:
        """Finish the block whose position is being written (raises its error)."""
        if self._pending is not None:
            self._pending.finish()

    def _finish(self, pending: _PendingPosition) -> None:
        """The block is committed once its position is: count it, drop its staging files.
        On an error nothing of it counts (its tables are ahead of the position: the replay
        skips them by their transaction ids)."""
        if self._pending is pending:
            self._pending = None
        position = pending.position
        try:
            advanced = pending.written.result()
        except Exception as exc:
            raise self._failed(exc, position) from exc
        if not advanced:
            raise self._failed(PositionConflict(
                f"{self.target}: trep_commit_seqno moved under this consumer (expected "
                f"seqno {self._expected}): another process applies the same consumer "
                "group. Its tables are seqno-guarded, so nothing was applied twice; run "
                "one process per group.", seqno=position.seqno), position)
        self._expected = position.seqno
        self._deaths = 0
        if self.cfg.mode == "merge" and not self.cfg.keep_staging:
            try:
                self.area.remove([s.uri for s in pending.segments], self._spark)
            except OSError as exc:  # committed already: a leftover file is only clutter
                log.warning("%s: cannot remove staging files: %s", self.target, exc)
        self._zeros.count(pending.zeros, position.seqno)
        self._catch_up.committed(position.seqno, sum(s.rows for s in pending.segments))

    def _failed(self, exc: Exception, position: Position) -> ConsumerError:
        """The error of a block that did not commit, its open state forgotten."""
        self._forget()
        error = exc if isinstance(exc, ConsumerError) else \
            self._classify(exc, f"committing up to seqno {position.seqno}")
        return self._after_takeover(error)

    def _commit_metadata(self, table: str, low: int, high: int, rows: int,
                         position: Position, **extra: Any) -> dict[str, Any]:
        """A Delta commit's ``userMetadata``: whose it is and which seqnos it covers."""
        return {"tungsten": {
            "service": self.service, "group": self.group, "generation": self._generation,
            "table": table, "low": low, "high": high, "rows": rows, **extra,
            "block_high": position.seqno}}

    def _empty_truncated(self, position: Position) -> None:
        for schema, table, seqno in self._truncates:
            ref = self.writer.resolve(schema, table)
            metadata = self._commit_metadata(f"{schema}.{table}", seqno, seqno, 0, position,
                                             truncate=True)
            if self.writer.empty(ref, self.app_id(), seqno, metadata):
                log.info("%s: %s emptied at seqno %d (TRUNCATE at the source)", self.target,
                         ref, seqno)
        self._truncates = []

    def _restructure(self, position: Position) -> None:
        restructurer = Restructurer(self.writer, self.target)
        for change, keep_old, seqno in self._changes:
            try:
                if change.kind is ChangeKind.RENAME_TABLE:
                    restructurer.rename_table(change, seqno)
                elif change.kind is ChangeKind.RENAME_COLUMN:
                    metadata = self._commit_metadata(
                        f"{change.schema}.{change.table}", seqno, seqno, 0, position,
                        rename_column=[change.column, change.new_name])
                    restructurer.rename_column(change, keep_old, seqno, self.app_id(),
                                               metadata)
                elif change.kind is ChangeKind.DROP_TABLE:
                    restructurer.drop_table(change, seqno)
            except ConsumerError:
                raise
            except Exception as exc:
                raise self._classify(exc, f"{change.describe()} at seqno {seqno}",
                                     seqno) from exc
        self._changes = []

    def _read(self, segments: list[Segment]) -> list[Plan]:
        """Plan the segments and read each back typed (a cast error surfaces here, before
        any table of the block is written)."""
        writer = self.writer
        plans = writer.plan(segments, history=self.cfg.keyless == "history")
        for plan in plans:
            try:
                writer.read(plan)
            except Exception as exc:
                error = self._classify(exc, "reading staging file(s) "
                                            f"{', '.join(plan.segment.files)} of "
                                            f"{plan.segment.qualified} (seqnos "
                                            f"{plan.segment.low}..{plan.segment.high})")
                raise error from exc
        return plans

    def _merge(self, plans: list[Plan], position: Position) -> None:
        writer = self.writer
        started = time.monotonic()
        for i, plan in enumerate(plans):
            if i > 0:
                crashpoints.reached("apply-between-tables")
            writer.prepare_table(plan)
            seg = plan.segment
            metadata = self._commit_metadata(seg.qualified, seg.low, seg.high, seg.rows,
                                             position)
            if not writer.merge(plan, self.app_id(), metadata):
                log.info("%s: %s seqnos %d..%d already merged (Delta transaction %s v%d)",
                         self.target, plan.ref, seg.low, seg.high, self.app_id(), seg.high)
        log.debug("%s: %d segment(s) merged in %.2f s", self.target, len(plans),
                  time.monotonic() - started)

    # -- consistency checks -----------------------------------------------------------------

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The Delta table's rows of a checked range, as THL values (``readback.py``)."""
        self._settle()
        writer = self.writer
        ref = writer.resolve(check.schema, check.table)
        try:
            # A check is a block of its own: the cache holds committed schemas (a failed
            # block's rollback cleared it).
            schema = writer.schema(ref)
            if schema is None:
                return
            columns = {name: kind for name, (_, kind) in schema.items()}
            yield from readback.read_range(self.spark, ref, columns, check,
                                           history=self.cfg.keyless == "history"
                                           and not check.key)
        except ConsumerError:
            raise
        except Exception as exc:
            raise self._classify(exc, f"reading {ref} for a check") from exc

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
                      ) -> list[list[ThlValue]]:
        """The child rows of a cascade (``consumers.cascades``) as the Delta table holds
        them at its last commit (the open block's staged rows: the caller has those)."""
        self._settle()
        writer = self.writer
        ref = writer.resolve(schema, table)
        try:
            delta = writer.schema(ref)  # committed schemas: plan() works on a copy
            if delta is None:
                return []
            return list(readback.rows_matching(
                self.spark, ref, {name: kind for name, (_, kind) in delta.items()}, specs,
                columns, values, history=self.cfg.keyless == "history"
                and not any(s.primary_key for s in specs)))
        except ConsumerError:
            raise
        except Exception as exc:
            raise self._classify(exc, f"reading {ref} for a cascade") from exc

    def record_check(self, result: CheckResult) -> None:
        self._settle()
        try:
            self.tracking.record_check(self.group, result)
        except Exception as exc:
            raise self._classify(exc, "recording a consistency check", result.seqno) from exc

    def rollback(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            # A Delta commit cannot be called back: wait for it (nothing else of this
            # applier may run on Spark beside it). If it landed, the block is committed
            # after all; the runtime reads the stored position again either way.
            try:
                pending.finish()
            except ConsumerError as exc:
                log.debug("%s: the rolled-back block's position: %s", self.target, exc)
        self._forget()

    def _forget(self) -> None:
        self._stager = self._new_stager()
        self._written = []
        self._beats = []
        self._truncates = []
        self._changes = []
        self._zeros.rollback()
        if self._writer is not None:
            self._writer.forget()

    def _classify(self, exc: BaseException, doing: str, seqno: int = -1
                  ) -> TransientError | DataError | PositionConflict:
        return classify(exc, self.target, doing, seqno)


@dataclass
class _PendingPosition:
    """A block whose tables are merged and whose position is being written."""

    applier: WarehouseApplier
    written: Future[bool]
    position: Position
    segments: list[Segment]
    zeros: Counter[tuple[str, str]]
    finished: bool = False
    #: The error that kept the block from committing (None: committed).
    outcome: ConsumerError | None = None

    @property
    def rides(self) -> bool:
        return False  # a position is written by a statement of its own

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            try:
                self.applier._finish(self)
            except ConsumerError as exc:
                self.outcome = exc
        if self.outcome is not None:
            raise self.outcome
