"""How MongoDB target errors map to the consumer's kinds: transient (retry), data or terminal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from bson.errors import InvalidDocument
from pymongo.errors import (
    ConfigurationError,
    ConnectionFailure,
    DocumentTooLarge,
    OperationFailure,
    PyMongoError,
    WTimeoutError,
)

from consumers.errors import ConsumerError, DataError, TerminalError, TransientError

_T = TypeVar("_T")

#: Duplicate key: for a guarded write, "the document is already at this seqno or newer".
DUPLICATE_KEY = 11000
#: Server codes that say "not now" (failover, shutdown, network, write concern, conflicts).
TRANSIENT_CODES = frozenset({
    6, 7, 89, 91, 112, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 64, 50, 251,
})
#: Server codes that no retry or skip fixes: credentials and rights.
TERMINAL_CODES = frozenset({13, 18})


def error_text(reply: dict[str, Any] | Any) -> str:
    """The server's message of a write error or a failed command, on one line."""
    if isinstance(reply, dict):
        text = str(reply.get("errmsg") or reply)
        code = reply.get("code")
    else:
        text, code = str(reply), getattr(reply, "code", None)
    line = " ".join(text.split())[:300]
    return f"{line} (code {code})" if code is not None else line


def classify(exc: PyMongoError | InvalidDocument, target: str, doing: str, seqno: int = -1,
             event_id: str = "") -> ConsumerError:
    """A pymongo error as the consumer error it is."""
    message = f"{target}: {doing}: {type(exc).__name__}: {error_text(exc)}"
    if isinstance(exc, InvalidDocument):
        return DataError(message, seqno=seqno, event_id=event_id)
    if isinstance(exc, (ConnectionFailure, WTimeoutError)) or exc.has_error_label(
            "RetryableWriteError") or exc.has_error_label("TransientTransactionError"):
        return TransientError(message, seqno=seqno, event_id=event_id)
    if isinstance(exc, OperationFailure):
        if exc.code in TRANSIENT_CODES:
            return TransientError(message, seqno=seqno, event_id=event_id)
        if exc.code in TERMINAL_CODES:
            return TerminalError(message + "; check the target's user and its rights",
                                 seqno=seqno, event_id=event_id)
        return DataError(message, seqno=seqno, event_id=event_id)
    if isinstance(exc, DocumentTooLarge):
        return DataError(message, seqno=seqno, event_id=event_id)
    if isinstance(exc, ConfigurationError):
        return TerminalError(message, seqno=seqno, event_id=event_id)
    return TransientError(message, seqno=seqno, event_id=event_id)


def classified(call: Callable[[], _T], target: str, doing: str, seqno: int = -1,
               event_id: str = "") -> _T:
    """``call()`` with a pymongo error as the consumer error it is."""
    try:
        return call()
    except PyMongoError as exc:
        raise classify(exc, target, doing, seqno, event_id) from exc


class Located(Protocol):
    """What a data error is located by: an event, a write, a keyless change."""

    @property
    def seqno(self) -> int: ...

    @property
    def event_id(self) -> str: ...


def data_error(target: str, at: Located, table: str, column: str | None, why: str
               ) -> DataError:
    """A row of ``table`` (a ``column`` of it) that cannot be written, and why."""
    where = f"seqno {at.seqno} (event {at.event_id}), table {table}"
    if column is not None:
        where += f", column {column}"
    return DataError(f"{target}: {where}: {why}", seqno=at.seqno, event_id=at.event_id)
