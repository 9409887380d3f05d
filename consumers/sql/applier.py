"""The SQL applier: THL events into MariaDB/MySQL, PostgreSQL (tested) and Oracle (compiled).

Row changes become INSERT/UPDATE/DELETE through SQLAlchemy Core; consecutive rows of one
table, action and column layout go to the driver as one executemany. Statement events are
replayed on MySQL-family targets only, inside the session OPTIONS they carry. The tracking
schema ``tungsten_<service>`` lives on the target, and ``trep_commit_seqno`` is written in
the same transaction as the data it covers.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import DataError, PositionConflict, TransientError
from consumers.sql.statements import RowStatements, TargetTable, bind_rows, statement_for
from consumers.sql.values import adapt_row
from replicator.config import ConsumerConfig
from replicator.filters import ReplicateFilter
from replicator.tracking import CommitSeqno, CommitSeqnoTable, PositionMoved, tracking_metadata
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.values import from_thl

log = logging.getLogger(__name__)

_MYSQL = ("mysql", "mariadb")
#: Statements that change data inside a transaction; anything else (DDL) commits implicitly.
_DML = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(INSERT|UPDATE|DELETE|REPLACE|LOAD|SELECT|SET|DO|CALL)\b",
                  re.IGNORECASE | re.DOTALL)
_DATABASE_DDL = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\b",
                           re.IGNORECASE | re.DOTALL)
#: MySQL errors of a DDL replayed after a crash between it and its position write.
_DDL_ALREADY_DONE = {1007, 1008, 1050, 1051, 1060, 1061, 1091}
#: MySQL errors that say the connection or the server went away, or a retryable conflict.
_MYSQL_TRANSIENT = {1040, 1053, 1205, 1213, 2002, 2003, 2006, 2013, 2055}
_HEARTBEAT = "heartbeat"
#: Source SQL goes to the driver as is: no parameters, so no %-formatting of its text.
_RAW = {"no_parameters": True}


@dataclass
class _Batch:
    """Consecutive rows of one table, action and column layout, not yet sent."""

    target: TargetTable
    action: RowAction
    columns: list[ColumnSpec]
    keys: list[ColumnSpec]
    params: list[dict[str, object]]

    def layout(self) -> tuple[object, ...]:
        return (id(self.target), self.action, _names(self.columns), _names(self.keys))


def _names(specs: list[ColumnSpec]) -> tuple[tuple[str, bool], ...]:
    return tuple((c.name, c.primary_key) for c in specs)


class SqlApplier:
    """Applies THL events to one SQL database through one connection."""

    def __init__(self, cfg: ConsumerConfig, tracking_schema: str, batch_rows: int = 1000
                 ) -> None:
        self.cfg = cfg
        self.url = cfg.engine_url()
        self.target = self.url.render_as_string(hide_password=True)
        self.dialect = self.url.get_backend_name()
        self.tracking_schema = tracking_schema
        self.tracking = CommitSeqnoTable(tracking_schema)
        self.heartbeat_table = tracking_metadata(tracking_schema).tables[
            f"{tracking_schema}.{_HEARTBEAT}"]
        self.statements_mode = cfg.statements or ("apply" if self.dialect in _MYSQL
                                                  else "error")
        if self.statements_mode == "apply" and self.dialect not in _MYSQL:
            raise ValueError(f"statements: apply works on MySQL/MariaDB targets only, not "
                             f"{self.dialect} ({self.target}); use skip or error")
        self.filter = ReplicateFilter(cfg.filters.replicate, cfg.filters.ignore)
        self.builder = RowStatements(self.dialect)
        self.batch_rows = batch_rows
        self._engine: sa.Engine | None = None
        self._conn: sa.Connection | None = None
        self._txn: sa.RootTransaction | None = None
        self._tables: dict[tuple[str, str], TargetTable] = {}
        self._stmts: dict[tuple[object, ...], Any] = {}
        self._batch: _Batch | None = None
        self._session_defaults: dict[str, Any] = {}
        #: The first seqno after a (re)connect may replay a DDL that already ran.
        self._replaying = False
        #: The seqno stored on the target as this applier last read (position), cleared
        #: (reset) or wrote (commit) it; a block commits only if the target still holds it,
        #: so there is one writer per position. The runtime reads it before any block.
        self._expected: int | None = None

    @property
    def _db(self) -> sa.Connection:
        if self._conn is None:
            raise RuntimeError("no open block: begin() first")
        return self._conn

    @property
    def _eng(self) -> sa.Engine:
        if self._engine is None:
            raise RuntimeError("not connected: connect() first")
        return self._engine

    def _open_txn(self) -> sa.RootTransaction:
        if self._txn is None:
            raise RuntimeError("no open block: begin() first")
        return self._txn

    # -- connection -------------------------------------------------------------------------

    def connect(self) -> None:
        if self._engine is None:
            self._engine = sa.create_engine(self.url, pool_pre_ping=True, pool_size=1,
                                            hide_parameters=True, **self._connect_args())
        try:
            with self._eng.begin() as conn:
                self.tracking.create(conn)
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "creating the tracking schema") from exc
        self._replaying = True

    def _connect_args(self) -> dict[str, Any]:
        if self.dialect in _MYSQL:
            return {"connect_args": {"charset": "utf8mb4", "connect_timeout": 10,
                                     "init_command": "SET time_zone = '+00:00'"}}
        if self.dialect == "postgresql":
            return {"connect_args": {"connect_timeout": 10, "options": "-c timezone=UTC"}}
        return {}

    def position(self) -> CommitSeqno | None:
        try:
            with self._eng.connect() as conn:
                pos = self.tracking.read(conn)
        except sa_exc.DBAPIError as exc:
            raise self._classify(exc, "reading trep_commit_seqno") from exc
        self._expected = pos.seqno if pos else None
        return pos

    def reset(self) -> None:
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

    def isolates(self, event: ThlEvent) -> bool:
        return self.statements_mode == "apply" and any(
            isinstance(item, Statement) and not _DML.match(item.sql) for item in event.data)

    def begin(self) -> None:
        try:
            self._conn = self._eng.connect()
            self._txn = self._conn.begin()
            if not self._session_defaults and self.dialect in _MYSQL:
                row = self._db.execute(sa.text(
                    "SELECT @@session.sql_mode, @@session.foreign_key_checks, "
                    "@@session.unique_checks, @@session.character_set_client, "
                    "@@session.collation_connection")).one()
                self._session_defaults = dict(zip(
                    ("sql_mode", "foreign_key_checks", "unique_checks",
                     "character_set_client", "collation_connection"), row, strict=True))
            # Lock the position row for the block: a second writer of this position waits
            # here, then finds the position moved, before it applies anything.
            stored = self.tracking.lock(self._db)
        except sa_exc.DBAPIError as exc:
            self.rollback()
            raise self._classify(exc, "opening a transaction") from exc
        if stored != self._expected:
            self.rollback()
            raise self._conflict(PositionMoved(self._expected, stored))

    def apply(self, event: ThlEvent) -> None:
        for item in event.data:
            if isinstance(item, RowChange):
                if item.schema == self.tracking_schema:
                    if item.table == _HEARTBEAT:
                        self._heartbeat(item)
                    continue
                if self.filter.keeps(item.schema, item.table):
                    self._rows(item, event)
            elif self.filter.keeps_item(item):
                self._statement(item, event)

    def skip(self, event: ThlEvent) -> None:
        log.warning("%s: seqno %d skipped (%s): its data is not applied", self.target,
                    event.seqno, event.event_id)

    def commit(self, last: ThlEvent) -> None:
        txn = self._open_txn()
        now = dt.datetime.now(dt.UTC)
        source_time = dt.datetime.fromtimestamp(last.tstamp / 1e6, dt.UTC)
        pos = CommitSeqno(
            seqno=last.seqno, epoch=last.epoch, eventid=last.event_id,
            source_id=last.source_id, shard_id=last.shard_id, fragno=last.fragno,
            last_frag=last.last_frag,
            applied_latency=max(0, int((now - source_time).total_seconds())),
            extract_timestamp=source_time.replace(tzinfo=None))
        try:
            self._flush()
            self.tracking.advance(self._db, pos, self._expected)
            txn.commit()
        except PositionMoved as exc:
            self.rollback()
            raise self._conflict(exc, seqno=last.seqno) from exc
        except sa_exc.DBAPIError as exc:
            self.rollback()
            raise self._classify(exc, f"committing up to seqno {last.seqno}",
                                 seqno=last.seqno) from exc
        finally:
            self._end()
        self._expected = last.seqno
        self._replaying = False

    def _conflict(self, exc: PositionMoved, seqno: int = -1) -> PositionConflict:
        return PositionConflict(
            f"{self.target}: {self.tracking_schema}.trep_commit_seqno moved under this "
            f"consumer ({exc}): another process applies the same consumer group to this "
            "target. Nothing of this block was committed; run one process per group.",
            seqno=seqno)

    def rollback(self) -> None:
        self._batch = None
        try:
            if self._txn is not None and self._txn.is_active:
                self._txn.rollback()
        except sa_exc.SQLAlchemyError as exc:
            log.debug("rollback: %s", exc)
        self._end()

    def _end(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sa_exc.SQLAlchemyError as exc:
                log.debug("close: %s", exc)
        self._conn = self._txn = None

    # -- rows -------------------------------------------------------------------------------

    def _table(self, schema: str, table: str) -> TargetTable:
        key = (schema, table)
        found = self._tables.get(key)
        if found is None:
            inspector = sa.inspect(self._db)
            try:
                columns = inspector.get_columns(table, schema=schema)
            except sa_exc.NoSuchTableError:
                raise DataError(f"table {schema}.{table} does not exist on {self.target}; "
                                "create it there (statements are not applied to this target)"
                                if self.statements_mode != "apply" else
                                f"table {schema}.{table} does not exist on {self.target}"
                                ) from None
            found = TargetTable(
                schema, table, {self._column_name(c["name"]): c["type"] for c in columns},
                {self._column_name(c["name"]): bool(c["computed"].get("persisted", True))
                 for c in columns if c.get("computed")})
            self._tables[key] = found
        return found

    def _column_name(self, reflected: str) -> str:
        # SQLAlchemy's MySQL reflection parses SHOW CREATE TABLE and keeps a backtick inside
        # a name doubled (`back``tick` comes back as "back``tick").
        return reflected.replace("``", "`") if self.dialect in _MYSQL else reflected

    def _rows(self, change: RowChange, event: ThlEvent) -> None:
        target = self._table(change.schema, change.table)
        specs = change.column_specs or change.key_specs
        missing = [c.name for c in specs if c.name not in target.types]
        if missing:
            raise DataError(f"{target.qualified} on {self.target} has no column(s) "
                            f"{', '.join(missing)} (seqno {event.seqno})")
        try:
            after = [adapt_row(r, change.column_specs,
                               [target.types[c.name] for c in change.column_specs],
                               self.dialect) for r in change.column_values]
            before = [adapt_row(r, change.key_specs,
                                [target.types[c.name] for c in change.key_specs],
                                self.dialect) for r in change.key_values]
        except (ValueError, TypeError) as exc:
            raise DataError(f"{target.qualified}: a value of seqno {event.seqno} cannot be "
                            f"converted: {exc}") from exc
        params = bind_rows(change.action, after, before, change.key_specs)
        batch = _Batch(target, change.action, change.column_specs, change.key_specs, params)
        if self._batch is not None and self._batch.layout() == batch.layout():
            self._batch.params.extend(params)
        else:
            self._flush()
            self._batch = batch
        if len(self._batch.params) >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        batch, self._batch = self._batch, None
        if batch is None or not batch.params:
            return
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
        if batch.action is not RowAction.INSERT and result.rowcount not in (-1, len(
                batch.params)):
            raise DataError(
                f"{batch.action.value} of {batch.target.qualified} on {self.target} matched "
                f"{result.rowcount} of {len(batch.params)} row(s): the target has diverged "
                "from the source")

    # -- statements -------------------------------------------------------------------------

    def _statement(self, stmt: Statement, event: ThlEvent) -> None:
        if self.statements_mode == "skip":
            log.debug("%s: statement of seqno %d skipped", self.target, event.seqno)
            return
        if self.statements_mode == "error":
            raise DataError(
                f"seqno {event.seqno} holds a statement event, which {self.dialect} target "
                f"{self.target} cannot run: {stmt.sql[:200]!r}. Set `statements: skip` for "
                "this consumer to ignore statements (create tables on the target yourself).")
        self._flush()
        self._tables.clear()
        self._stmts.clear()
        try:
            self._session(stmt.options)
            # CREATE/DROP DATABASE x is logged with x as its default schema, which the
            # target may not have (yet, or any more).
            if stmt.default_schema and not _DATABASE_DDL.match(stmt.sql):
                self._db.exec_driver_sql(f"USE {self._quote(stmt.default_schema)}",
                                           execution_options=_RAW)
            self._db.exec_driver_sql(stmt.sql, execution_options=_RAW)
        except sa_exc.DBAPIError as exc:
            code = _mysql_code(exc)
            if self._replaying and code in _DDL_ALREADY_DONE:
                log.warning("%s: seqno %d replays a statement that already ran before a "
                            "restart (%s); going on", self.target, event.seqno, exc.orig)
            elif code == 1049 and stmt.default_schema:
                raise DataError(f"default schema {stmt.default_schema} of seqno {event.seqno} "
                                f"does not exist on {self.target}") from exc
            else:
                raise self._classify(exc, f"statement {stmt.sql[:200]!r}") from exc
        finally:
            try:
                self._session(self._session_defaults, restore=True)
            except sa_exc.DBAPIError as exc:
                log.debug("restoring the session: %s", exc)

    def _session(self, options: dict[str, Any], restore: bool = False) -> None:
        sets = []
        for name in ("sql_mode", "foreign_key_checks", "unique_checks",
                     "character_set_client", "collation_connection"):
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

    # -- heartbeats -------------------------------------------------------------------------

    def _heartbeat(self, change: RowChange) -> None:
        """Record a source heartbeat with this target's arrival time and lag."""
        if change.action is RowAction.DELETE:
            return
        self._flush()
        now = dt.datetime.now(dt.UTC)
        t = self.heartbeat_table
        for raw in change.column_values:
            row = {spec.name: from_thl(spec, value)
                   for spec, value in zip(change.column_specs, raw, strict=True)}
            source = row.get("source_tstamp")
            lag = None
            if isinstance(source, dt.datetime):
                source = source if source.tzinfo else source.replace(tzinfo=dt.UTC)
                lag = int((now - source).total_seconds() * 1000)
                row["source_tstamp"] = source.astimezone(dt.UTC).replace(tzinfo=None)
            values = {c.name: row.get(c.name) for c in t.c}
            values.update(target_tstamp=now.replace(tzinfo=None), lag_millis=lag)
            try:
                done = self._db.execute(sa.update(t).where(t.c.id == values["id"])
                                          .values(values))
                if done.rowcount == 0:
                    self._db.execute(sa.insert(t).values(values))
            except sa_exc.DBAPIError as exc:
                raise self._classify(exc, "recording a heartbeat") from exc

    # -- errors -----------------------------------------------------------------------------

    def _classify(self, exc: sa_exc.DBAPIError, doing: str, seqno: int = -1
                  ) -> TransientError | DataError:
        """Connection trouble is transient; anything the target says about data is not."""
        message = f"{self.target}: {doing}: {_first_line(exc)}"
        code = _mysql_code(exc)
        if exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError) \
                or code in _MYSQL_TRANSIENT or _pg_transient(exc):
            return TransientError(message, seqno=seqno)
        if isinstance(exc, sa_exc.OperationalError) and code is None and \
                self.dialect not in ("postgresql",):
            return TransientError(message, seqno=seqno)
        return DataError(message, seqno=seqno)


def _mysql_code(exc: sa_exc.DBAPIError) -> int | None:
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _pg_transient(exc: sa_exc.DBAPIError) -> bool:
    state = getattr(exc.orig, "sqlstate", None)
    # 08: connection exception; 57P: operator intervention (shutdown); 40: rollbacks
    # (serialization failure, deadlock); 53: insufficient resources.
    if not isinstance(state, str):
        return False
    return state[:2] in ("08", "40", "53") or state.startswith("57P")


def _first_line(exc: sa_exc.DBAPIError) -> str:
    return str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
