"""A block's last round trips on PostgreSQL left open: libpq's asynchronous calls.

psycopg answers every command before it returns, and a COPY cannot share a round trip with
anything else, so a set-based block takes two round trips (its text: the lock, the
position, counts, deletes, upserts; then the COPY of its new rows) in which the client
would wait for the server. ``OpenTrip`` sends them through libpq's asynchronous calls
(psycopg's public ``pq`` layer): the text goes at once, and each later step (the COPY's
start, its rows, its end) is taken when the server has answered the one before, by
``step`` without waiting while the client works on the next block, or waiting when the
answers are needed. Nothing else may use the connection until a waiting ``step`` returned.
The block before's COMMIT (and the BEGIN of the block's own transaction) may lead the text:
the server runs nothing after a statement that fails in a simple query.
"""

from __future__ import annotations

import codecs
import enum
import select
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq.abc import PGconn, PGresult

from consumers.sql._render_rows import copy_text


class _Stage(enum.Enum):
    TEXT = "text"
    COPY_START = "copy start"
    COPY_END = "copy end"
    DONE = "done"


class OpenTrip:
    """A text of statements and, if it succeeds, one COPY, sent unanswered."""

    def __init__(self, connection: psycopg.Connection[Any], text: str | None,
                 copy: tuple[str, bytes] | None, lead_commit: bool = False) -> None:
        """``connection``: idle in its transaction; ``text``: statements joined by ``;``
        (None: the COPY alone); ``copy``: the COPY's statement and its rows
        (``copy_data``); ``lead_commit``: the transaction open on ``connection`` is
        committed first, and the text runs in a new one (the server runs nothing of it if
        the COMMIT fails)."""
        self._pgconn: PGconn = connection.pgconn
        self._encoding = connection.info.encoding
        self._copy = copy
        self._leads = lead_commit
        #: The leading COMMIT's result, once answered.
        self.lead: PGresult | None = None
        #: The text's results, one a statement up to the first that failed.
        self.results: list[PGresult] = []
        #: The COPY's results (its one, once answered; none if it was not sent).
        self._copied: list[PGresult] = []
        #: What broke the connection itself (None: the server answered everything).
        self.error: psycopg.Error | None = None
        # The transaction psycopg would begin before the first statement (libpq's calls
        # bypass it): its answer is taken off the text's results.
        begin = "COMMIT;\n" + _begin_statement(connection) if lead_commit else \
            _begin(connection)
        self._begun = begin is not None
        if begin is not None:
            text = begin if text is None else begin + ";\n" + text
        self._stage = _Stage.TEXT if text is not None else _Stage.COPY_START
        try:
            self._pgconn.send_query((text if text is not None else copy[0] if copy else ""
                                     ).encode(self._encoding))
            self._flush()
        except psycopg.Error as exc:
            self._failed(exc)

    @property
    def done(self) -> bool:
        """Every step taken: answers in (or an error kept)."""
        return self._stage is _Stage.DONE

    def step(self, wait: bool) -> None:
        """Take every step the server's answers allow (``wait``: until the last)."""
        try:
            while self._stage is not _Stage.DONE:
                if self._stage is _Stage.TEXT:
                    if not self._collect(self.results, wait):
                        return
                    if self._begun and self.results and \
                            self.results[0].status == pq.ExecStatus.COMMAND_OK:
                        del self.results[0]
                    if self._copy is None or self._refused():
                        self._stage = _Stage.DONE
                    else:
                        self._pgconn.send_query(self._copy[0].encode(self._encoding))
                        self._flush()
                        self._stage = _Stage.COPY_START
                elif self._stage is _Stage.COPY_START:
                    if not self._ready(wait):
                        return
                    started = self._pgconn.get_result()
                    if started is not None and started.status == pq.ExecStatus.COPY_IN:
                        self._put(self._copy[1] if self._copy else b"")
                    elif started is not None:
                        self._copied.append(started)  # refused at its start
                    self._stage = _Stage.COPY_END
                else:
                    if not self._collect(self._copied, wait):
                        return
                    self._stage = _Stage.DONE
        except psycopg.Error as exc:
            self._failed(exc)

    def _refused(self) -> bool:
        """The server refused a statement of the text, or its leading COMMIT."""
        return any(r.status == pq.ExecStatus.FATAL_ERROR for r in self.results) or \
            (self.lead is not None and self.lead.status != pq.ExecStatus.COMMAND_OK)

    def _failed(self, exc: psycopg.Error) -> None:
        self.error = exc
        self._stage = _Stage.DONE

    def _ready(self, wait: bool) -> bool:
        """The server's next answer is in (``wait``: waited for); False if not yet."""
        self._pgconn.consume_input()
        while self._pgconn.is_busy():
            if not wait:
                return False
            _wait(self._pgconn, write=False)
            self._pgconn.consume_input()
        return True

    def _collect(self, into: list[PGresult], wait: bool) -> bool:
        """The command's results into ``into`` as they come; True once libpq has no more."""
        while self._ready(wait):
            result = self._pgconn.get_result()
            if result is None:
                return True
            if self._leads and self.lead is None and into is self.results:
                self.lead = result  # the COMMIT's: kept apart as soon as it is in
            else:
                into.append(result)
        return False

    def _put(self, data: bytes) -> None:
        """The COPY's rows and its end (the connection is non-blocking: libpq may take
        them in steps)."""
        for start in range(0, len(data), _COPY_CHUNK):
            chunk = data[start:start + _COPY_CHUNK]  # the whole of it: no copy
            while not self._pgconn.put_copy_data(chunk):
                _wait(self._pgconn, write=True)
        while not self._pgconn.put_copy_end():
            _wait(self._pgconn, write=True)
        self._flush()

    def _flush(self) -> None:
        while self._pgconn.flush():
            _wait(self._pgconn, write=True)

    def commit_outcome(self) -> bool:
        """The leading COMMIT's: True once it committed, False if its answer never came
        (the connection broke before); its error raised."""
        lead = self.lead
        if lead is None:
            return False
        if lead.status != pq.ExecStatus.COMMAND_OK:
            raise result_error(lead, self._encoding)
        if lead.command_status != b"COMMIT":
            # A COMMIT of a transaction that failed is answered ROLLBACK, without an error.
            raise psycopg.errors.InFailedSqlTransaction(
                f"COMMIT answered {(lead.command_status or b'').decode('ascii', 'replace')}")
        return True

    def answers(self) -> Answers:
        """The text's results, read as a cursor reads several."""
        return Answers(self.results, self._encoding)

    def copy_outcome(self) -> int | None:
        """The rows the COPY took (None if the server did not say); its error raised."""
        if not self._copied:
            return None
        copied = self._copied[0]
        if copied.status != pq.ExecStatus.COMMAND_OK:
            raise result_error(copied, self._encoding)
        return copied.command_tuples


#: Bytes of COPY data handed to libpq at a time.
_COPY_CHUNK = 1 << 20


class Answers:
    """The results of a text of several statements, read as a cursor reads them
    (``nextset``, ``rowcount``, ``fetchone``): a statement's error raised when its
    result is reached. The values read are integers (positions and counts)."""

    def __init__(self, results: Sequence[PGresult], encoding: str) -> None:
        self._results = results
        self._encoding = encoding
        self._at = 0

    def first(self) -> None:
        """The first statement's result (its error raised)."""
        self._check()

    def nextset(self) -> bool:
        self._at += 1
        if self._at >= len(self._results):
            return False
        self._check()
        return True

    @property
    def rowcount(self) -> int:
        tuples = self._results[self._at].command_tuples
        return -1 if tuples is None else tuples

    def fetchone(self) -> tuple[int | None, ...] | None:
        result = self._results[self._at]
        if result.ntuples == 0:
            return None
        return tuple(None if (v := result.get_value(0, i)) is None else int(v)
                     for i in range(result.nfields))

    def close(self) -> None:
        pass

    def _check(self) -> None:
        if self._at >= len(self._results):
            raise psycopg.InterfaceError("no result for a statement sent")
        result = self._results[self._at]
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise result_error(result, self._encoding)


def copy_data(cursor: Any, rows: Sequence[Sequence[object]], index: tuple[int, ...]) -> bytes:
    """``rows`` (their values at ``index``) as a text-format COPY's data, as
    psycopg's ``Copy.write_row`` writes them with ``cursor``'s adapters (no round trip).
    NULLs, integers and UTF-8 strings are written by compiled code (``_render_rows.
    copy_text``: 0.25 against psycopg's 0.58 us a row of bench-compare's table); every
    other value by psycopg's text dumper for its type."""
    transformer = Transformer(cursor)
    get_dumper = transformer.get_dumper

    def dump(value: object) -> Buffer | None:
        return get_dumper(value, PyFormat.TEXT).dump(value)

    utf8 = codecs.lookup(cursor.connection.info.encoding).name == "utf-8"
    return copy_text(rows, index, dump, utf8)


def result_error(result: PGresult, encoding: str) -> psycopg.Error:
    """The psycopg error of a failed result, as psycopg makes it: the class of its
    SQLSTATE, its message, its diagnostics."""
    state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode("ascii", "replace")
    try:
        kind = errors.lookup(state)
    except KeyError:
        kind = psycopg.DatabaseError
    return kind(pq.error_message(result, encoding), info=result, encoding=encoding)


def _begin(connection: psycopg.Connection[Any]) -> str | None:
    """The statement psycopg would begin a transaction with on ``connection`` now (None:
    in one already, or autocommit)."""
    if connection.autocommit or \
            connection.pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return None
    return _begin_statement(connection)


def _begin_statement(connection: psycopg.Connection[Any]) -> str:
    """The statement psycopg begins a transaction with on ``connection``."""
    parts = ["BEGIN"]
    if connection.isolation_level is not None:
        parts.append("ISOLATION LEVEL " + connection.isolation_level.name.replace("_", " "))
    if connection.read_only is not None:
        parts.append("READ ONLY" if connection.read_only else "READ WRITE")
    if connection.deferrable is not None:
        parts.append("DEFERRABLE" if connection.deferrable else "NOT DEFERRABLE")
    return " ".join(parts)


def _wait(pgconn: PGconn, write: bool) -> None:
    """Until ``pgconn``'s socket is writable (``write``) or readable."""
    sockets = [pgconn.socket]
    select.select([] if write else sockets, sockets if write else [], [])
