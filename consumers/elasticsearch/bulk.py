"""Bulk requests: a block's document writes, sent in requests of ``bulk_max_bytes`` at most.

Requests go one at a time. Each item's answer is an outcome (``errors.classify_item``):
written or already applied, sent again with backoff (overload, ``bulk_retries`` times at
most), refused (a data error at its seqno), or a sign that the index went away or that a
document changed between its read and its write (the block is applied again). A request
refused for its size alone is split in two; a single document that no request can hold is a
data error naming its largest column.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elasticsearch import ApiError, TransportError

from consumers.elasticsearch.context import TargetContext
from consumers.elasticsearch.errors import (
    Outcome,
    classify_item,
    reason,
    refused_column,
    request_error,
    size_limit,
)
from consumers.elasticsearch.indices import TableIndex
from consumers.errors import DataError, TransientError
from consumers.oversize import largest, mib, too_large

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.elasticsearch.applier")

#: Only what classification needs comes back from a bulk request.
BULK_FILTER = "errors,items.*.status,items.*.error"


@dataclass(slots=True)
class Write:
    """One document write of the open block (the last one for its document)."""

    lines: bytes
    seqno: int
    table: TableIndex
    doc_id: str
    action: str
    #: Carries the seqno as external version (409 = already applied).
    versioned: bool = True


class _TooLarge(Exception):
    """A bulk request refused for its size alone (the limit in bytes, the setting)."""

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(f"refused above {limit} bytes ({setting})")
        self.limit = limit
        self.setting = setting


class BulkSender:
    """Sends document writes to one cluster in bulk requests."""

    def __init__(self, ctx: TargetContext, forget: Callable[[TableIndex], None]) -> None:
        self.ctx = ctx
        #: Called with a table whose index went away: it is opened (created) again.
        self._forget = forget

    def send(self, writes: list[Write]) -> None:
        """Bulk requests of ``bulk_max_bytes`` at most, one at a time; overloaded items
        again with backoff; a refused item is a data error at its seqno."""
        chunk: list[Write] = []
        size = 0
        for write in writes:
            if chunk and size + len(write.lines) > self.ctx.cfg.bulk_max_bytes:
                self._send_chunk(chunk)
                chunk, size = [], 0
            chunk.append(write)
            size += len(write.lines)
        if chunk:
            self._send_chunk(chunk)

    def _send_chunk(self, chunk: list[Write]) -> None:
        attempt = 0
        while True:
            seqno = min(w.seqno for w in chunk)
            try:
                answer = self.bulk(b"".join(w.lines for w in chunk),
                                   f"writing {len(chunk)} document(s)", seqno, sized=True)
            except _TooLarge as exc:
                if len(chunk) == 1:
                    raise self._too_large(chunk[0], exc.limit, exc.setting) from exc
                # Refused for its size alone: the same documents in smaller requests.
                half = len(chunk) // 2
                self._send_chunk(chunk[:half])
                self._send_chunk(chunk[half:])
                return
            if not answer.get("errors"):
                return
            retry: list[Write] = []
            refused: list[tuple[Write, dict[str, Any]]] = []
            for write, item in zip(chunk, answer["items"], strict=True):
                action, result = next(iter(item.items()))
                outcome = classify_item(action, result, write.versioned)
                if outcome in (Outcome.OK, Outcome.ALREADY_APPLIED):
                    continue
                if outcome is Outcome.RETRY:
                    retry.append(write)
                elif outcome is Outcome.REFUSED:
                    refused.append((write, result))
                elif outcome is Outcome.MISSING_INDEX:
                    self._forget(write.table)
                    raise TransientError(
                        f"{self.ctx.target}: index {write.table.index} (table "
                        f"{write.table.qualified}) disappeared while this group applied it: "
                        f"{reason(result)}; recreating it from seqno {write.seqno}",
                        seqno=write.seqno)
                else:
                    raise TransientError(
                        f"{self.ctx.target}: document {write.doc_id} of {write.table.index} "
                        f"changed between its read and its write ({reason(result)}); "
                        "applying the block again", seqno=write.seqno)
            if refused:
                raise self._refused(min(refused, key=lambda r: r[0].seqno))
            if not retry:
                return
            attempt += 1
            if attempt > self.ctx.cfg.bulk_retries:
                raise TransientError(
                    f"{self.ctx.target}: {len(retry)} document(s) still refused as overload "
                    f"after {attempt} attempts (429/503); retrying the block from the stored "
                    "position", seqno=min(w.seqno for w in retry))
            wait = min(0.25 * 2 ** attempt, 10.0)
            log.info("%s: %d document(s) refused as overload; again in %.1f s", self.ctx.target,
                     len(retry), wait)
            time.sleep(wait)
            chunk = retry

    def bulk(self, body: bytes, doing: str, seqno: int = -1,
             sized: bool = False) -> dict[str, Any]:
        """One bulk request (``sized``: a refusal for its size alone is ``_TooLarge``)."""
        try:
            # Serialized here (one json.dumps per document, collapsed first): the client
            # passes bytes through as NDJSON, although its signature only names mappings.
            answer: dict[str, Any] = self.ctx.es.bulk(
                operations=body,  # type: ignore[arg-type]
                filter_path=BULK_FILTER).body
        except (ApiError, TransportError) as exc:
            limit = size_limit(exc) if sized else None
            if limit is not None:
                raise _TooLarge(*limit) from exc
            raise request_error(exc, self.ctx.target, doing, seqno=seqno) from exc
        return answer

    def _too_large(self, write: Write, limit: int, setting: str) -> DataError:
        """A document that no request the server takes can hold."""
        try:
            body = json.loads(write.lines.split(b"\n", 1)[1])
        except (IndexError, ValueError):
            body = {}
        column = largest(body.items()) if isinstance(body, dict) else None
        why = too_large(f"document {write.doc_id} (index {write.table.index})",
                        write.table.qualified, write.seqno, len(write.lines), column,
                        f"the {mib(limit)} Elasticsearch takes in one request ({setting})",
                        "give the cluster more heap or raise that setting")
        return DataError(f"{self.ctx.target}: {why}", seqno=write.seqno)

    def _refused(self, refused: tuple[Write, dict[str, Any]]) -> DataError:
        write, result = refused
        column = refused_column(result)
        where = f", column {column}" if column else ""
        return DataError(
            f"{self.ctx.target}: index {write.table.index} refused document {write.doc_id} of "
            f"seqno {write.seqno} (table {write.table.qualified}{where}): {reason(result)}. "
            "Fix the mapping or the data, or skip the seqno", seqno=write.seqno)
