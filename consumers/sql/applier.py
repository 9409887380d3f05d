"""The SQL applier: THL events into MariaDB/MySQL, PostgreSQL (tested) and Oracle (compiled).

Row changes become INSERT/UPDATE/DELETE through SQLAlchemy Core; consecutive rows of one
table, action and column layout go to the driver as one executemany. On MySQL-family targets
through PyMySQL and on PostgreSQL through psycopg the same compiled statements are rendered
by the driver (its own client-side escaping: PyMySQL's cursor, psycopg's ClientCursor) and a
block's rows travel as multi-row INSERTs and multi-statement round trips, together with the
lock and the compare-and-set of the block's position, instead of one round trip (or one
server-side execution) per row; every statement's matched-row count is still checked.
Statement events are
replayed on MySQL-family targets only, inside the session OPTIONS they carry. On PostgreSQL
and Oracle (``create_tables``) the row images make and evolve the tables instead
(``consumers.sql.ddl``): on PostgreSQL that DDL runs in the block's transaction, so a crash
or a rollback undoes it with the rows, and the applier forgets what it reflected. The
tracking schema ``tungsten_<service>`` lives on the target, and ``trep_commit_seqno`` is
written in the same transaction as the data it covers (atomicity: transactional).

Where each part lives: ``rows.py`` (row changes into batches, values adapted),
``batches.py`` (batches and round trips), ``tables.py`` (reflected, made and evolved
tables), ``replay.py`` (statement events), ``restructure.py`` (renamed and dropped tables
and renamed columns where statements are not replayed), ``positions.py`` (the tracking
schema), ``readback.py`` (consistency checks).

Overlapped commits (``consumers.applier.Pipelined``, MySQL-family targets through PyMySQL
and PostgreSQL through psycopg): ``commit_begin`` sends the block's last round trip (its
last rows and the compare-and-set of its position; on PostgreSQL the block's text, then the
COPY of its last table's new rows, through libpq's asynchronous calls: ``pgwire.py``) and
returns without reading the answers, so the group reads, decodes and renders the next
block while the server executes it. The answers are read, checked and the transaction
committed (``_PendingCommit.finish``) before anything else goes over the connection: the
next block's first round trip, a reflection, a statement, a check. The next block's own
transaction begins only then. A rollback abandons a pending commit with the block: the
connection is dropped unread, so the server rolls both back.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pymysql.constants import CLIENT
from sqlalchemy import exc as sa_exc

from consumers.applier import (
    Atomicity,
    BlockLimits,
    Capabilities,
    PendingCommit,
    StatementPolicy,
)
from consumers.check import CheckRange, CheckResult
from consumers.errors import ConsumerError, DataError, TransientError
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.provisioning import chunk_of, idempotent_tables
from consumers.registry import ApplierContext
from consumers.sql import abandoned, ddl, readback
from consumers.sql.batches import BatchWriter, InFlight, Queued
from consumers.sql.config import MYSQL_FAMILY, SqlTarget
from consumers.sql.context import TargetContext
from consumers.sql.errors import classify
from consumers.sql.naming import SqlNames
from consumers.sql.positions import SqlChannelStore, SqlTracking
from consumers.sql.replay import StatementReplay
from consumers.sql.restructure import Restructurer
from consumers.sql.rows import BlockChanges, RowWriter
from consumers.sql.tables import TargetTables
from consumers.sql.types import policy_for
from replicator import crashpoints
from replicator.sql_names import is_trigger_statement
from replicator.tracking import PositionMoved
from thl_topics.event import ColumnSpec, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.schema_change import SchemaChange

log = logging.getLogger(__name__)

#: Dialects whose tables the applier can make from the THL (see consumers.sql.types).
_CREATES = ("postgresql", "oracle")
#: Default block limits. Idle commit keeps a block to what is waiting, so the limits only
#: matter under a backlog; there a block of 100 events applies about 1.6x the rows/s of one
#: of 10 at two thirds of the CPU per row (bench-compare, set-based), and one of 200 about
#: 1.08-1.14x the rows/s of one of 100 at 0.90-0.94x the group's CPU per row (MariaDB and
#: PostgreSQL, 10-row events; docs/performance.md). Rows and bytes bound what one block
#: holds in memory when the transactions are large.
_BLOCK = BlockLimits(events=200, rows=10_000, bytes=16 << 20, ms=500, idle=True)
#: A connection kept between blocks is handed back to the pool (which pings it at the next
#: checkout) once it has been idle this long: a target restarted meanwhile costs no error.
_KEEP_IDLE_S = 10.0
#: Events applied between two looks at an unanswered PostgreSQL round trip (``apply``).
_STEP_EVENTS = 8


class SqlApplier:
    """Applies THL events to one SQL database through one connection."""

    def __init__(self, cfg: SqlTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.url = cfg.engine_url()
        self.target = self.url.render_as_string(hide_password=True)
        self.dialect = self.url.get_backend_name()
        self.create_tables = self._create_tables(cfg)
        statements = self._statements(cfg)
        self.capabilities = Capabilities(
            atomicity=Atomicity.TRANSACTIONAL, statements=StatementPolicy(statements),
            keyless_tables=True, block=_BLOCK, checks=True, channels=True)
        # The parts of the applier, each on the open block's connection (``_db``).
        target = TargetContext(self.dialect, self.target, lambda: self._db, self._classify,
                               self._local)
        self._positions = SqlTracking(target, ctx.tracking_schema, ctx.channel,
                                      cfg.audit_seqnos)
        self._tables = TargetTables(target, self.create_tables, statements == "apply",
                                    self._run_ddl,
                                    SqlNames(self.url.get_dialect()(), cfg.names),
                                    ctx.metrics, ctx.schema_changes)
        self._batches = BatchWriter(target, self.url.get_driver_name(), cfg.batch_rows,
                                    self._positions, self.rollback)
        self._batches.set_based = cfg.apply == "set-based"
        self._rows = RowWriter(target, policy_for(self.dialect, cfg.zero_dates,
                                                  cfg.nul_characters),
                               ctx.metrics, self._tables, self._batches)
        self._replay = StatementReplay(target)
        self._restructure = Restructurer(target, self._tables, self._run_ddl, self._classify)
        self._engine: sa.Engine | None = None
        self._conn: sa.Connection | None = None
        #: Server sessions dropped with a round trip's answers unread (``abandoned``).
        self._abandoned: set[int] = set()
        self._txn: sa.RootTransaction | None = None
        #: When the connection kept between blocks was last used (monotonic seconds).
        self._released = 0.0
        #: Seqnos of the open block (for the audit table).
        self._seqnos: list[int] = []
        #: The open block created or altered a table (undone by a rollback on PostgreSQL).
        self._ddl_in_block = False
        #: The last block's commit, sent and not yet answered (``commit_begin``).
        self._pending: _PendingCommit | None = None
        #: Events applied since the pending commit's round trip was last moved on.
        self._unstepped = 0
        #: The open block's transaction begins once the pending commit is finished.
        self._begin_due = False
        #: A pending commit's answers are being read (on its own transaction).
        self._finishing = False

    def _create_tables(self, cfg: SqlTarget) -> bool:
        """Whether this target makes its tables from the row images (ValueError where it
        cannot)."""
        create_tables = self.dialect in _CREATES if cfg.create_tables is None \
            else cfg.create_tables
        if create_tables and self.dialect not in _CREATES:
            raise ValueError(f"create_tables works on PostgreSQL and Oracle targets, not "
                             f"{self.dialect} ({self.target})"
                             + ("; MySQL-family targets get their tables from the replayed "
                                "DDL" if self.dialect in MYSQL_FAMILY else ""))
        return create_tables

    def _statements(self, cfg: SqlTarget) -> str:
        """What this target does with statement events (ValueError where it cannot)."""
        # A target that makes its tables from the row images has no use for the source's
        # DDL; one that does not must be told what to do with it.
        statements = cfg.statements or ("apply" if self.dialect in MYSQL_FAMILY else
                                        "skip" if self.create_tables else "error")
        if statements == "apply" and self.dialect not in MYSQL_FAMILY:
            raise ValueError(f"statements: apply works on MySQL/MariaDB targets only, not "
                             f"{self.dialect} ({self.target}); use skip or error")
        return statements

    @property
    def _db(self) -> sa.Connection:
        """The open block's connection, ready for a round trip: a pending commit on it is
        finished first (its error, if any, raised here)."""
        if self._pending is not None or self._begin_due:
            self._settle()
        if self._conn is None or self._txn is None:
            raise RuntimeError("no open block: begin() first")
        return self._conn

    def _local(self) -> sa.Connection:
        """The connection for rendering only (a pending commit may be on the wire)."""
        if self._conn is None:
            raise RuntimeError("no open block: begin() first")
        return self._conn

    @property
    def _eng(self) -> sa.Engine:
        if self._engine is None:
            raise RuntimeError("not connected: connect() first")
        return self._engine

    def _classify(self, exc: sa_exc.DBAPIError, doing: str, seqno: int = -1
                  ) -> TransientError | DataError:
        return classify(exc, self.target, doing, postgres=self.dialect == "postgresql",
                        seqno=seqno)

    # -- connection -------------------------------------------------------------------------

    def connect(self) -> None:
        # The target may have changed while this group was away (tables dropped, altered).
        self._forget_tables()
        if self._engine is None:
            self._engine = sa.create_engine(self.url, pool_pre_ping=True, pool_size=1,
                                            hide_parameters=True, **self._connect_args())
        self._positions.create(self._eng)
        if self._batches.multi and self.dialect in MYSQL_FAMILY:
            self._fit_round_trips()
        self._replay.replaying = True

    def _fit_round_trips(self) -> None:
        """Round trips the server takes: its max_allowed_packet, read at every connect (an
        operator may have changed it)."""
        try:
            with self._eng.connect() as conn:
                packet = conn.exec_driver_sql("SELECT @@max_allowed_packet").scalar_one()
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading max_allowed_packet") from exc
        self._batches.fit_round_trips(int(packet))

    def _connect_args(self) -> dict[str, Any]:
        if self.dialect in MYSQL_FAMILY:
            args: dict[str, Any] = {"charset": "utf8mb4", "connect_timeout": 10,
                                    "init_command": "SET time_zone = '+00:00'"}
            if self._batches.multi:
                # FOUND_ROWS as SQLAlchemy sets it (rowcount = rows matched), plus several
                # statements per round trip for the queued row changes.
                args["client_flag"] = CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS
            return {"connect_args": args}
        if self.dialect == "postgresql":
            return {"connect_args": {"connect_timeout": 10, "options": "-c timezone=UTC"}}
        return {}

    def position(self) -> Position | None:
        self._wait_abandoned()
        return self._positions.read(self._eng)

    def _wait_abandoned(self) -> None:
        """The sessions dropped with answers unread have ended: the stored position is
        final (``abandoned``)."""
        while self._abandoned:
            session = next(iter(self._abandoned))
            try:
                abandoned.wait_gone(self._eng, self.dialect, session, self.target)
            except sa_exc.DBAPIError as exc:
                raise self._classify(exc, f"waiting for dropped session {session}") from exc
            log.debug("%s: dropped session %d has ended", self.target, session)
            self._abandoned.discard(session)

    def reset(self) -> None:
        """Forget the group's position: every channel's row of trep_commit_seqno."""
        self._positions.clear(self._eng)

    def close(self) -> None:
        self.rollback()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self._seqnos = []
        self._rows.new_block()
        if self._pending is not None:
            # The connection still carries the last block's commit: this block's
            # transaction begins when that is finished (``_db``); its lock is only queued.
            self._begin_due = True
            self._queue_lock()
            return
        if self._conn is not None and time.monotonic() - self._released > _KEEP_IDLE_S:
            self._end()
        self._open()

    def _queue_lock(self) -> None:
        """The position's lock, first in the block's first round trip."""
        self._batches.enqueue(Queued(self._positions.sql(
            "lock", {"w_task_id": self._positions.task_id}), 0, None, None, kind="lock"))

    def _open(self, deferred: bool = False) -> None:
        """Begin the block's transaction and queue, or take, the position's lock
        (``deferred``: queued already, by ``begin``)."""
        try:
            # One connection from block to block while they follow each other: a pool
            # checkout per block cost a ping and a ROLLBACK round trip each.
            if self._conn is None:
                self._conn = self._eng.connect()
            self._txn = self._conn.begin()
            if self.dialect in MYSQL_FAMILY:
                self._replay.read_defaults()
            # Lock the position row for the block: a second writer of this position waits
            # here, then finds the position moved, before it applies anything. Queued, the
            # lock leads the block's first round trip and is checked before anything else.
            if self._batches.multi:
                if not deferred:
                    self._queue_lock()
                return
            stored = self._positions.lock()
        except sa_exc.DBAPIError as exc:
            self.rollback()
            raise self._classify(exc, "opening a transaction") from exc
        if stored != self._positions.expected:
            self.rollback()
            raise self._positions.conflict(PositionMoved(self._positions.expected, stored))

    def apply(self, event: ThlEvent) -> None:
        pending = self._pending
        if pending is not None and pending.sent.stepping:
            # PostgreSQL: the last block's COPY starts once its text is answered. A look
            # costs a system call (libpq reads the socket): one every few events is soon
            # enough, against one an event (2-3 us each, 5% of a group's CPU).
            self._unstepped += 1
            if self._unstepped >= _STEP_EVENTS:
                self._unstepped = 0
                pending.sent.step()
        chunk = chunk_of(event)
        loose = idempotent_tables(event)
        self._batches.seqno = event.seqno
        for item in event.data:
            if isinstance(item, RowChange):
                if chunk is not None and chunk.first and event.fragno == 0 and \
                        (item.schema, item.table) == (chunk.schema, chunk.table):
                    self._rows.empty(item, event)
                self._rows.add(item, event, idempotent=(item.schema, item.table) in loose)
            else:
                self._statement(item, event)
        if event.last_frag:
            self._seqnos.append(event.seqno)

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        """Every row of the table goes, in the block's transaction (a DELETE: PostgreSQL's
        and Oracle's TRUNCATE would not wait for the block's commit on Oracle, and takes
        a lock that readers of the table would queue behind)."""
        self._batches.flush()
        target = self._tables.lookup(schema, table, [])
        if target is None:
            return  # never made here: nothing to empty
        try:
            done = self._db.execute(sa.delete(target.table))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"emptying {target.qualified} (TRUNCATE at the source)",
                                 event.seqno) from exc
        log.info("%s: %s emptied at seqno %d (TRUNCATE at the source): %d row(s)",
                 self.target, target.qualified, event.seqno, done.rowcount)

    # -- renamed and dropped tables and columns (targets that do not replay DDL) -----------

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The table follows the source's rename with its rows (``consumers.sql.restructure``;
        on PostgreSQL in the block's transaction)."""
        self._batches.flush()
        self._restructure.rename_table(change, event.seqno)

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        """Renamed (evolve, or a key column), or added beside the kept old one and filled
        from it (lenient)."""
        self._batches.flush()
        self._restructure.rename_column(change, keep_old, event.seqno)

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        """The table goes with its rows (evolve)."""
        self._batches.flush()
        self._restructure.drop_table(change, event.seqno)

    def heartbeat(self, beat: Heartbeat) -> None:
        """Upsert the heartbeat row with this target's arrival time and lag."""
        self._batches.flush()
        self._positions.heartbeat(beat)

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The rows of a checked key range, as THL values (consumers.check)."""
        self._batches.flush()
        target = self._tables.lookup(check.schema, check.table, check.specs)
        if target is None:
            return  # no table: no rows (the source's count says whether that is right)
        query = readback.range_query(target, check, self.dialect, self.target)
        try:
            rows = self._db.execute(query).all()
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"reading {target.qualified} for a check") from exc
        yield from readback.thl_rows(check, rows)

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
                      ) -> list[list[ThlValue]]:
        """The child rows of a cascade (``consumers.cascades``), read in the open
        transaction: ``WHERE (fk) IN (...)``."""
        target = self._tables.lookup(schema, table, specs)
        if target is None:
            return []
        rows: list[list[ThlValue]] = []
        try:
            for query in readback.matching_queries(target, specs, columns, values,
                                                   self.dialect):
                rows.extend(readback.rows_of(specs, self._db.execute(query).all()))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"reading {target.qualified} for a cascade") from exc
        return rows

    def record_check(self, result: CheckResult) -> None:
        """Upsert the range's row of Tungsten's ``consistency`` table."""
        self._batches.flush()
        self._positions.record_check(result)

    def commit(self, position: Position) -> None:
        pending = self.commit_begin(position)
        if pending is not None:
            pending.finish()

    def commit_begin(self, position: Position) -> PendingCommit | None:
        """Send the block's last round trip with its position; its answers and the COMMIT
        wait for ``finish`` (or for whatever next needs the connection). On PostgreSQL the
        last round trip is the block's text (the position first in it) and the COPY of its
        last table's new rows after it, moved on by ``apply`` as the server answers. Where
        the position is not sent with the rows (the first one, the ordered drivers), the
        block commits at once."""
        expected = self._positions.expected
        if not (self._batches.multi and expected is not None):
            self._commit_now(position)
            return None
        mysql = self.dialect in MYSQL_FAMILY
        riding: _PendingCommit | None = None
        try:
            now = dt.datetime.now(dt.UTC)
            row = self._positions.commit_row(position, now)
            advance = self._positions.sql("advance", self._positions.tracking.advance_params(
                row, expected))
            self._batches.close_batch()
            if mysql:
                self._batches.emit_collapsed()
            if self._positions.audit is not None and self._seqnos:
                self._batches.flush()
                self._positions.record_seqnos(self._seqnos, now)
            crashpoints.reached("apply-before-position")
            self._batches.enqueue(Queued(advance, 1, None, None, kind="position"))
            # PostgreSQL: a COPY ends a round trip; the block's last one follows its text.
            last = None if mysql else self._batches.emit_collapsed(open_end=True)
            # The block still pending: its answers are read here, and its COMMIT leads
            # this block's round trip (``_ride``).
            riding = self._ride()
            sent = self._batches.transmit(last, lead_commit=riding is not None)
        except sa_exc.DBAPIError as exc:
            self._abandon(riding)
            self.rollback()
            raise self._classify(exc, f"committing up to seqno {position.seqno}",
                                 seqno=position.seqno) from exc
        except BaseException:
            self._abandon(riding)
            self.rollback()
            raise
        if sent is None or self._txn is None:
            raise RuntimeError("a block's commit sent nothing")
        self._pending = _PendingCommit(self, sent, self._txn, position,
                                       self._rows.take_changes(), replayed=bool(self._seqnos),
                                       carries=riding)
        if riding is not None:
            riding.carrier = self._pending
        self._positions.expected = position.seqno
        return self._pending

    def _ride(self) -> _PendingCommit | None:
        """The pending block, its answers read and checked, if its COMMIT can lead the
        open block's round trip (None: nothing pending, or it was finished here).

        The COMMIT's own answer is then the first of that round trip: the group does not
        wait for the server's commit between blocks. The open block goes on in the same
        client transaction (the server's next one begins with its first statement); a
        failure of the COMMIT stops the server before the block's statements."""
        riding = self._pending
        if riding is None or self._ddl_in_block:
            self._settle()
            return None
        self._finish(riding, ride=True)  # raises its error, the open block rolled back
        self._begin_due = False
        return riding

    def _abandon(self, riding: _PendingCommit | None) -> None:
        """``riding``'s COMMIT may or may not have reached the server with a round trip that
        failed to go out."""
        if riding is not None and riding.outcome is None and riding.carrier is None:
            riding.outcome = self._unknown(riding)

    def _unknown(self, riding: _PendingCommit) -> TransientError:
        seqno = riding.position.seqno
        return TransientError(
            f"{self.target}: the COMMIT of the block up to seqno {seqno} went ahead of the "
            "next block, whose answers were lost; the position stored on the target tells "
            "whether it was committed", seqno=seqno, event_id=riding.position.event_id)

    def _commit_now(self, position: Position) -> None:
        """The block's rows, then its position by a statement of its own (the first
        position, which no compare-and-set guards, or the ordered drivers), then COMMIT."""
        txn = self._open_txn()
        now = dt.datetime.now(dt.UTC)
        row = self._positions.commit_row(position, now)
        expected = self._positions.expected
        committed = False
        try:
            self._batches.flush()
            if self._positions.audit is not None and self._seqnos:
                self._positions.record_seqnos(self._seqnos, now)
            crashpoints.reached("apply-before-position")
            self._positions.advance(row, expected)
            txn.commit()
            committed = True
            self._ddl_in_block = False
            self._rows.count_changes(position.seqno, self._rows.take_changes())
        except PositionMoved as exc:
            self.rollback()
            raise self._positions.conflict(exc, seqno=position.seqno) from exc
        except sa_exc.DBAPIError as exc:
            self.rollback()
            raise self._classify(exc, f"committing up to seqno {position.seqno}",
                                 seqno=position.seqno) from exc
        finally:
            self._end(keep=committed)
        self._positions.expected = position.seqno
        # A block that only moved a channel's position (parallel apply) replayed nothing.
        self._replay.replaying = self._replay.replaying and not self._seqnos

    def _settle(self) -> None:
        """Finish the pending commit (its error raised here), then begin the open block's
        transaction if it waited for it."""
        if self._pending is not None:
            self._pending.finish()
        if self._begin_due and not self._finishing:
            self._begin_due = False
            self._open(deferred=True)

    def _finish(self, pending: _PendingCommit, ride: bool = False) -> None:
        """Read the answers of ``pending``'s round trip (first the COMMIT of the block it
        carries, if any), check them, COMMIT; ``ride``: the COMMIT is left to lead the
        open block's round trip (raises the block's error if its answers fail)."""
        self._pending = None
        pending.finished = True
        position = pending.position
        self._finishing = True
        try:
            self._batches.answers(pending.sent)
            if not ride:
                pending.txn.commit()
        except sa_exc.DBAPIError as exc:
            pending.outcome = self._classify(exc, f"committing up to seqno {position.seqno}",
                                             seqno=position.seqno)
        except ConsumerError as exc:
            pending.outcome = exc
        except BaseException:
            self.rollback()
            raise
        finally:
            self._finishing = False
        if pending.carries is not None:
            self._carried(pending.carries, pending)
        if pending.outcome is not None:
            if pending.outcome.seqno < 0:
                pending.outcome.seqno = position.seqno
                pending.outcome.event_id = position.event_id
            # This block and the open one (which sent nothing yet) go together.
            self.rollback()
            if ride:
                raise pending.outcome
            return
        if ride:
            return  # committed by the next round trip's first statement
        self._committed(pending)
        self._end(keep=True)

    def _carried(self, carried: _PendingCommit, carrier: _PendingCommit) -> None:
        """``carrier``'s answers were read as far as they go: ``carried``'s COMMIT, first
        among them, is answered (or the round trip failed before it)."""
        carried.carrier = None
        if carrier.sent.lead_answered:
            self._committed(carried)
            return
        carried.outcome = carrier.outcome or self._unknown(carried)
        if carried.outcome.seqno < 0:
            carried.outcome.seqno = carried.position.seqno
            carried.outcome.event_id = carried.position.event_id
        carrier.outcome = TransientError(
            f"{self.target}: the block up to seqno {carrier.position.seqno} was abandoned "
            f"with the COMMIT of the block before it", seqno=carrier.position.seqno,
            event_id=carrier.position.event_id)

    def _committed(self, pending: _PendingCommit) -> None:
        self._ddl_in_block = False
        self._rows.count_changes(pending.position.seqno, pending.changes)
        # A block that only moved a channel's position (parallel apply) replayed nothing.
        self._replay.replaying = self._replay.replaying and not pending.replayed

    def channel_store(self) -> SqlChannelStore:
        """Every channel's position and the shard assignments (consumers.runtime.shards)."""
        return self._positions.channel_store(self._eng)

    def _open_txn(self) -> sa.RootTransaction:
        self._settle()
        if self._txn is None:
            raise RuntimeError("no open block: begin() first")
        return self._txn

    def rollback(self) -> None:
        pending, self._pending = self._pending, None
        self._begin_due = False
        if pending is not None:
            pending.outcome = TransientError(
                f"{self.target}: the commit of the block up to seqno {pending.position.seqno} "
                "was abandoned with the block after it", seqno=pending.position.seqno)
            if pending.carries is not None and pending.carries.carrier is pending:
                pending.carries.carrier = None
                pending.carries.outcome = self._unknown(pending.carries)
            if self._conn is not None:
                # Its answers are unread: the connection cannot serve again. Dropped, the
                # server rolls the block back, once it has worked through what was sent
                # (``abandoned``: the position is read after that).
                dropped = abandoned.session_id(self._conn, self.dialect)
                if dropped is not None:
                    self._abandoned.add(dropped)
                try:
                    self._conn.invalidate()
                except sa_exc.SQLAlchemyError as exc:
                    log.debug("invalidate: %s", exc)
        self._batches.drop()
        self._rows.drop_changes()
        try:
            if self._txn is not None and self._txn.is_active:
                self._txn.rollback()
        except sa_exc.SQLAlchemyError as exc:
            log.debug("rollback: %s", exc)
        if self._ddl_in_block:
            # The rollback undid this block's CREATE/ALTER: what was reflected after them
            # describes tables that no longer are.
            self._forget_tables()
        self._end()

    def _forget_tables(self) -> None:
        self._tables.clear()
        self._forget_statements()
        self._batches.drop()
        self._ddl_in_block = False

    def _forget_statements(self) -> None:
        """Compiled statements, their texts and the value adapters go with the tables they
        were made for."""
        self._batches.forget()
        self._rows.forget()

    def _end(self, keep: bool = False) -> None:
        """The block is over; ``keep``: it committed, its connection serves the next one."""
        self._txn = None
        if keep:
            self._released = time.monotonic()
            return
        if self._conn is not None:
            try:
                self._conn.close()
            except sa_exc.SQLAlchemyError as exc:
                log.debug("close: %s", exc)
        self._conn = None

    # -- statements and DDL -----------------------------------------------------------------

    def _statement(self, stmt: Statement, event: ThlEvent) -> None:
        if self.cfg.triggers == "skip" and is_trigger_statement(stmt.sql):
            # The row images carry what the source's trigger did; a copy on the target would
            # do it again (duplicate keys, or rows changed twice).
            log.info("%s: seqno %d: trigger statement left out (triggers: skip): %.120s",
                     self.target, event.seqno, " ".join(stmt.sql.split()))
            return
        self._batches.flush()
        self._tables.clear()
        self._forget_statements()
        self._replay.replay(stmt, event)

    def _run_ddl(self, statements: Sequence[ddl.Ddl], where: str, seqno: int) -> None:
        """DDL in the block's transaction (PostgreSQL: transactional DDL, undone with the
        block by a crash or a rollback); elsewhere on its own connection, committed."""
        self._settle()  # the DDL comes after every earlier block
        # Rows of the block before this seqno go first, in source order.
        self._batches.flush()
        self._forget_statements()
        self._ddl_in_block = True
        try:
            if self.dialect == "postgresql":
                for stmt in statements:
                    self._execute_ddl(self._db, stmt)
            else:
                # Oracle commits DDL by itself: keep it out of the block's transaction.
                with self._eng.connect().execution_options(
                        isolation_level="AUTOCOMMIT") as conn:
                    for stmt in statements:
                        self._execute_ddl(conn, stmt)
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"creating or altering {where} for seqno {seqno}",
                                 seqno=seqno) from exc

    @staticmethod
    def _execute_ddl(conn: sa.Connection, stmt: ddl.Ddl) -> None:
        if isinstance(stmt, str):
            conn.exec_driver_sql(stmt)
        else:
            conn.execute(stmt)


@dataclass
class _PendingCommit:
    """A block's last round trip sent with its position, not yet answered."""

    applier: SqlApplier
    sent: InFlight
    txn: sa.RootTransaction
    position: Position
    #: The block's counts, reported once it is committed.
    changes: BlockChanges
    #: The block applied seqnos (not only a channel's position).
    replayed: bool
    #: The block before, whose COMMIT leads this one's round trip (``SqlApplier._ride``).
    carries: _PendingCommit | None = None
    #: The block after, whose round trip carries this one's COMMIT, until it is answered.
    carrier: _PendingCommit | None = None
    finished: bool = False
    #: The error that kept the block from committing (None: committed).
    outcome: ConsumerError | None = None

    @property
    def rides(self) -> bool:
        return self.carrier is not None

    def _answer(self) -> None:
        """Read this block's answers (once; not where it failed already)."""
        if not self.finished:
            self.finished = True
            if self.outcome is None:
                self.applier._finish(self)

    def finish(self) -> None:
        self._answer()
        if self.carrier is not None:
            # This block's outcome is the first answer of the next one's round trip.
            self.carrier._answer()
        if self.carrier is not None:
            raise RuntimeError(f"the COMMIT of the block up to seqno {self.position.seqno} "
                               "was never answered")
        if self.outcome is not None:
            raise self.outcome
