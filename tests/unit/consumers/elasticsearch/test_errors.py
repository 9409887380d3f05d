"""Bulk items and failed requests, classified: the answers are the server's own (8.19)."""

from __future__ import annotations

from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError, ConnectionError, ConnectionTimeout

from consumers.elasticsearch.errors import (
    Outcome,
    classify_item,
    reason,
    refused_column,
    request_error,
)
from consumers.errors import DataError, TerminalError, TransientError

CONFLICT = {"_index": "s.items", "_id": "1", "status": 409, "error": {
    "type": "version_conflict_engine_exception",
    "reason": "[1]: version conflict, current version [5] is higher or equal to the one "
              "provided [3]", "index_uuid": "b2XB", "shard": "0", "index": "s.items"}}
NOT_FOUND = {"_index": "s.items", "_id": "9", "_version": 3, "result": "not_found",
             "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": 5,
             "_primary_term": 1, "status": 404}
PARSING = {"_index": "s.items", "_id": "3", "status": 400, "error": {
    "type": "document_parsing_exception",
    "reason": "[1:6] failed to parse field [qty] of type [integer] in document with id '3'. "
              "Preview of field's value: 'many'",
    "caused_by": {"type": "illegal_argument_exception", "reason": 'For input string: "many"'}}}
STRICT = {"_index": "s.items", "_id": "3", "status": 400, "error": {
    "type": "strict_dynamic_mapping_exception",
    "reason": "[1:20] mapping set to strict, dynamic introduction of [extra] within [_doc] is "
              "not allowed"}}
REJECTED = {"_index": "s.items", "_id": "4", "status": 429, "error": {
    "type": "es_rejected_execution_exception",
    "reason": "rejected execution of coordinating operation"}}
UNAVAILABLE = {"_index": "s.items", "_id": "4", "status": 503, "error": {
    "type": "unavailable_shards_exception",
    "reason": "[s.items][0] primary shard is not active Timeout: [1m]"}}
NO_INDEX = {"_index": "s.items", "_id": "4", "status": 404, "error": {
    "type": "index_not_found_exception", "reason": "no such index [s.items]"}}


@pytest.mark.parametrize(("action", "result", "versioned", "outcome"), [
    ("index", {"status": 201, "result": "created"}, True, Outcome.OK),
    ("index", {"status": 200, "result": "updated"}, True, Outcome.OK),
    ("delete", {"status": 200, "result": "deleted"}, True, Outcome.OK),
    # Deleting a row whose document is not there (never written, or deleted already).
    ("delete", NOT_FOUND, True, Outcome.OK),
    # The seqno is the external version: a newer or equal one is there already.
    ("index", CONFLICT, True, Outcome.ALREADY_APPLIED),
    ("delete", CONFLICT, True, Outcome.ALREADY_APPLIED),
    # A compare-and-set write (if_seq_no, create) lost against another writer.
    ("index", CONFLICT, False, Outcome.CONFLICT),
    ("create", CONFLICT, False, Outcome.CONFLICT),
    ("index", REJECTED, True, Outcome.RETRY),
    ("index", UNAVAILABLE, True, Outcome.RETRY),
    ("index", PARSING, True, Outcome.REFUSED),
    ("index", STRICT, True, Outcome.REFUSED),
    ("index", NO_INDEX, True, Outcome.MISSING_INDEX),
    ("delete", NO_INDEX, True, Outcome.MISSING_INDEX),
])
def test_bulk_items(action: str, result: dict[str, Any], versioned: bool,
                    outcome: Outcome) -> None:
    assert classify_item(action, result, versioned) is outcome


def test_refusals_name_the_column() -> None:
    assert refused_column(PARSING) == "qty"
    assert refused_column(STRICT) == "extra"
    assert refused_column(REJECTED) is None
    assert reason(PARSING) == (
        "document_parsing_exception: [1:6] failed to parse field [qty] of type [integer] in "
        "document with id '3'. Preview of field's value: 'many' (caused by "
        'illegal_argument_exception: For input string: "many")')


def _api_error(status: int, kind: str) -> ApiError:
    meta = ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders(),
                           duration=0.0, node=NodeConfig("http", "127.0.0.1", 9200))
    return ApiError(kind, meta=meta, body={"error": {"type": kind, "reason": "why"},
                                           "status": status})


@pytest.mark.parametrize(("exc", "kind"), [
    (_api_error(503, "cluster_block_exception"), TransientError),
    (_api_error(429, "circuit_breaking_exception"), TransientError),
    (_api_error(500, "null_pointer_exception"), TransientError),
    (_api_error(401, "security_exception"), TerminalError),
    (_api_error(403, "security_exception"), TerminalError),
    (_api_error(400, "mapper_parsing_exception"), DataError),
    (ConnectionError("refused"), TransientError),
    (ConnectionTimeout("slow"), TransientError),
])
def test_failed_requests(exc: Exception, kind: type[Exception]) -> None:
    error = request_error(exc, "elasticsearch http://es:9200", "writing", seqno=7)
    assert type(error) is kind
    assert error.seqno == 7
    assert str(error).startswith("elasticsearch http://es:9200: writing: ")
    if isinstance(exc, ApiError):
        assert f"HTTP {exc.status_code}" in str(error)
