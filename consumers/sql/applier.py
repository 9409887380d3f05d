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
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
import sqlalchemy as sa
from pymysql.constants import CLIENT
from pymysql.cursors import RE_INSERT_VALUES
from sqlalchemy import exc as sa_exc

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.check import CheckRange, CheckResult
from consumers.errors import DataError, PositionConflict, TransientError
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.provisioning import chunk_of, idempotent_tables
from consumers.registry import ApplierContext
from consumers.sql import ddl
from consumers.sql.channels import SqlChannelStore
from consumers.sql.config import MYSQL_FAMILY, SqlTarget
from consumers.sql.errors import (
    DDL_ALREADY_DONE,
    UNKNOWN_DATABASE,
    classify,
    mysql_code,
)
from consumers.sql.render import Template, mysql_literal, postgresql_literal
from consumers.sql.statements import RowStatements, TargetTable, bind_rows, statement_for
from consumers.sql.types import (
    RowAdapter,
    UnmappedType,
    ValueRefused,
    adapt,
    policy_for,
    row_adapter,
)
from replicator import crashpoints
from replicator.sql_names import is_database_statement, is_transactional
from replicator.tracking import (
    CommitSeqno,
    CommitSeqnoTable,
    PositionMoved,
    audit_table,
    tracking_metadata,
)
from thl_topics.checksum import thl_value_of
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.values import from_thl

log = logging.getLogger(__name__)

_HEARTBEAT = "heartbeat"
#: Source SQL goes to the driver as is: no parameters, so no %-formatting of its text.
_RAW = {"no_parameters": True}
_SESSION_VARIABLES = ("sql_mode", "foreign_key_checks", "unique_checks",
                      "character_set_client", "collation_connection")
#: Dialects whose tables the applier can make from the THL (see consumers.sql.types).
_CREATES = ("postgresql", "oracle")
#: A value policy's warning for one table column is logged at most this often.
_WARN_EVERY_S = 60.0
#: Characters of SQL text sent in one multi-statement round trip (queued path), at least
#: one statement: far below any max_allowed_packet (MariaDB's default is 16 MiB).
_ROUND_TRIP_BYTES = 1 << 20
#: A connection kept between blocks is handed back to the pool (which pings it at the next
#: checkout) once it has been idle this long: a target restarted meanwhile costs no error.
_KEEP_IDLE_S = 10.0
#: (dialect, driver) pairs whose cursors render statements on the client and return the
#: results of several statements sent at once.
_MULTI_DRIVERS = {("mysql", "pymysql"), ("mariadb", "pymysql"), ("postgresql", "psycopg")}


@dataclass
class _Queued:
    """One rendered statement waiting for the block's next round trip (MySQL family)."""

    sql: str
    #: Rows it must match (0: not checked).
    rows: int
    action: RowAction | None
    target: TargetTable | None
    #: ``rows`` (a row change), ``lock`` (reads the stored position, locked) or
    #: ``position`` (moves it: must match its one row).
    kind: str = "rows"

    def doing(self, preposition: str = "into") -> str:
        """What the statement does, for errors."""
        if self.action is not None and self.target is not None:
            return f"{self.action.value} {preposition} {self.target.qualified}"
        return ("locking" if self.kind == "lock" else "advancing") + " trep_commit_seqno"


@dataclass
class _Batch:
    """Consecutive rows of one table, action and column layout, not yet sent."""

    target: TargetTable
    action: RowAction
    columns: list[ColumnSpec]
    keys: list[ColumnSpec]
    params: list[dict[str, object]]

    def layout(self) -> tuple[object, ...]:
        # The name too: a TargetTable reflected after a DDL may reuse a dropped one's id().
        return (self.target.qualified, id(self.target), self.action, _names(self.columns),
                _names(self.keys))


@dataclass(frozen=True)
class _Rendering:
    """How the rows of one batch layout become SQL text (queued path)."""

    #: One row's text: its whole statement, or (INSERT) its tuple of VALUES.
    row: Template
    #: An INSERT's text before and after its rows' tuples (one statement of many rows, as
    #: executemany sends it); None: one statement per row.
    around: tuple[str, str] | None


def _names(specs: list[ColumnSpec]) -> tuple[tuple[str, bool], ...]:
    return tuple((c.name, c.primary_key) for c in specs)


class SqlApplier:
    """Applies THL events to one SQL database through one connection."""

    def __init__(self, cfg: SqlTarget, ctx: ApplierContext) -> None:
        self.cfg = cfg
        self.url = cfg.engine_url()
        self.target = self.url.render_as_string(hide_password=True)
        self.dialect = self.url.get_backend_name()
        self.tracking_schema = ctx.tracking_schema
        self.tracking = CommitSeqnoTable(self.tracking_schema)
        #: This applier's row of trep_commit_seqno: its channel (0 without parallel apply).
        self.task_id = ctx.channel
        tracking = tracking_metadata(self.tracking_schema)
        self.heartbeat_table = tracking.tables[f"{self.tracking_schema}.{_HEARTBEAT}"]
        self.consistency_table = tracking.tables[f"{self.tracking_schema}.consistency"]
        self.audit = audit_table(self.tracking_schema) if cfg.audit_seqnos else None
        self.create_tables = self.dialect in _CREATES if cfg.create_tables is None \
            else cfg.create_tables
        if self.create_tables and self.dialect not in _CREATES:
            raise ValueError(f"create_tables works on PostgreSQL and Oracle targets, not "
                             f"{self.dialect} ({self.target})"
                             + ("; MySQL-family targets get their tables from the replayed "
                                "DDL" if self.dialect in MYSQL_FAMILY else ""))
        # A target that makes its tables from the row images has no use for the source's
        # DDL; one that does not must be told what to do with it.
        statements = cfg.statements or ("apply" if self.dialect in MYSQL_FAMILY else
                                        "skip" if self.create_tables else "error")
        if statements == "apply" and self.dialect not in MYSQL_FAMILY:
            raise ValueError(f"statements: apply works on MySQL/MariaDB targets only, not "
                             f"{self.dialect} ({self.target}); use skip or error")
        self.policy = policy_for(self.dialect, cfg.zero_dates, cfg.nul_characters)
        self.metrics = ctx.metrics
        if self.policy is not None:
            # Zero-valued series from the start, so a dashboard sees them before any change.
            self.metrics.values_changed("zero_date", 0)
            if self.policy.checks_nul:
                self.metrics.values_changed("nul_character", 0)
        self.capabilities = Capabilities(
            atomicity=Atomicity.TRANSACTIONAL, statements=StatementPolicy(statements),
            keyless_tables=True, block=BlockLimits(events=10, ms=500, idle=True), checks=True,
            channels=True)
        self.builder = RowStatements(self.dialect)
        self._engine: sa.Engine | None = None
        self._conn: sa.Connection | None = None
        self._txn: sa.RootTransaction | None = None
        self._tables: dict[tuple[str, str], TargetTable] = {}
        self._stmts: dict[tuple[object, ...], Any] = {}
        self._batch: _Batch | None = None
        #: PyMySQL on a MySQL-family target, psycopg on PostgreSQL: statements are rendered
        #: by the driver (client-side binding) and sent together.
        self._multi = (self.dialect, self.url.get_driver_name()) in _MULTI_DRIVERS
        self._queued: list[_Queued] = []
        self._queued_bytes = 0
        #: Each compiled layout's text, cut at its parameters (see ``_rendering``).
        self._texts: dict[tuple[object, ...], _Rendering] = {}
        self._adapters: dict[tuple[object, ...], RowAdapter] = {}
        self._session_defaults: dict[str, Any] = {}
        #: SQL text of the tracking statements sent with the rows (queued path).
        self._tracking_texts: dict[str, str] = {}
        #: When the connection kept between blocks was last used (monotonic seconds).
        self._released = 0.0
        #: Seqnos of the open block (for the audit table).
        self._seqnos: list[int] = []
        #: The first seqno after a (re)connect may replay a DDL that already ran.
        self._replaying = False
        #: The open block created or altered a table (undone by a rollback on PostgreSQL).
        self._ddl_in_block = False
        #: Values the policy changed in the open block, by (kind, table, column).
        self._changed: Counter[tuple[str, str, str]] = Counter()
        self._warned: dict[tuple[str, str, str], float] = {}
        #: The seqno stored on the target as this applier last read (position), cleared
        #: (reset) or wrote (commit) it; a block commits only if the target still holds it,
        #: so there is one writer per position. The runtime reads it before any block.
        self._expected: int | None = None

    @property
    def _db(self) -> sa.Connection:
        if self._conn is None or self._txn is None:
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
        try:
            with self._eng.begin() as conn:
                self.tracking.create(conn)
                if self.audit is not None:
                    self.audit.create(conn, checkfirst=True)
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "creating the tracking schema") from exc
        self._replaying = True

    def _connect_args(self) -> dict[str, Any]:
        if self.dialect in MYSQL_FAMILY:
            args: dict[str, Any] = {"charset": "utf8mb4", "connect_timeout": 10,
                                    "init_command": "SET time_zone = '+00:00'"}
            if self._multi:
                # FOUND_ROWS as SQLAlchemy sets it (rowcount = rows matched), plus several
                # statements per round trip for the queued row changes.
                args["client_flag"] = CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS
            return {"connect_args": args}
        if self.dialect == "postgresql":
            return {"connect_args": {"connect_timeout": 10, "options": "-c timezone=UTC"}}
        return {}

    def position(self) -> Position | None:
        try:
            with self._eng.connect() as conn:
                row = self.tracking.read(conn, self.task_id)
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading trep_commit_seqno") from exc
        self._expected = row.seqno if row else None
        if row is None:
            return None
        return Position(seqno=row.seqno, epoch=row.epoch, event_id=row.eventid,
                        source_id=row.source_id, fragno=row.fragno, last_frag=row.last_frag,
                        shard_id=row.shard_id)

    def reset(self) -> None:
        """Forget the group's position: every channel's row of trep_commit_seqno."""
        try:
            with self._eng.begin() as conn:
                conn.execute(sa.delete(self.tracking.table))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "clearing trep_commit_seqno") from exc
        self._expected = None

    def close(self) -> None:
        self.rollback()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # -- blocks -----------------------------------------------------------------------------

    def begin(self) -> None:
        self._seqnos = []
        self._changed.clear()
        if self._conn is not None and time.monotonic() - self._released > _KEEP_IDLE_S:
            self._end()
        try:
            # One connection from block to block while they follow each other: a pool
            # checkout per block cost a ping and a ROLLBACK round trip each.
            if self._conn is None:
                self._conn = self._eng.connect()
            self._txn = self._conn.begin()
            if not self._session_defaults and self.dialect in MYSQL_FAMILY:
                row = self._db.execute(sa.text(
                    "SELECT " + ", ".join(f"@@session.{v}" for v in _SESSION_VARIABLES))).one()
                self._session_defaults = dict(zip(_SESSION_VARIABLES, row, strict=True))
            # Lock the position row for the block: a second writer of this position waits
            # here, then finds the position moved, before it applies anything. Queued, the
            # lock leads the block's first round trip and is checked before anything else.
            if self._multi:
                self._enqueue(_Queued(self._tracking_sql(
                    "lock", {"w_task_id": self.task_id}), 0, None, None, kind="lock"))
                return
            stored = self.tracking.lock(self._db, self.task_id)
        except sa_exc.DBAPIError as exc:
            self.rollback()
            raise self._classify(exc, "opening a transaction") from exc
        if stored != self._expected:
            self.rollback()
            raise self._conflict(PositionMoved(self._expected, stored))

    def _tracking_sql(self, which: str, params: dict[str, object]) -> str:
        """A tracking statement rendered with the driver's escaping (compiled once)."""
        text = self._tracking_texts.get(which)
        if text is None:
            stmt = (self.tracking.lock_statement() if which == "lock"
                    else self.tracking.advance_statement())
            text = self._tracking_texts[which] = stmt.compile(dialect=self._db.dialect).string
        cursor = self._cursor()
        try:
            return str(cursor.mogrify(text, params))
        finally:
            cursor.close()

    def apply(self, event: ThlEvent) -> None:
        chunk = chunk_of(event)
        loose = idempotent_tables(event)
        for item in event.data:
            if isinstance(item, RowChange):
                if chunk is not None and chunk.first and event.fragno == 0 and \
                        (item.schema, item.table) == (chunk.schema, chunk.table):
                    self._empty(item, event)
                self._rows(item, event, idempotent=(item.schema, item.table) in loose)
            else:
                self._statement(item, event)
        if event.last_frag:
            self._seqnos.append(event.seqno)

    def heartbeat(self, beat: Heartbeat) -> None:
        """Upsert the heartbeat row with this target's arrival time and lag."""
        self._flush()
        t = self.heartbeat_table
        naive = (beat.source_tstamp.astimezone(dt.UTC).replace(tzinfo=None)
                 if beat.source_tstamp else None)
        values = {"id": beat.id, "seqno": beat.seqno, "eventid": beat.event_id,
                  "source_tstamp": naive,
                  "target_tstamp": beat.target_tstamp.astimezone(dt.UTC).replace(tzinfo=None),
                  "lag_millis": beat.lag_millis, "salt": beat.salt, "name": beat.name}
        try:
            done = self._db.execute(sa.update(t).where(t.c.id == beat.id).values(values))
            if done.rowcount == 0:
                self._db.execute(sa.insert(t).values(values))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "recording a heartbeat") from exc

    def read_range(self, check: CheckRange) -> Iterator[list[ThlValue]]:
        """The rows of a checked key range, as THL values (consumers.check)."""
        self._flush()
        target = self._reflect(check.schema, check.table)
        if target is None:
            return  # no table: no rows (the source's count says whether that is right)
        t = target.table
        columns = [t.c[c.name] for c in check.specs if c.name in target.types]
        if len(columns) != len(check.specs):
            missing = [c.name for c in check.specs if c.name not in target.types]
            raise DataError(f"{target.qualified} on {self.target} has no column(s) "
                            f"{', '.join(missing)} to check")
        query = sa.select(*columns)
        if check.key:
            keys = [t.c[k] for k in check.key]
            typed = {k: adapt(from_thl(check.spec(k), v), target.types[k], self.dialect,
                              check.spec(k)) for k, v in zip(check.key, check.lo or [],
                                                             strict=False)}
            if check.lo is not None:
                query = query.where(sa.tuple_(*keys) > sa.tuple_(
                    *(sa.literal(typed[k]) for k in check.key)))
            if check.hi is not None:
                hi = [adapt(from_thl(check.spec(k), v), target.types[k], self.dialect,
                            check.spec(k)) for k, v in zip(check.key, check.hi, strict=True)]
                query = query.where(sa.tuple_(*keys) <= sa.tuple_(*map(sa.literal, hi)))
        try:
            rows = self._db.execute(query).all()
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"reading {target.qualified} for a check") from exc
        for row in rows:
            yield [thl_value_of(spec, value) for spec, value in zip(check.specs, row,
                                                                   strict=True)]

    def record_check(self, result: CheckResult) -> None:
        """Upsert the range's row of Tungsten's ``consistency`` table (crc: 40 hex digits of
        the digest, as its CHAR(40) columns hold)."""
        self._flush()
        t = self.consistency_table
        values = {"db": result.schema[:64], "tbl": result.table[:64], "id": result.range,
                  "row_offset": result.range * result.limit, "row_limit": result.limit,
                  "this_crc": result.target_digest[:40], "this_cnt": result.target_count,
                  "master_crc": result.source_digest[:40], "master_cnt": result.source_count,
                  "ts": dt.datetime.now(dt.UTC).replace(tzinfo=None),
                  "method": result.method[:32]}
        where = (t.c.db == values["db"], t.c.tbl == values["tbl"], t.c.id == result.range)
        try:
            done = self._db.execute(sa.update(t).where(*where).values(values))
            if done.rowcount == 0:
                self._db.execute(sa.insert(t).values(values))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "recording a consistency check") from exc

    def commit(self, position: Position) -> None:
        txn = self._open_txn()
        now = dt.datetime.now(dt.UTC)
        source_time = dt.datetime.fromtimestamp(position.tstamp / 1e6, dt.UTC)
        row = CommitSeqno(
            seqno=position.seqno, epoch=position.epoch, eventid=position.event_id,
            source_id=position.source_id, shard_id=position.shard_id,
            fragno=position.fragno, last_frag=position.last_frag, task_id=self.task_id,
            applied_latency=max(0, int((now - source_time).total_seconds())),
            extract_timestamp=source_time.replace(tzinfo=None))
        # On the queued path the position travels with the block's last rows: one round
        # trip, then COMMIT. A crash before that COMMIT undoes both alike.
        expected = self._expected
        committed = False
        try:
            advance = None if not self._multi or expected is None else self._tracking_sql(
                "advance", self.tracking.advance_params(row, expected))
            if self.audit is not None and self._seqnos:
                self._flush()
                self._db.execute(sa.insert(self.audit), [
                    {"seqno": s, "applied_at": now.replace(tzinfo=None)} for s in self._seqnos])
            if advance is None:
                self._flush()
            crashpoints.reached("apply-before-position")
            if advance is not None:
                self._enqueue(_Queued(advance, 1, None, None, kind="position"))
                self._flush()
            else:
                self.tracking.advance(self._db, row, expected)
            txn.commit()
            committed = True
            self._ddl_in_block = False
            self._count_changes(position.seqno)
        except PositionMoved as exc:
            self.rollback()
            raise self._conflict(exc, seqno=position.seqno) from exc
        except sa_exc.DBAPIError as exc:
            self.rollback()
            raise self._classify(exc, f"committing up to seqno {position.seqno}",
                                 seqno=position.seqno) from exc
        finally:
            self._end(keep=committed)
        self._expected = position.seqno
        # A block that only moved a channel's position (parallel apply) replayed nothing.
        self._replaying = self._replaying and not self._seqnos

    def channel_store(self) -> SqlChannelStore:
        """Every channel's position and the shard assignments (consumers.channels)."""
        return SqlChannelStore(self._eng, self.tracking, self._classify)

    def _open_txn(self) -> sa.RootTransaction:
        if self._txn is None:
            raise RuntimeError("no open block: begin() first")
        return self._txn

    def _conflict(self, exc: PositionMoved, seqno: int = -1) -> PositionConflict:
        return PositionConflict(
            f"{self.target}: {self.tracking_schema}.trep_commit_seqno"
            + (f" (task_id {self.task_id})" if self.task_id else "")
            + f" moved under this consumer ({exc}): another process applies the same "
            "consumer group to this target. Nothing of this block was committed; run one "
            "process per group.",
            seqno=seqno)

    def rollback(self) -> None:
        self._batch = None
        self._queued, self._queued_bytes = [], 0
        self._changed.clear()
        if self.policy is not None:
            self.policy.collect()
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
        self._batch = None
        self._queued, self._queued_bytes = [], 0
        self._ddl_in_block = False

    def _forget_statements(self) -> None:
        """Compiled statements, their texts and the value adapters go with the tables they
        were made for."""
        self._stmts.clear()
        self._texts.clear()
        self._adapters.clear()

    def _count_changes(self, seqno: int) -> None:
        """Committed: count what the value policy changed, warn (at most once a minute per
        column)."""
        changed, self._changed = self._changed, Counter()
        now = time.monotonic()
        for (kind, table, column), count in sorted(changed.items()):
            self.metrics.values_changed(kind, count)
            key = (kind, table, column)
            if key not in self._warned or now - self._warned[key] >= _WARN_EVERY_S:
                self._warned[key] = now
                what = "zero date(s) stored as NULL" if kind == "zero_date" else \
                    "value(s) stored without their U+0000 characters"
                log.warning("%s: %s.%s: %d %s in the block up to seqno %d (policy of this "
                            "target; counted in trep_values_changed_total{kind=\"%s\"})",
                            self.target, table, column, count, what, seqno, kind)

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

    # -- rows -------------------------------------------------------------------------------

    def _table(self, change: RowChange, specs: Sequence[ColumnSpec], seqno: int
               ) -> TargetTable:
        key = (change.schema, change.table)
        found = self._tables.get(key)
        if found is None:
            found = self._reflect(change.schema, change.table)
            if found is None:
                if not self.create_tables:
                    hint = "" if self.capabilities.statements is StatementPolicy.APPLY else (
                        "; create it there (statements are not applied to this target)")
                    raise DataError(f"table {change.schema}.{change.table} does not exist on "
                                    f"{self.target}" + hint, seqno=seqno)
                found = self._create(change.schema, change.table, specs, seqno)
            self._tables[key] = found
        if self.create_tables:
            found = self._evolve(found, specs, seqno)
        return found

    def _reflect(self, schema: str, table: str) -> TargetTable | None:
        """The target table as it is now; None if there is none."""
        try:
            columns = sa.inspect(self._db).get_columns(table, schema=schema)
        except sa_exc.NoSuchTableError:
            return None
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"reading the columns of {schema}.{table}") from exc
        sources = {}
        for c in columns:
            source = ddl.SourceType.from_comment(c.get("comment"))
            if source is not None:
                sources[self._column_name(c["name"])] = source
        return TargetTable(
            schema, table, {self._column_name(c["name"]): c["type"] for c in columns},
            {self._column_name(c["name"]): bool(c["computed"].get("persisted", True))
             for c in columns if c.get("computed")}, sources)

    def _create(self, schema: str, name: str, specs: Sequence[ColumnSpec], seqno: int
                ) -> TargetTable:
        """Create the table of a row image (and its schema); the table as reflected."""
        where = f"{schema}.{name}"
        try:
            table = ddl.new_table(schema, name, specs, self._db.dialect)
        except UnmappedType as exc:
            raise DataError(f"{self.target}: cannot create {where} for seqno {seqno}: {exc}; "
                            "create it by hand", seqno=seqno) from exc
        self._run_ddl(ddl.create_statements(table, self._db.dialect), where, seqno)
        log.info("%s: created %s from the THL (seqno %d): %d column(s)%s", self.target, where,
                 seqno, len(specs), ", primary key " + ", ".join(
                     s.name for s in specs if s.primary_key) if any(
                     s.primary_key for s in specs) else ", no primary key")
        return self._reflected(schema, name, seqno)

    def _reflected(self, schema: str, name: str, seqno: int) -> TargetTable:
        found = self._reflect(schema, name)
        if found is None:
            raise DataError(f"{self.target}: {schema}.{name} is not there right after it was "
                            f"created or altered (seqno {seqno})", seqno=seqno)
        return found

    def _evolve(self, found: TargetTable, specs: Sequence[ColumnSpec], seqno: int
                ) -> TargetTable:
        """Bring a table made from the THL in line with a row image's columns.

        New columns are added and widened source types widen their column, in the block's
        transaction; a column dropped or narrowed on the source stops the group.
        """
        layout = tuple((s.name, s.type.upper(), s.length, s.scale, s.unsigned) for s in specs)
        if layout in found.checked:
            return found
        where = found.qualified
        names = {s.name for s in specs}
        dropped = [c for c in found.sources if c not in names and c not in found.generated]
        if dropped:
            raise DataError(
                f"{self.target}: {where} has column(s) {', '.join(dropped)} that the row "
                f"image of seqno {seqno} lacks: dropped on the source? The target keeps "
                "them, so nothing is written without them. Drop them on the target (or "
                "clear their comment to keep them, filled by their default), then put the "
                "group online", seqno=seqno)
        table = ddl.new_table(found.schema, found.name, [], self._db.dialect)
        statements: list[ddl.Ddl] = []
        try:
            for spec in specs:
                if spec.name not in found.types:
                    column = ddl.new_column(spec, self._db.dialect)
                    table.append_column(column)
                    statements += ddl.add_column(table, column, self._db.dialect)
                    continue
                old = found.sources.get(spec.name)
                if old is None:
                    continue  # a column made by hand: its type is the user's choice
                new = ddl.SourceType.of(spec)
                change = ddl.compare(old, new)
                if change is ddl.Change.WIDER:
                    column = ddl.new_column(spec, self._db.dialect)
                    table.append_column(column)
                    statements += ddl.widen_column(table, column, found.types[spec.name],
                                                   self._db.dialect)
                elif change is not ddl.Change.SAME:
                    how = "narrowed" if change is ddl.Change.NARROWER else "changed type"
                    raise DataError(
                        f"{self.target}: column {spec.name} of {where} {how} on the source "
                        f"from {old} to {new} (seqno {seqno}): the source rewrote its rows "
                        "without row events, so the target may hold values the source no "
                        "longer has. Fix the column on the target (its type, its values and "
                        f"its comment '{new.comment()}'), then put the group online",
                        seqno=seqno)
        except UnmappedType as exc:
            raise DataError(f"{self.target}: cannot evolve {where} for seqno {seqno}: {exc}",
                            seqno=seqno) from exc
        if statements:
            self._run_ddl(statements, where, seqno)
            log.info("%s: %s follows the source at seqno %d: %s", self.target, where, seqno,
                     "; ".join(ddl.ddl_text(statements, self._db.dialect)))
            if any(isinstance(s, str) and " ADD " in s for s in statements):
                log.warning("%s: %s: columns added at seqno %d are NULL in the rows the "
                            "target already had, whatever DEFAULT the source gave them",
                            self.target, where, seqno)
            found = self._reflected(found.schema or "", found.name, seqno)
            self._tables[(found.schema or "", found.name)] = found
        found.checked.add(layout)
        return found

    def _run_ddl(self, statements: Sequence[ddl.Ddl], where: str, seqno: int) -> None:
        """DDL in the block's transaction (PostgreSQL: transactional DDL, undone with the
        block by a crash or a rollback); elsewhere on its own connection, committed."""
        # Rows of the block before this seqno go first, in source order.
        self._flush()
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

    def _column_name(self, reflected: str) -> str:
        # SQLAlchemy's MySQL reflection parses SHOW CREATE TABLE and keeps a backtick inside
        # a name doubled (`back``tick` comes back as "back``tick").
        return reflected.replace("``", "`") if self.dialect in MYSQL_FAMILY else reflected

    def _empty(self, change: RowChange, event: ThlEvent) -> None:
        """A table's first provisioned chunk: the target's rows go, the source's come."""
        target = self._table(change, _image_specs(change), event.seqno)
        self._flush()
        try:
            self._db.execute(sa.delete(target.table))
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"emptying {target.qualified} for provisioning") from exc

    def _rows(self, change: RowChange, event: ThlEvent, idempotent: bool = False) -> None:
        specs = _image_specs(change)
        target = self._table(change, specs, event.seqno)
        missing = [c.name for c in specs if c.name not in target.types]
        if missing:
            raise DataError(f"{target.qualified} on {self.target} has no column(s) "
                            f"{', '.join(missing)} (seqno {event.seqno})", seqno=event.seqno)
        try:
            adapted = self._adapter(target, change.column_specs)
            after = [adapted(r) for r in change.column_values]
            adapted = self._adapter(target, change.key_specs)
            before = [adapted(r) for r in change.key_values]
        except ValueRefused as exc:
            raise DataError(f"{self.target}: {target.qualified}, column {exc.column}, seqno "
                            f"{event.seqno}: {exc}", seqno=event.seqno) from exc
        except (ValueError, TypeError) as exc:
            raise DataError(f"{target.qualified}: a value of seqno {event.seqno} cannot be "
                            f"converted: {exc}", seqno=event.seqno) from exc
        if self.policy is not None and self.policy.changed:
            for (kind, column), count in self.policy.collect().items():
                self._changed[kind, target.qualified, column] += count
        if idempotent and any(c.primary_key for c in specs):
            self._idempotent(target, change, after, before)
            return
        params = bind_rows(change.action, after, before, change.key_specs)
        if idempotent:
            # No key: the row may not be there yet; the table's chunk will set it right.
            self._flush()
            self._execute(_Batch(target, change.action, change.column_specs,
                                 change.key_specs, params), check=False)
            return
        batch = _Batch(target, change.action, change.column_specs, change.key_specs, params)
        if self._batch is not None and self._batch.layout() == batch.layout():
            self._batch.params.extend(params)
        else:
            self._close_batch()
            self._batch = batch
        if len(self._batch.params) >= self.cfg.batch_rows:
            self._close_batch()

    def _adapter(self, target: TargetTable, specs: Sequence[ColumnSpec]
                 ) -> RowAdapter:
        """The value adapter of one table and column layout (made once per layout)."""
        key = (target.qualified, id(target), tuple((c.name, c.type, c.length) for c in specs))
        found = self._adapters.get(key)
        if found is None:
            found = self._adapters[key] = row_adapter(
                specs, [target.types[c.name] for c in specs], self.dialect, self.policy)
        return found

    def _idempotent(self, target: TargetTable, change: RowChange, after: list[list[object]],
                    before: list[list[object]]) -> None:
        """Apply a row change of a table being provisioned so that it cannot fail: delete
        the rows its keys name (if there), then insert the after images. Works the same on
        every dialect, and for key changes inside one statement."""
        self._flush()
        steps: list[tuple[RowAction, list[ColumnSpec], list[dict[str, object]]]] = []
        if before:
            steps.append((RowAction.DELETE, change.key_specs,
                          bind_rows(RowAction.DELETE, [], before, change.key_specs)))
        if after:
            steps.append((RowAction.DELETE, change.column_specs,
                          bind_rows(RowAction.DELETE, [], after, change.column_specs)))
            steps.append((RowAction.INSERT, change.column_specs,
                          bind_rows(RowAction.INSERT, after, [], change.column_specs)))
        for action, specs, params in steps:
            # Queued like any batch on MySQL-family targets (PyMySQL's executemany would
            # send a DELETE per row, a round trip each); unchecked: the rows may be absent.
            self._execute(_Batch(target, action, specs, specs, params), check=False)

    def _close_batch(self) -> None:
        """The open batch goes out (executed, or queued for the next round trip)."""
        batch, self._batch = self._batch, None
        if batch is not None and batch.params:
            self._execute(batch)

    def _flush(self) -> None:
        """Everything of the block so far has reached the target."""
        self._close_batch()
        self._send()

    def _execute(self, batch: _Batch, check: bool = True) -> None:
        """One executemany; ``check``: an UPDATE or DELETE must match every row."""
        if self._multi and not _holds_large_value(batch):
            self._queue(batch, check)
            return
        if self._multi:
            # A value of many MiB is bound by the driver, not rendered into the round
            # trip's text (escaped, joined, encoded: several copies of it): what is queued
            # goes first, in order.
            self._send()
        stmt = self._stmts.get(batch.layout())
        if stmt is None:
            stmt = statement_for(self.builder, batch.target, batch.action, batch.columns,
                                 batch.keys)
            self._stmts[batch.layout()] = stmt
        try:
            result = self._db.execute(stmt, batch.params)
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, f"{batch.action.value} into {batch.target.qualified}"
                                 ) from exc
        if check and batch.action is not RowAction.INSERT and result.rowcount not in (-1, len(
                batch.params)):
            raise DataError(
                f"{batch.action.value} of {batch.target.qualified} on {self.target} matched "
                f"{result.rowcount} of {len(batch.params)} row(s): the target has diverged "
                "from the source")

    def _rendering(self, batch: _Batch) -> _Rendering:
        """How a batch layout's rows become text (compiled once per layout)."""
        layout = batch.layout()
        found = self._texts.get(layout)
        if found is None:
            stmt = statement_for(self.builder, batch.target, batch.action, batch.columns,
                                 batch.keys)
            compiled = stmt.compile(dialect=self._db.dialect)
            sql = compiled.string
            order = tuple(compiled.positiontup or ()) if compiled.positional else None
            if batch.action is RowAction.INSERT:
                match = RE_INSERT_VALUES.match(sql)
                if match is None:
                    raise RuntimeError(f"not a VALUES insert: {sql}")
                found = _Rendering(Template(match.group(2).rstrip(), order),
                                   (match.group(1) % (), match.group(3) or ""))
            else:
                found = _Rendering(Template(sql, order), None)
            self._texts[layout] = found
        return found

    def _queue(self, batch: _Batch, check: bool) -> None:
        """Render a batch on the client and queue it for the next round trip.

        The text is what the driver's executemany would send: the same compiled statement,
        the driver's literals (``consumers.sql.render``); INSERTs as multi-row statements
        (as executemany rewrites them), UPDATEs and DELETEs one statement per row, each
        checked to match its one row.
        """
        cursor = self._cursor()
        try:
            literal = (postgresql_literal(cursor) if self.dialect == "postgresql"
                       else mysql_literal(cursor))
            rendering = self._rendering(batch)
            row = rendering.row
            if rendering.around is None:
                for params in batch.params:
                    self._enqueue(_Queued(row.render(params, literal), 1 if check else 0,
                                          batch.action, batch.target))
                return
            prefix, postfix = rendering.around
            parts: list[str] = []
            size = 0
            for params in batch.params:
                text = row.render(params, literal)
                if parts and size + len(text) > _ROUND_TRIP_BYTES:
                    self._enqueue(_Queued(prefix + ",".join(parts) + postfix, 0,
                                          batch.action, batch.target))
                    parts, size = [], 0
                parts.append(text)
                size += len(text) + 1
            self._enqueue(_Queued(prefix + ",".join(parts) + postfix, 0, batch.action,
                                  batch.target))
        finally:
            cursor.close()

    def _cursor(self) -> Any:
        """A cursor that binds on the client (``mogrify``) and reads several results."""
        raw = self._db.connection.dbapi_connection
        if self.dialect == "postgresql":
            return psycopg.ClientCursor(raw)  # type: ignore[call-overload]
        return raw.cursor()  # type: ignore[union-attr]

    def _enqueue(self, queued: _Queued) -> None:
        if self._queued and self._queued_bytes + len(queued.sql) > _ROUND_TRIP_BYTES:
            self._send()
        self._queued.append(queued)
        self._queued_bytes += len(queued.sql) + 1

    def _send(self) -> None:
        """The queued statements in one round trip; each one's matched rows checked."""
        queued, self._queued, self._queued_bytes = self._queued, [], 0
        if not queued:
            return
        cursor = self._cursor()
        at = queued[0]
        mismatch: tuple[_Queued, int] | None = None
        moved: PositionMoved | None = None
        position_missed = False
        try:
            cursor.execute(";\n".join(q.sql for q in queued))
            for i, at in enumerate(queued):
                if i and not cursor.nextset():
                    raise RuntimeError(f"{len(queued)} statements sent, {i} results read")
                if at.kind == "lock":
                    found = cursor.fetchone()
                    stored = None if found is None else found[0]
                    if stored != self._expected:
                        moved = PositionMoved(self._expected, stored)
                elif at.kind == "position":
                    position_missed = cursor.rowcount != 1
                elif at.rows and cursor.rowcount != at.rows and mismatch is None:
                    mismatch = (at, cursor.rowcount)
        except (pymysql.MySQLError, psycopg.Error) as exc:
            if moved is not None:
                # The position moved first: whatever failed after it is the other
                # writer's doing.
                self.rollback()
                raise self._conflict(moved) from exc
            # The server stopped at the failing statement: name its table like executemany.
            dbapi = self._db.dialect.loaded_dbapi
            wrapped = sa_exc.DBAPIError.instance(at.sql[:200], None, exc, dbapi.Error)
            if not isinstance(wrapped, sa_exc.DBAPIError):
                raise wrapped from exc
            raise self._classify(wrapped, at.doing()) from exc
        finally:
            cursor.close()
        if moved is None and position_missed:
            moved = PositionMoved(self._expected, self.tracking.stored(self._db, self.task_id))
        if moved is not None:
            self.rollback()
            raise self._conflict(moved)
        if mismatch is not None:
            at, count = mismatch
            raise DataError(
                f"{at.doing('of')} on {self.target} matched {count} of {at.rows} row(s): the "
                "target has diverged from the source")

    # -- statements (policy apply: MySQL-family targets) -------------------------------------

    def _statement(self, stmt: Statement, event: ThlEvent) -> None:
        self._flush()
        self._tables.clear()
        self._forget_statements()
        try:
            self._session(stmt.options)
            # CREATE/DROP DATABASE x is logged with x as its default schema, which the
            # target may not have (yet, or any more).
            if stmt.default_schema and not is_database_statement(stmt.sql):
                self._db.exec_driver_sql(f"USE {self._quote(stmt.default_schema)}",
                                           execution_options=_RAW)
            self._db.exec_driver_sql(stmt.sql, execution_options=_RAW)
        except sa_exc.DBAPIError as exc:
            code = mysql_code(exc)
            if self._replaying and code in DDL_ALREADY_DONE:
                log.warning("%s: seqno %d replays a statement that already ran before a "
                            "restart (%s); going on", self.target, event.seqno, exc.orig)
            elif code == UNKNOWN_DATABASE and stmt.default_schema:
                raise DataError(f"default schema {stmt.default_schema} of seqno {event.seqno} "
                                f"does not exist on {self.target}") from exc
            else:
                raise self._classify(exc, f"statement {stmt.sql[:200]!r}") from exc
        finally:
            try:
                self._session(self._session_defaults, restore=True)
            except sa_exc.DBAPIError as exc:
                log.debug("restoring the session: %s", exc)
        if not is_transactional(stmt.sql):
            # MySQL committed the DDL by itself: the position is not written yet.
            crashpoints.reached("apply-after-ddl")

    def _session(self, options: dict[str, Any], restore: bool = False) -> None:
        sets = []
        for name in _SESSION_VARIABLES:
            value = options.get(name)
            if value is None:
                continue
            text = str(value)
            sets.append(f"@@session.{name} = " + (text if text.isdigit() else
                                                   _sql_string(text)))
        tz = "+00:00" if restore else options.get("time_zone")
        if tz:
            sets.append(f"@@session.time_zone = {_sql_string(str(tz))}")
        if sets:
            self._db.exec_driver_sql("SET " + ", ".join(sets), execution_options=_RAW)

    def _quote(self, name: str) -> str:
        return str(self._db.dialect.identifier_preparer.quote_identifier(name))


#: A value larger than this is bound by the driver instead of rendered into SQL text.
LARGE_VALUE_BYTES = 1 << 20


def _holds_large_value(batch: _Batch) -> bool:
    """True if a row of the batch has a value above LARGE_VALUE_BYTES (only tables with a
    BLOB, TEXT or JSON column are looked into: other columns hold 64 KiB at most)."""
    if not any(c.blob or c.type.upper() == "JSON" for c in (*batch.columns, *batch.keys)):
        return False
    for params in batch.params:
        for value in params.values():
            if isinstance(value, (bytes, str)) and len(value) > LARGE_VALUE_BYTES:
                return True
    return False


def _image_specs(change: RowChange) -> list[ColumnSpec]:
    """Every column of a row change's images, after image first."""
    if not change.key_specs or change.key_specs is change.column_specs:
        return list(change.column_specs)
    seen = {c.name for c in change.column_specs}
    return [*change.column_specs, *(c for c in change.key_specs if c.name not in seen)]


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
