"""The pure parts of ``consumers.sql.pgwire``: results read as a cursor reads several, the
error of a failed result, the BEGIN psycopg would send, and a COPY's data. The round trips
themselves run against PostgreSQL in tests/integration/consumers/test_overlapped_commits.py."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

import psycopg
import pytest
from psycopg import errors, pq
from psycopg._copy_base import format_row_text
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer

from consumers.sql._render_rows import copy_text
from consumers.sql.pgwire import Answers, _begin, result_error


@dataclass
class Result:
    """A libpq result as pgwire reads it."""

    status: int
    command_tuples: int | None = None
    values: list[bytes | None] = field(default_factory=list)
    state: bytes = b""
    message: str = ""

    @property
    def ntuples(self) -> int:
        return 1 if self.values else 0

    @property
    def nfields(self) -> int:
        return len(self.values)

    def get_value(self, row: int, column: int) -> bytes | None:
        return self.values[column]

    def error_field(self, code: pq.DiagnosticField) -> bytes | None:
        return self.state if code == pq.DiagnosticField.SQLSTATE else None

    def get_error_message(self, encoding: str = "utf-8") -> str:
        return self.message


def _answers(*results: Result) -> Answers:
    return Answers(cast(Any, results), "utf-8")


OK = pq.ExecStatus.COMMAND_OK
ROWS = pq.ExecStatus.TUPLES_OK
FAILED = pq.ExecStatus.FATAL_ERROR


def test_answers_read_each_statement_in_turn_as_a_cursor_does() -> None:
    answers = _answers(Result(ROWS, 1, [b"41"]), Result(OK, 3), Result(ROWS, 1, [None]),
                       Result(ROWS, 0))
    answers.first()
    assert answers.fetchone() == (41,)
    assert answers.nextset() and answers.rowcount == 3
    assert answers.nextset() and answers.fetchone() == (None,)
    assert answers.nextset() and answers.fetchone() is None
    assert not answers.nextset()


def test_a_failed_statement_raises_its_own_error_when_its_result_is_reached() -> None:
    failed = Result(FAILED, state=b"23505", message="duplicate key value")
    answers = _answers(Result(OK, 1), failed)
    answers.first()
    with pytest.raises(errors.UniqueViolation, match="duplicate key value"):
        answers.nextset()


def test_a_statement_without_a_result_is_an_error_not_a_silent_success() -> None:
    with pytest.raises(psycopg.InterfaceError, match="no result"):
        _answers().first()


def test_an_unknown_sqlstate_is_still_a_database_error() -> None:
    error = result_error(cast(Any, Result(FAILED, state=b"", message="gone")), "utf-8")
    assert isinstance(error, psycopg.DatabaseError) and "gone" in str(error)


@dataclass
class Conn:
    """The connection attributes that decide psycopg's BEGIN."""

    autocommit: bool = False
    isolation_level: psycopg.IsolationLevel | None = None
    read_only: bool | None = None
    deferrable: bool | None = None
    status: pq.TransactionStatus = pq.TransactionStatus.IDLE

    @property
    def pgconn(self) -> Any:
        return self

    @property
    def transaction_status(self) -> pq.TransactionStatus:
        return self.status


def _begun(conn: Conn) -> str | None:
    return _begin(cast(Any, conn))


def test_the_transaction_is_begun_as_psycopg_would_begin_it() -> None:
    assert _begun(Conn()) == "BEGIN"
    assert _begun(Conn(isolation_level=psycopg.IsolationLevel.REPEATABLE_READ, read_only=True,
                       deferrable=False)) == (
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY NOT DEFERRABLE")
    assert _begun(Conn(status=pq.TransactionStatus.INTRANS)) is None
    assert _begun(Conn(autocommit=True)) is None


def test_compiled_copy_data_equals_psycopgs_row_by_row() -> None:
    """Random rows of every kind of value (strings of 1- to 4-byte characters and every
    character COPY escapes, 70-bit integers, bool, Decimal, bytes, floats, dates, NULLs),
    all columns and some in another order, UTF-8 written here or every string left to
    psycopg's dumper: the same bytes as psycopg's ``format_row_text``."""
    rng = random.Random(3)
    alphabet = ["a", " ", "é", "字", "\U0001f600", "\\", "\t", "\n", "\r", "\b", "\v", "\f",
                "\x1a", "'", "\\N"]
    kinds: list[Callable[[], object]] = [
        lambda: None, lambda: rng.randint(-2**70, 2**70), lambda: True, lambda: False,
        lambda: Decimal("-1.50"), lambda: b"x\x00\\\n\xff", lambda: rng.random(),
        lambda: dt.datetime(2024, 1, 2, 3, 4, 5, 6), lambda: dt.date(2020, 2, 29),
        lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))]
    rows = [[rng.choice(kinds)() for _ in range(5)] for _ in range(3000)]
    tx = Transformer()

    def dump(value: object) -> Buffer | None:
        return tx.get_dumper(value, PyFormat.TEXT).dump(value)

    for index in ((0, 1, 2, 3, 4), (3, 0), ()):
        expected = bytearray()
        for row in rows:
            format_row_text([row[i] for i in index], tx, expected)
        for utf8 in (True, False):
            assert copy_text(rows, index, dump, utf8) == bytes(expected), (index, utf8)
    assert copy_text([], (0,), dump, True) == b""
    # A dumper that writes its value as NULL, and psycopg's own error for U+0000.
    assert copy_text([["x", 1]], (0, 1), lambda value: None, True) == b"x\t1\n"
    assert copy_text([[b"x", 1]], (0, 1), lambda value: None, True) == b"\\N\t1\n"
    with pytest.raises(psycopg.DataError, match="NUL"):
        copy_text([["a\x00b"]], (0,), dump, True)
