"""The rows of a block as statements to the driver: batched, rendered, sent in round trips.

Consecutive rows of one table, action and column layout are one batch, which goes to the
driver as one executemany. On MySQL-family targets through PyMySQL and on PostgreSQL through
psycopg the same compiled statements are rendered on the client with the driver's own
escaping (``render.py``) and queued: a block's rows travel as multi-row INSERTs and
multi-statement round trips of up to ``_ROUND_TRIP_BYTES``, together with the lock and the
compare-and-set of the block's position (``positions.py``), instead of one round trip (or
one server-side execution) per row. Every statement's matched-row count is still checked:
an UPDATE or DELETE that does not match its row means the target has diverged. On
PostgreSQL a round trip is a text and, after it, at most one COPY, sent through libpq's
asynchronous calls (``pgwire.OpenTrip``): each statement's result is its own, and a
block's last round trip can be left to the server while the next block is applied.

Set-based (``collapse``): the changes of a table with a primary key are collapsed to each
key's net effect (``collapse.py``) and go out as a few statements per table: the keys that
must not be there (inserted and deleted again) counted, the gone ones deleted (``IN``
lists, matched rows checked), the kept ones upserted (``ON DUPLICATE KEY UPDATE`` on
MySQL-family targets, which counts the rows it finds itself, ``ON CONFLICT (key) DO
UPDATE`` on PostgreSQL, after a count of their keys) and the new ones inserted (on
PostgreSQL by ``COPY ... FROM STDIN`` from ``COPY_ROWS`` rows of a table on, after the
statements queued before them). On MySQL-family targets the strings of UTF-8 text columns
go as hexadecimal literals (``render.Template.render_images``).
Deletes of every table go before upserts of any, upserts before inserts, each in the order
tables were first touched. Whatever the target refuses in a round trip that holds such
statements, or in such a COPY (a count that is off, a constraint) raises ``SetRefused``
(transient) at the highest seqno of the block so far: the block is rolled back, the session
starts again from the stored position, and everything up to that seqno
(``ordered_through``) goes in order, where the target names what is wrong, if anything
still is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, cast

import pymysql
from pymysql.cursors import RE_INSERT_VALUES
from sqlalchemy import exc as sa_exc

from consumers.errors import DataError, TransientError
from consumers.sql._collapse import Picker, TableChanges
from consumers.sql.collapse import Image, Key, KeyOf
from consumers.sql.config import MYSQL_FAMILY
from consumers.sql.context import TargetContext
from consumers.sql.mysqlwire import read_first_answer, send_query
from consumers.sql.positions import SqlTracking
from consumers.sql.render import (
    Literal,
    Template,
    client_cursor,
    joined,
    literals,
    mysql_literal_parts,
    render_bytes,
)
from consumers.sql.statements import RowStatements, TargetTable, statement_for
from replicator.tracking import PositionMoved
from thl_topics.event import ColumnSpec, RowAction

if TYPE_CHECKING:
    # PostgreSQL's driver is imported by PostgreSQL targets only (``_driver_errors``): a
    # MariaDB group starts a fifth of a second sooner without it.
    import psycopg

    from consumers.sql.pgwire import OpenTrip

    DriverError = pymysql.MySQLError | psycopg.Error

#: Characters of one statement's text at most (a multi-row INSERT is cut into several).
_STATEMENT_BYTES = 1 << 20
#: Characters of SQL text sent in one multi-statement round trip at most (queued path), at
#: least one statement; on MySQL-family targets also a quarter of the server's
#: max_allowed_packet (``BatchWriter.fit_round_trips``: a character may take 4 bytes). A
#: block's text up to this goes in one round trip, its last, which the server runs while
#: the group applies the next block; a block's earlier round trips are waited for. At 1 MiB,
#: blocks of more than about 2,600 rows of the bench's hexadecimal text waited: 300-event
#: blocks of 10 rows applied at 0.7x the rate of 100-event ones, where now they apply faster.
_ROUND_TRIP_BYTES = 8 << 20
#: (dialect, driver) pairs whose cursors render statements on the client and return the
#: results of several statements sent at once.
_MULTI_DRIVERS = {("mysql", "pymysql"), ("mariadb", "pymysql"), ("postgresql", "psycopg")}
#: A row holding a value larger than this goes in a statement of its own, not into a round
#: trip's text (``BatchWriter.execute``).
LARGE_VALUE_BYTES = 1 << 20
#: Keys in one ``IN`` list of a set-based statement at most.
_IN_KEYS = 1000
#: Around a counted upsert (``BatchWriter._upsert_clause``): the rows it found there.
_FOUND_RESET = "SET @trep_found = 0"
_FOUND_READ = "SELECT @trep_found"
#: New rows of one table in a set-based block from which PostgreSQL gets them by COPY, not
#: as INSERT text: the server parses no SQL per row (100,000 rows of bench-compare's table:
#: 0.16 s of server CPU against 0.7-0.8 s as 1,000-row INSERTs) and the client renders
#: none; below it, the round trip of its own a COPY needs costs more than it saves.
COPY_ROWS = 64
#: An INSERT's head, whose table and column list a COPY takes.
_INSERT_HEAD = re.compile(r"INSERT INTO (.+) VALUES\s*", re.DOTALL)


def _driver_errors(dialect: str) -> tuple[type[DriverError], ...]:
    """The base error class of the driver of ``dialect``'s targets."""
    if dialect == "postgresql":
        import psycopg
        return (psycopg.Error,)
    return (pymysql.MySQLError,)


class SetRefused(TransientError):
    """The target refused a set-based round trip: the session starts again from the stored
    position, and the blocks up to ``ordered_through`` go in order this time."""


@dataclass
class Queued:
    """One rendered statement waiting for the block's next round trip (MySQL family)."""

    sql: str
    #: Rows it must match (0: not checked).
    rows: int
    action: RowAction | None
    target: TargetTable | None
    #: ``rows`` (a row change), ``lock`` (reads the stored position, locked),
    #: ``position`` (moves it: must match its one row), ``count`` (reads a count that
    #: must equal ``rows``) or ``copy`` (a COPY of ``rows`` rows, PostgreSQL).
    kind: str = "rows"
    #: A statement of collapsed changes (``SetRefused`` where the target refuses it).
    collapsed: bool = False

    def doing(self, preposition: str = "into") -> str:
        """What the statement does, for errors."""
        if self.kind == "count" and self.target is not None:
            return f"counting keys of {self.target.qualified}"
        if self.kind == "copy" and self.target is not None:
            return f"copy into {self.target.qualified}"
        if self.action is not None and self.target is not None:
            return f"{self.action.value} {preposition} {self.target.qualified}"
        return ("locking" if self.kind == "lock" else "advancing") + " trep_commit_seqno"


@dataclass
class InFlight:
    """A round trip sent (``BatchWriter.transmit``) whose answers may not be read yet."""

    cursor: Any
    queued: list[Queued]
    #: The stored position a ``lock`` among them must find (the one when it was sent).
    expected: int | None
    #: The highest seqno of the block they belong to.
    seqno: int
    answered: bool = False
    #: PostgreSQL: the round trips, through libpq's asynchronous calls.
    trip: OpenTrip | None = None
    #: PostgreSQL: the COPY sent after ``queued`` (in ``trip``), if any.
    copy: Queued | None = None
    #: A COMMIT (of the block before) leads the round trip.
    lead_commit: bool = False
    #: The leading COMMIT was answered (the block before is committed).
    lead_answered: bool = False

    @property
    def stepping(self) -> bool:
        """A PostgreSQL round trip with steps left (``step``)."""
        return self.trip is not None and not self.trip.done

    def step(self) -> None:
        """Move a PostgreSQL round trip on as far as the server has answered, without
        waiting (an error is kept for ``BatchWriter.answers``)."""
        if self.trip is not None:
            self.trip.step(wait=False)


@dataclass(frozen=True)
class LastCopy:
    """New rows of a table as a COPY's data, formatted, to follow the queued statements."""

    queued: Queued
    data: bytes


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
    #: PostgreSQL: the ``COPY ... FROM STDIN`` taking the same rows, where the INSERT's
    #: VALUES are its parameters alone (no expression around one).
    copy: str | None = None
    #: An INSERT's tuple of VALUES taking an after image itself (collapsed rows): each
    #: parameter ``v<i>`` named by its index ``i`` in the image.
    images: Template | None = None
    #: Per value of ``images``: 4 or 3 where its strings go in hexadecimal (a UTF-8 text
    #: column of a MariaDB/MySQL target), else 0; None where no value does.
    hexed: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class CollapsePlan:
    """How the row changes of one layout collapse (``BatchWriter.collapse_plan``)."""

    #: The primary key's source column names, in key order.
    key: tuple[str, ...]
    #: The key of an after image and of a before image (None: the layout has none).
    after: KeyOf | None
    before: KeyOf | None
    #: The after images' column layout (``_names``).
    names: tuple[tuple[str, bool], ...]
    #: A BLOB, TEXT or JSON column may hold a value of many MiB (a statement of its own).
    large_columns: bool


@dataclass
class _Collapsing:
    """One table's collapsed changes of the open block, in one column layout."""

    target: TargetTable
    #: The primary key's source column names, in key order.
    key: tuple[str, ...]
    #: The after images' column layout (empty while only deletes came).
    columns: list[ColumnSpec]
    changes: TableChanges


def _names(specs: list[ColumnSpec]) -> tuple[tuple[str, bool], ...]:
    return tuple((c.name, c.primary_key) for c in specs)


def _key_of(key: tuple[str, ...], specs: list[ColumnSpec]) -> KeyOf | None:
    """The key of an image of ``specs`` (None: they do not hold the whole key)."""
    index = {c.name: i for i, c in enumerate(specs)}
    if not all(k in index for k in key):
        return None
    return Picker([index[k] for k in key])


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
        #: The errors of this target's driver in a round trip the server refused.
        self._driver_errors = _driver_errors(ctx.dialect)
        self._positions = positions
        #: The applier's rollback: a position that moved ends the block.
        self._rollback = rollback
        self.batch: Batch | None = None
        self.queued: list[Queued] = []
        self.queued_bytes = 0
        #: Characters of one round trip at most (``fit_round_trips``).
        self.round_trip_bytes = _ROUND_TRIP_BYTES
        self._stmts: dict[tuple[object, ...], Any] = {}
        #: Each compiled layout's text, cut at its parameters (see ``_rendering``).
        self._texts: dict[tuple[object, ...], _Rendering] = {}
        #: Changes of tables with a primary key are collapsed (``apply: set-based``; the
        #: queued path only).
        self.set_based = False
        #: Collapsed changes of the open block by table and layout, in first-touch order.
        #: Invariant: while any are held, no batch is open (and the reverse).
        self.collapsed: dict[tuple[object, ...], _Collapsing] = {}
        #: The highest seqno of the open block so far (the applier sets it).
        self.seqno = -1
        #: Row changes of the open block collapsed so far.
        self.collapsed_rows = 0
        #: Set-based blocks refused by the target, not yet counted in the metrics (the
        #: block's rollback counts them).
        self.refused = 0
        #: Blocks up to this seqno are applied in order: a set-based try of them failed.
        self.ordered_through = -1

    def fit_round_trips(self, max_packet: int) -> None:
        """Round trips that the server's ``max_allowed_packet`` (bytes) takes whatever the
        characters (a quarter of it), never below one statement's size."""
        self.round_trip_bytes = max(_STATEMENT_BYTES, min(_ROUND_TRIP_BYTES, max_packet // 4))

    def collapsing(self) -> bool:
        """Changes of the open block's current seqno may be collapsed."""
        return self.set_based and self.multi and self.seqno > self.ordered_through

    def add(self, batch: Batch) -> None:
        """Rows for the open batch when they have its layout; else the open batch goes out
        and they open the next one (which goes out at ``batch_rows``)."""
        if self.collapsed:
            self.emit_collapsed()  # they came first
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
        self.emit_collapsed()
        self.send()

    # -- set-based ------------------------------------------------------------------------

    @staticmethod
    def collapse_plan(key: tuple[str, ...], columns: list[ColumnSpec],
                      keys: list[ColumnSpec]) -> CollapsePlan:
        """How changes of one layout collapse by primary key ``key`` (its columns, in
        order)."""
        return CollapsePlan(key, _key_of(key, columns), _key_of(key, keys), _names(columns),
                            any(c.blob or c.type.upper() == "JSON" for c in (*columns, *keys)))

    def collapse(self, target: TargetTable, plan: CollapsePlan, action: RowAction,
                 columns: list[ColumnSpec], after: Sequence[Image], before: Sequence[Image]
                 ) -> int:
        """Collapse a row change's adapted images into its table's net effects by primary
        key; how many rows were taken (the rest, from the first one that cannot be
        collapsed, go in order; all of them where a value of many MiB needs a statement of
        its own)."""
        if plan.large_columns and (_large_value(after) or (
                plan.before is not None and _large_value(map(plan.before, before)))):
            return 0  # of a before image, only its key would be rendered
        self.close_batch()
        table = (target.qualified, id(target))
        held = self.collapsed.get(table)
        if held is not None and columns and held.columns and held.columns is not columns \
                and _names(held.columns) != plan.names:
            self.emit_collapsed()  # images of another column layout: those first
            held = None
        if held is None:
            held = self.collapsed[table] = _Collapsing(target, plan.key, columns, TableChanges())
        held.columns = held.columns or columns
        changes = held.changes
        after_key, before_key = plan.after, plan.before
        # Each takes the rows up to the first it cannot collapse (a key move, an unexplained
        # change, an unhashable key value): from there on, in order.
        taken = 0
        if action is RowAction.INSERT and after_key is not None:
            taken = changes.insert_all(after, after_key)
        elif action is RowAction.UPDATE and after_key is not None and before_key is not None:
            taken = changes.update_all(after, before, before_key, after_key)
        elif action is RowAction.DELETE and before_key is not None:
            taken = changes.delete_all(before, before_key)
        self.collapsed_rows += taken
        return taken

    def emit_collapsed(self, open_end: bool = False) -> LastCopy | None:
        """The collapsed changes as statements, queued: counts, deletes, upserts, inserts.
        ``open_end``: where the last of them is a COPY (PostgreSQL), it is not sent but
        returned, for ``transmit`` to send after the statements queued."""
        held, self.collapsed = list(self.collapsed.values()), {}
        if not held:
            return None
        left: LastCopy | None = None
        cursor = client_cursor(self.ctx.local, self.ctx.dialect)
        try:
            literal, special = literals(cursor, self.ctx.dialect)
            counted = self.ctx.dialect in MYSQL_FAMILY
            outcomes = [h.changes.outcome() for h in held]
            for h, (exist, absent, _, _, _) in zip(held, outcomes, strict=True):
                if not counted:
                    self._keys_statements(h, "SELECT COUNT(*) FROM", exist, literal, "count",
                                          True)
                self._keys_statements(h, "SELECT COUNT(*) FROM", absent, literal, "count",
                                      False)
            for h, (_, _, gone, _, _) in zip(held, outcomes, strict=True):
                self._keys_statements(h, "DELETE FROM", gone, literal, "rows", True)
            # Kept rows before new ones: a new row may take a unique value a kept one gave up.
            for h, (_, _, _, kept, _) in zip(held, outcomes, strict=True):
                self._insert_statements(h, kept, literal, special, self._upsert_clause(h),
                                        counted=counted)
            for h, (_, _, _, _, new) in zip(held, outcomes, strict=True):
                left = self._insert_statements(h, new, literal, special, "", copy=True,
                                               open_end=open_end and h is held[-1])
        finally:
            cursor.close()
        return left

    def _copy(self, held: _Collapsing, sql: str, names: tuple[int, ...],
              rows: list[Image], open_end: bool = False) -> LastCopy | None:
        """New rows of a table by ``sql`` (a COPY), after everything queued before them, in
        their round trip; ``open_end``: formatted only, returned."""
        from consumers.sql.pgwire import copy_data
        cursor = client_cursor(self.ctx.local, self.ctx.dialect)
        try:
            last = LastCopy(Queued(sql, len(rows), RowAction.INSERT, held.target, kind="copy",
                                   collapsed=True),
                            copy_data(cursor, rows, names))
        except self._driver_errors as exc:
            raise self._target_error(exc, sql, f"copy into {held.target.qualified}",
                                     collapsed=True) from exc
        finally:
            cursor.close()
        if open_end:
            return last
        self.send(last)
        return None

    def _keys_statements(self, held: _Collapsing, verb: str, keys: list[Key],
                         literal: Literal, kind: str, all_match: bool) -> None:
        """``verb`` on the rows of ``keys`` (IN lists of ``_IN_KEYS``), each checked to
        match every key (``all_match``) or none."""
        if not keys:
            return
        target = held.target
        prep = self.ctx.local.dialect.identifier_preparer
        names = [prep.format_column(target.table.c[k]) for k in held.key]
        head = f"{verb} {prep.format_table(target.table)} WHERE " + (
            names[0] if len(names) == 1 else "(" + ", ".join(names) + ")") + " IN ("
        for start in range(0, len(keys), _IN_KEYS):
            chunk = keys[start:start + _IN_KEYS]
            values = ",".join(literal(k[0]) for k in chunk) if len(names) == 1 else \
                ",".join("(" + ",".join(literal(v) for v in k) + ")" for k in chunk)
            self.enqueue(Queued(head + values + ")", len(chunk) if all_match else 0,
                                RowAction.DELETE if kind == "rows" else None, target,
                                kind=kind, collapsed=True))

    def _upsert_clause(self, held: _Collapsing) -> str:
        """What turns a multi-row INSERT into an upsert on the primary key; on MySQL-family
        targets each row found there adds one to ``@trep_found``."""
        target = held.target
        prep = self.ctx.local.dialect.identifier_preparer
        key = [prep.format_column(target.table.c[k]) for k in held.key]
        rest = [prep.format_column(target.table.c[c.name]) for c in held.columns
                if c.name not in target.generated and c.name not in held.key]
        if self.ctx.dialect == "postgresql":
            conflict = " ON CONFLICT (" + ", ".join(key) + ")"
            return conflict + (" DO UPDATE SET " + ", ".join(f"{n} = EXCLUDED.{n}" for n in rest)
                               if rest else " DO NOTHING")
        # Matches any unique key: only tables whose one unique key is the primary key are
        # collapsed on MySQL-family targets (``TargetTables.collapsible``).
        # The server evaluates an ON DUPLICATE KEY UPDATE's values once per row it found,
        # and a user variable's assignment is an expression: the upsert counts the rows
        # that were there itself, where a SELECT COUNT(*) of the same keys before it cost
        # the server about 4.5 us a key (another B-tree descent each). IF(c, x, x) is x, of
        # x's type.
        first, *others = rest or key
        return (f" ON DUPLICATE KEY UPDATE {first} = IF((@trep_found := @trep_found + 1) > 0, "
                f"VALUES({first}), VALUES({first}))"
                + "".join(f", {n} = VALUES({n})" for n in others))

    def _insert_statements(self, held: _Collapsing, rows: list[Image], literal: Literal,
                           special: str | None, clause: str, copy: bool = False,
                           open_end: bool = False, counted: bool = False
                           ) -> LastCopy | None:
        """Multi-row INSERTs of ``rows`` (after images, with ``clause``; ``literal`` and
        ``special`` from ``render.literals``) queued; ``copy``:
        by COPY where the target takes it (PostgreSQL, ``COPY_ROWS`` rows or more, plain
        VALUES), only formatted and returned where ``open_end``; ``counted`` (a MySQL-family
        ``_upsert_clause``): each statement must find all its rows there."""
        if not rows:
            return None
        rendering = self._rendering(Batch(held.target, RowAction.INSERT, held.columns,
                                          held.columns, []))
        if rendering.around is None or rendering.images is None:
            raise RuntimeError("an INSERT rendered as one statement per row")
        if copy and rendering.copy is not None and len(rows) >= COPY_ROWS:
            return self._copy(held, rendering.copy, rendering.images.names, rows, open_end)
        prefix, postfix = rendering.around
        for sql, n in rendering.images.render_statements(
                rows, literal, special, rendering.hexed, _STATEMENT_BYTES, prefix,
                postfix + clause):
            if counted:
                self.enqueue(Queued(_FOUND_RESET, 0, None, held.target, collapsed=True))
            self.enqueue(Queued(sql, 0, RowAction.INSERT, held.target, collapsed=True))
            if counted:
                self.enqueue(Queued(_FOUND_READ, n, None, held.target, kind="count",
                                    collapsed=True))
        return None

    def execute(self, batch: Batch, check: bool = True) -> None:
        """One executemany; ``check``: an UPDATE or DELETE must match every row."""
        if self.multi and not _holds_large_value(batch.columns, batch.keys, batch.params):
            self._queue(batch, check)
            return
        if self.multi:
            # A value of many MiB is not rendered into the round trip's text (escaped,
            # joined, encoded: several copies of it): what is queued goes first, in order.
            self.send()
            if self.ctx.dialect != "postgresql":
                self._execute_bytes(batch, check)
                return
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
            raise self._diverged(f"{batch.action.value} of {batch.target.qualified}",
                                 result.rowcount, len(batch.params))

    def _execute_bytes(self, batch: Batch, check: bool) -> None:
        """A batch holding a value of many MiB on MySQL/MariaDB: one statement per row,
        written as bytes (``render.mysql_literal_parts``): a 64 MiB value grows the group by
        277-286 MiB, against 408-424 MiB when PyMySQL bound it (through a str of
        surrogates, two bytes a byte, formatted and encoded again)."""
        rendering = self._rendering(batch)
        around = rendering.around or ("", "")
        cursor = client_cursor(self.ctx.db, self.ctx.dialect)
        encoding: str = cursor.connection.encoding
        parts = mysql_literal_parts(cursor)
        doing = f"{batch.action.value} into {batch.target.qualified}"
        try:
            for params in batch.params:
                sql = render_bytes(rendering.row, params, parts, encoding, around)
                try:
                    cursor.execute(sql)
                except pymysql.MySQLError as exc:
                    raise self._target_error(exc, around[0] + rendering.row.pieces[0], doing,
                                             False) from exc
                del sql  # not alive while the next row's statement is written
                if check and batch.action is not RowAction.INSERT and \
                        cursor.rowcount not in (-1, 1):
                    raise self._diverged(f"{batch.action.value} of {batch.target.qualified}",
                                         cursor.rowcount, 1)
        finally:
            cursor.close()

    def _rendering(self, batch: Batch) -> _Rendering:
        """How a batch layout's rows become text (compiled once per layout)."""
        layout = batch.layout()
        found = self._texts.get(layout)
        if found is None:
            stmt = statement_for(self.builder, batch.target, batch.action, batch.columns,
                                 batch.keys)
            compiled = stmt.compile(dialect=self.ctx.local.dialect)
            sql = compiled.string
            order = tuple(compiled.positiontup or ()) if compiled.positional else None
            if batch.action is RowAction.INSERT:
                match = RE_INSERT_VALUES.match(sql)
                if match is None:
                    raise RuntimeError(f"not a VALUES insert: {sql}")
                row = Template(match.group(2).rstrip(), order)
                head, tail = match.group(1) % (), match.group(3) or ""
                into = _INSERT_HEAD.fullmatch(head)
                plain = row.form == "(" + ", ".join(["%s"] * len(row.names)) + ")"
                copy = f"COPY {into.group(1)} FROM STDIN" if self.ctx.dialect == \
                    "postgresql" and into is not None and plain and not tail else None
                images = row.by_position(lambda name: int(name[1:]))
                utf8 = batch.target.utf8_text
                hexed = tuple(utf8.get(batch.columns[at].name, 0) for at in images.names)
                found = _Rendering(row, (head, tail), copy, images,
                                   hexed if any(hexed) else None)
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
        cursor = client_cursor(self.ctx.local, self.ctx.dialect)
        try:
            literal, _ = literals(cursor, self.ctx.dialect)
            rendering = self._rendering(batch)
            row = rendering.row
            if rendering.around is None:
                for params in batch.params:
                    self.enqueue(Queued(row.render(params, literal), 1 if check else 0,
                                        batch.action, batch.target))
                return
            prefix, postfix = rendering.around
            for text, _ in joined(row.render_all(batch.params, literal), _STATEMENT_BYTES):
                self.enqueue(Queued(prefix + text + postfix, 0, batch.action, batch.target))
        finally:
            cursor.close()

    def enqueue(self, queued: Queued) -> None:
        """A rendered statement for the next round trip (which goes first if it is full)."""
        if self.queued and self.queued_bytes + len(queued.sql) > self.round_trip_bytes:
            self.send()
        self.queued.append(queued)
        self.queued_bytes += len(queued.sql) + 1

    def send(self, last: LastCopy | None = None) -> None:
        """The queued statements (then ``last``) in one round trip; each one's matched rows
        checked."""
        sent = self.transmit(last)
        if sent is not None:
            self.answers(sent)

    def transmit(self, last: LastCopy | None = None, lead_commit: bool = False
                 ) -> InFlight | None:
        """The queued statements (then ``last``, on PostgreSQL) sent in one round trip, their
        answers not read yet. Nothing else may use the connection until ``answers`` has
        read them; on PostgreSQL ``InFlight.step`` may move them on before. ``lead_commit``:
        a COMMIT of the transaction before goes first."""
        queued, self.queued, self.queued_bytes = self.queued, [], 0
        if not queued and last is None:
            if lead_commit:
                raise RuntimeError("a leading COMMIT without statements to carry it")
            return None
        if self.ctx.dialect == "postgresql":
            from consumers.sql.pgwire import OpenTrip
            raw = self.ctx.db.connection.dbapi_connection
            text = ";\n".join(q.sql for q in queued) if queued else None
            trip = OpenTrip(cast("psycopg.Connection[Any]", raw), text,
                            None if last is None else (last.queued.sql, last.data),
                            lead_commit=lead_commit)
            return InFlight(None, queued, self._positions.expected, self.seqno, trip=trip,
                            copy=None if last is None else last.queued,
                            lead_commit=lead_commit)
        if last is not None:
            raise RuntimeError("a COPY for a target that has none")
        cursor = client_cursor(self.ctx.db, self.ctx.dialect)
        sent = InFlight(cursor, queued, self._positions.expected, self.seqno,
                        lead_commit=lead_commit)
        try:
            send_query(cursor, [q.sql for q in queued], "COMMIT;\n" if lead_commit else "")
        except pymysql.MySQLError as exc:
            cursor.close()
            self._fail(sent, exc)
        return sent

    def answers(self, sent: InFlight) -> None:
        """Read and check the answers of ``transmit``'s round trip."""
        queued = sent.queued
        trip = sent.trip
        if trip is not None:
            trip.step(wait=True)
        if sent.lead_commit and not sent.lead_answered:
            self._lead_answer(sent)
        if trip is not None:
            if trip.error is not None:
                self._fail(sent, trip.error, sent.copy if not queued else None)
            cursor: Any = trip.answers()
        else:
            cursor = sent.cursor
        if queued:
            self._statement_answers(sent, cursor)
        if trip is not None and sent.copy is not None:
            at = sent.copy
            try:
                copied = trip.copy_outcome()
            except self._driver_errors as exc:
                raise self._target_error(exc, at.sql, at.doing(), True, sent.seqno) from exc
            if copied not in (None, at.rows):
                raise self._refused(f"{at.doing()} took {copied} of {at.rows} row(s)",
                                    sent.seqno)

    def _lead_answer(self, sent: InFlight) -> None:
        """The answer of the COMMIT leading ``sent`` (its error raised)."""
        try:
            if sent.trip is not None:
                sent.lead_answered = sent.trip.commit_outcome()
                return
            read_first_answer(sent.cursor)
            sent.lead_answered = True
        except self._driver_errors as exc:
            # The server stopped there: the block before is not committed, nothing of
            # this one ran.
            if sent.cursor is not None:
                sent.cursor.close()
            raise self._target_error(exc, "COMMIT", "committing the block before",
                                     False) from exc

    def _statement_answers(self, sent: InFlight, cursor: Any) -> None:
        """Check the answers of the queued statements of a round trip, read by ``cursor``
        (PyMySQL's, or the results of an ``OpenTrip``)."""
        queued = sent.queued
        at = queued[0]
        mismatch: tuple[Queued, int] | None = None
        moved: PositionMoved | None = None
        position_missed = False
        try:
            if sent.trip is not None:
                cursor.first()
            elif not sent.answered:
                if sent.lead_answered:
                    if not cursor.nextset():
                        raise RuntimeError("a round trip's statements gave no answer after "
                                           "its COMMIT")
                else:
                    read_first_answer(cursor)
                sent.answered = True
            for i, at in enumerate(queued):
                if i and not cursor.nextset():
                    raise RuntimeError(f"{len(queued)} statements sent, {i} results read")
                if at.kind == "lock":
                    found = cursor.fetchone()
                    stored = None if found is None else found[0]
                    if stored != sent.expected:
                        moved = PositionMoved(sent.expected, stored)
                elif at.kind == "position":
                    position_missed = cursor.rowcount != 1
                elif at.kind == "count":
                    found = cursor.fetchone()
                    count = 0 if found is None else int(found[0])
                    if count != at.rows and mismatch is None:
                        mismatch = (at, count)
                elif at.rows and cursor.rowcount != at.rows and mismatch is None:
                    mismatch = (at, cursor.rowcount)
        except self._driver_errors as exc:
            if moved is not None:
                # The position moved first: whatever failed after it is the other
                # writer's doing.
                self._rollback()
                raise self._positions.conflict(moved) from exc
            self._fail(sent, exc, at)
        finally:
            cursor.close()
        if moved is None and position_missed:
            positions = self._positions
            moved = PositionMoved(sent.expected,
                                  positions.tracking.stored(self.ctx.db, positions.task_id))
        if moved is not None:
            self._rollback()
            raise self._positions.conflict(moved)
        if mismatch is not None:
            at, count = mismatch
            if at.collapsed:
                raise self._refused(f"{at.doing('of')} matched {count} of {at.rows} row(s)",
                                    sent.seqno)
            raise self._diverged(at.doing("of"), count, at.rows)

    def _diverged(self, doing: str, matched: int, rows: int) -> DataError:
        """An UPDATE or DELETE that matched another number of rows than it addressed."""
        return DataError(f"{doing} on {self.ctx.target} matched {matched} of {rows} row(s): "
                         "the target has diverged from the source")

    def _fail(self, sent: InFlight, exc: DriverError,
              at: Queued | None = None) -> NoReturn:
        """Raise the consumer's error for a round trip the server refused at ``at`` (its
        first statement if not known)."""
        at = at or sent.queued[0]
        collapsed = any(q.collapsed for q in sent.queued) or sent.copy is not None
        raise self._target_error(exc, at.sql, at.doing(), collapsed, sent.seqno) from exc

    def _target_error(self, exc: DriverError, sql: str, doing: str,
                      collapsed: bool, seqno: int | None = None) -> Exception:
        """The consumer error of a driver error while ``doing`` ``sql``: a set-based
        refusal where the target refused collapsed changes as data."""
        dbapi = self.ctx.db.dialect.loaded_dbapi
        wrapped = sa_exc.DBAPIError.instance(sql[:200], None, exc, dbapi.Error)
        if not isinstance(wrapped, sa_exc.DBAPIError):
            return wrapped
        error = self.ctx.classify(wrapped, doing)
        if collapsed and isinstance(error, DataError):
            return self._refused(str(error), seqno)
        return error

    def _refused(self, why: str, seqno: int | None = None) -> SetRefused:
        """The block up to ``seqno`` (default: the open block so far) goes again, in
        order."""
        seqno = self.seqno if seqno is None else seqno
        self.ordered_through = max(self.ordered_through, seqno)
        self.refused += 1
        return SetRefused(f"{self.ctx.target}: set-based apply of the block up to seqno "
                          f"{seqno} refused ({why}); applying it again in order",
                          seqno=seqno)

    def forget(self) -> None:
        """Compiled statements and their texts go with the tables they were made for."""
        self._stmts.clear()
        self._texts.clear()

    def drop(self) -> None:
        """What the block held and did not send is given up (a rollback)."""
        self.batch = None
        self.collapsed = {}
        self.collapsed_rows = 0
        self.queued, self.queued_bytes = [], 0


def _holds_large_value(columns: list[ColumnSpec], keys: list[ColumnSpec],
                       rows: list[dict[str, object]]) -> bool:
    """True if one of ``rows`` has a value above LARGE_VALUE_BYTES (only tables with a
    BLOB, TEXT or JSON column are looked into: other columns hold 64 KiB at most)."""
    if not any(c.blob or c.type.upper() == "JSON" for c in (*columns, *keys)):
        return False
    return _large_value(params.values() for params in rows)


def _large_value(rows: Iterable[Iterable[object]]) -> bool:
    """True if one of ``rows`` (images, keys) has a value above LARGE_VALUE_BYTES."""
    for values in rows:
        for value in values:
            if isinstance(value, (bytes, str)) and len(value) > LARGE_VALUE_BYTES:
                return True
    return False
