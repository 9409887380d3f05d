"""The pure parts of ``consumers.sql.pgwire``: results read as a cursor reads several, the
error of a failed result, and the BEGIN psycopg would send. The round trips themselves run
against PostgreSQL in tests/integration/consumers/test_overlapped_commits.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest
from psycopg import errors, pq

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
