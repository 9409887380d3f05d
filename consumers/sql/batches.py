"""The rows of a block as statements to the driver: batched, rendered, sent in round trips.

Consecutive rows of one table, action and column layout are one batch, which goes to the
driver as one executemany. On MySQL-family targets through PyMySQL and on PostgreSQL through
psycopg the same compiled statements are rendered on the client with the driver's own
escaping (``render.py``) and queued: a block's rows travel as multi-row INSERTs and
multi-statement round trips of about ``_ROUND_TRIP_BYTES``, together with the lock and the
compare-and-set of the block's position (``positions.py``), instead of one round trip (or
one server-side execution) per row. Every statement's matched-row count is still checked:
an UPDATE or DELETE that does not match its row means the target has diverged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
from pymysql.cursors import RE_INSERT_VALUES
from sqlalchemy import exc as sa_exc

from consumers.errors import DataError
from consumers.sql.context import TargetContext
from consumers.sql.positions import SqlTracking
from consumers.sql.render import Template, client_cursor, mysql_literal, postgresql_literal
from consumers.sql.statements import RowStatements, TargetTable, statement_for
from replicator.tracking import PositionMoved
from thl_topics.event import ColumnSpec, RowAction

#: Characters of SQL text sent in one multi-statement round trip (queued path), at least
#: one statement: far below any max_allowed_packet (MariaDB's default is 16 MiB).
_ROUND_TRIP_BYTES = 1 << 20
#: (dialect, driver) pairs whose cursors render statements on the client and return the
#: results of several statements sent at once.
_MULTI_DRIVERS = {("mysql", "pymysql"), ("mariadb", "pymysql"), ("postgresql", "psycopg")}
#: A value larger than this is bound by the driver instead of rendered into SQL text.
LARGE_VALUE_BYTES = 1 << 20


@dataclass
class Queued:
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
class Batch:
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


class BatchWriter:
    """The open block's batches and queued statements on one connection."""

    def __init__(self, ctx: TargetContext, driver: str, batch_rows: int,
                 positions: SqlTracking, rollback: Callable[[], None]) -> None:
        self.ctx = ctx
        self.batch_rows = batch_rows
        self.builder = RowStatements(ctx.dialect)
        #: PyMySQL on a MySQL-family target, psycopg on PostgreSQL: statements are rendered
        #: by the driver (client-side binding) and sent together.
        self.multi = (ctx.dialect, driver) in _MULTI_DRIVERS
        self._positions = positions
        #: The applier's rollback: a position that moved ends the block.
        self._rollback = rollback
        self.batch: Batch | None = None
        self.queued: list[Queued] = []
        self.queued_bytes = 0
        self._stmts: dict[tuple[object, ...], Any] = {}
        #: Each compiled layout's text, cut at its parameters (see ``_rendering``).
        self._texts: dict[tuple[object, ...], _Rendering] = {}

    def add(self, batch: Batch) -> None:
        """Rows for the open batch when they have its layout; else the open batch goes out
        and they open the next one (which goes out at ``batch_rows``)."""
        if self.batch is not None and self.batch.layout() == batch.layout():
            self.batch.params.extend(batch.params)
        else:
            self.close_batch()
            self.batch = batch
        if len(self.batch.params) >= self.batch_rows:
            self.close_batch()

    def close_batch(self) -> None:
        """The open batch goes out (executed, or queued for the next round trip)."""
        batch, self.batch = self.batch, None
        if batch is not None and batch.params:
            self.execute(batch)

    def flush(self) -> None:
        """Everything of the block so far has reached the target."""
        self.close_batch()
        self.send()

    def execute(self, batch: Batch, check: bool = True) -> None:
        """One executemany; ``check``: an UPDATE or DELETE must match every row."""
        if self.multi and not _holds_large_value(batch):
            self._queue(batch, check)
            return
        if self.multi:
            # A value of many MiB is bound by the driver, not rendered into the round
            # trip's text (escaped, joined, encoded: several copies of it): what is queued
            # goes first, in order.
            self.send()
        stmt = self._stmts.get(batch.layout())
        if stmt is None:
            stmt = statement_for(self.builder, batch.target, batch.action, batch.columns,
                                 batch.keys)
            self._stmts[batch.layout()] = stmt
        try:
            result = self.ctx.db.execute(stmt, batch.params)
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"{batch.action.value} into {batch.target.qualified}"
                                    ) from exc
        if check and batch.action is not RowAction.INSERT and result.rowcount not in (-1, len(
                batch.params)):
            raise DataError(
                f"{batch.action.value} of {batch.target.qualified} on {self.ctx.target} matched "
                f"{result.rowcount} of {len(batch.params)} row(s): the target has diverged "
                "from the source")

    def _rendering(self, batch: Batch) -> _Rendering:
        """How a batch layout's rows become text (compiled once per layout)."""
        layout = batch.layout()
        found = self._texts.get(layout)
        if found is None:
            stmt = statement_for(self.builder, batch.target, batch.action, batch.columns,
                                 batch.keys)
            compiled = stmt.compile(dialect=self.ctx.db.dialect)
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

    def _queue(self, batch: Batch, check: bool) -> None:
        """Render a batch on the client and queue it for the next round trip.

        The text is what the driver's executemany would send: the same compiled statement,
        the driver's literals (``consumers.sql.render``); INSERTs as multi-row statements
        (as executemany rewrites them), UPDATEs and DELETEs one statement per row, each
        checked to match its one row.
        """
        cursor = client_cursor(self.ctx.db, self.ctx.dialect)
        try:
            literal = (postgresql_literal(cursor) if self.ctx.dialect == "postgresql"
                       else mysql_literal(cursor))
            rendering = self._rendering(batch)
            row = rendering.row
            if rendering.around is None:
                for params in batch.params:
                    self.enqueue(Queued(row.render(params, literal), 1 if check else 0,
                                        batch.action, batch.target))
                return
            prefix, postfix = rendering.around
            parts: list[str] = []
            size = 0
            for params in batch.params:
                text = row.render(params, literal)
                if parts and size + len(text) > _ROUND_TRIP_BYTES:
                    self.enqueue(Queued(prefix + ",".join(parts) + postfix, 0,
                                        batch.action, batch.target))
                    parts, size = [], 0
                parts.append(text)
                size += len(text) + 1
            self.enqueue(Queued(prefix + ",".join(parts) + postfix, 0, batch.action,
                                batch.target))
        finally:
            cursor.close()

    def enqueue(self, queued: Queued) -> None:
        """A rendered statement for the next round trip (which goes first if it is full)."""
        if self.queued and self.queued_bytes + len(queued.sql) > _ROUND_TRIP_BYTES:
            self.send()
        self.queued.append(queued)
        self.queued_bytes += len(queued.sql) + 1

    def send(self) -> None:
        """The queued statements in one round trip; each one's matched rows checked."""
        queued, self.queued, self.queued_bytes = self.queued, [], 0
        if not queued:
            return
        cursor = client_cursor(self.ctx.db, self.ctx.dialect)
        at = queued[0]
        mismatch: tuple[Queued, int] | None = None
        moved: PositionMoved | None = None
        position_missed = False
        answered = False
        try:
            cursor.execute(";\n".join(q.sql for q in queued))
            answered = True
            for i, at in enumerate(queued):
                if i and not cursor.nextset():
                    raise RuntimeError(f"{len(queued)} statements sent, {i} results read")
                if at.kind == "lock":
                    found = cursor.fetchone()
                    stored = None if found is None else found[0]
                    if stored != self._positions.expected:
                        moved = PositionMoved(self._positions.expected, stored)
                elif at.kind == "position":
                    position_missed = cursor.rowcount != 1
                elif at.rows and cursor.rowcount != at.rows and mismatch is None:
                    mismatch = (at, cursor.rowcount)
        except (pymysql.MySQLError, psycopg.Error) as exc:
            if moved is not None:
                # The position moved first: whatever failed after it is the other
                # writer's doing.
                self._rollback()
                raise self._positions.conflict(moved) from exc
            # The server stopped at the failing statement: name its table like executemany.
            doing = at.doing()
            if not answered and len(queued) > 1 and isinstance(exc, psycopg.Error):
                at, exc, doing = self._pinpoint(queued, exc)
            dbapi = self.ctx.db.dialect.loaded_dbapi
            wrapped = sa_exc.DBAPIError.instance(at.sql[:200], None, exc, dbapi.Error)
            if not isinstance(wrapped, sa_exc.DBAPIError):
                raise wrapped from exc
            raise self.ctx.classify(wrapped, doing) from exc
        finally:
            cursor.close()
        if moved is None and position_missed:
            positions = self._positions
            moved = PositionMoved(positions.expected,
                                  positions.tracking.stored(self.ctx.db, positions.task_id))
        if moved is not None:
            self._rollback()
            raise self._positions.conflict(moved)
        if mismatch is not None:
            at, count = mismatch
            raise DataError(
                f"{at.doing('of')} on {self.ctx.target} matched {count} of {at.rows} row(s): the "
                "target has diverged from the source")

    def _pinpoint(self, queued: list[Queued], exc: psycopg.Error
                  ) -> tuple[Queued, psycopg.Error, str]:
        """Which statement of a round trip PostgreSQL refused, and its error.

        PostgreSQL answers a multi-statement text with the first error alone, not which
        statement raised it. The block is lost anyway (its transaction is aborted), so the
        round trip is replayed one statement at a time in a transaction of its own, rolled
        back. A statement that fails only after the block's earlier round trips is not
        found that way: the error then names every statement the round trip held.
        """
        kinds = ", ".join(sorted({q.doing() for q in queued}))
        unknown = queued[0], exc, f"one of {len(queued)} statements sent together ({kinds})"
        raw = self.ctx.db.connection.dbapi_connection
        if raw is None:
            return unknown
        raw.rollback()
        cursor = client_cursor(self.ctx.db, self.ctx.dialect)
        try:
            for q in queued:
                try:
                    cursor.execute(q.sql)
                except psycopg.Error as found:
                    return q, found, q.doing()
        finally:
            cursor.close()
            raw.rollback()
        return unknown

    def forget(self) -> None:
        """Compiled statements and their texts go with the tables they were made for."""
        self._stmts.clear()
        self._texts.clear()

    def drop(self) -> None:
        """What the block held and did not send is given up (a rollback)."""
        self.batch = None
        self.queued, self.queued_bytes = [], 0


def _holds_large_value(batch: Batch) -> bool:
    """True if a row of the batch has a value above LARGE_VALUE_BYTES (only tables with a
    BLOB, TEXT or JSON column are looked into: other columns hold 64 KiB at most)."""
    if not any(c.blob or c.type.upper() == "JSON" for c in (*batch.columns, *batch.keys)):
        return False
    for params in batch.params:
        for value in params.values():
            if isinstance(value, (bytes, str)) and len(value) > LARGE_VALUE_BYTES:
                return True
    return False
