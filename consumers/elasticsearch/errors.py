"""How Elasticsearch answers map to the consumer's kinds: per bulk item, and per request.

A bulk item (one document write) is:

- ``OK``: written (2xx), or a delete of a document that is not there (404 ``not_found``);
- ``ALREADY_APPLIED``: 409 ``version_conflict_engine_exception`` on a write carrying the
  seqno as its external version: the document already holds this seqno or a later one;
- ``CONFLICT``: 409 on a compare-and-set write (``if_seq_no`` or ``create``): someone else
  wrote the document since it was read;
- ``RETRY``: 429 (rejected: queue full, circuit breaker) and 5xx (503 unavailable shards):
  the node is overloaded or recovering; the item is sent again with backoff;
- ``MISSING_INDEX``: 404 on a write: the index disappeared under the applier;
- ``REFUSED``: any other 4xx: the server refuses the document (mapping or parsing errors):
  a data error at that item's seqno.

A whole request failing: connection trouble, timeouts, 429 and 5xx are transient (the
runtime retries from the stored position); 401/403 are terminal (fix the credentials); other
4xx are data errors.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from elasticsearch import ApiError, TransportError

from consumers.errors import ConsumerError, DataError, TerminalError, TransientError


class Outcome(Enum):
    """What one bulk item's answer means for the applier."""

    OK = "ok"
    ALREADY_APPLIED = "already-applied"
    CONFLICT = "conflict"
    RETRY = "retry"
    MISSING_INDEX = "missing-index"
    REFUSED = "refused"


def classify_item(action: str, result: dict[str, Any], versioned: bool) -> Outcome:
    """The outcome of one bulk item (``action``: index, create, delete; ``result``: the
    item's answer; ``versioned``: the write carried an external version)."""
    status = int(result.get("status", 0))
    if 200 <= status < 300:
        return Outcome.OK
    kind = error_type(result)
    if status == 404 and action == "delete" and "error" not in result:
        return Outcome.OK
    if status == 409 and kind == "version_conflict_engine_exception":
        return Outcome.ALREADY_APPLIED if versioned else Outcome.CONFLICT
    if status == 429 or status >= 500:
        return Outcome.RETRY
    if status == 404 or kind == "index_not_found_exception":
        return Outcome.MISSING_INDEX
    return Outcome.REFUSED


def error_type(result: dict[str, Any]) -> str:
    """The ``error.type`` of a bulk item's answer ('' if none)."""
    error = result.get("error")
    return str(error.get("type", "")) if isinstance(error, dict) else ""


def error_kind(exc: ApiError) -> str:
    """The ``error.type`` of a failed request ('' if none)."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("type", ""))
    return ""


def reason(result: dict[str, Any]) -> str:
    """The error of a bulk item (or of an error body) in one line: type, reason, cause."""
    error = result.get("error", result)
    if not isinstance(error, dict):
        return str(error)
    text = f"{error.get('type', 'error')}: {error.get('reason', '')}".strip()
    cause = error.get("caused_by")
    if isinstance(cause, dict) and cause.get("reason"):
        text += f" (caused by {cause.get('type', '')}: {cause['reason']})"
    return text


_FIELD = re.compile(r"(?:field|introduction of|for field) \[([^\]]+)\]")


def refused_column(result: dict[str, Any]) -> str | None:
    """The field (source column) a refusal names, if it names one."""
    found = _FIELD.search(reason(result))
    return found.group(1) if found else None


_PRESSURE = re.compile(r"coordinating_operation_bytes=(\d+), max_coordinating_bytes=(\d+)")


def size_limit(exc: Exception) -> tuple[int, str] | None:
    """The server's limit (bytes, and the setting behind it) when it refused a request for
    its size alone, which sending it again cannot change; None for any other failure."""
    if not isinstance(exc, ApiError):
        return None
    body = exc.body if isinstance(exc.body, dict) else {"error": str(exc.body)}
    if exc.status_code == 413:
        return 100 * 1024 * 1024, "http.max_content_length (100mb by default)"
    if exc.status_code == 429:
        found = _PRESSURE.search(reason(body))
        if found is not None and int(found.group(1)) > int(found.group(2)):
            return int(found.group(2)), ("indexing_pressure.memory.limit (10% of the heap by "
                                         "default)")
    return None


def request_error(exc: Exception, target: str, doing: str, seqno: int = -1) -> ConsumerError:
    """A failed request as the consumer's error kind."""
    if isinstance(exc, ApiError):
        status = exc.status_code
        body = exc.body if isinstance(exc.body, dict) else {"error": str(exc.body)}
        message = f"{target}: {doing}: HTTP {status} {reason(body)}"
        if status == 429 or status >= 500:
            return TransientError(message, seqno=seqno)
        if status in (401, 403):
            return TerminalError(f"{message}; check the target's credentials and the user's "
                                 "privileges", seqno=seqno)
        return DataError(message, seqno=seqno)
    if isinstance(exc, TransportError):
        return TransientError(f"{target}: {doing}: {type(exc).__name__}: {exc.message}",
                              seqno=seqno)
    return TransientError(f"{target}: {doing}: {type(exc).__name__}: {exc}", seqno=seqno)
