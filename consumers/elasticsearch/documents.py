"""The open block's document writes, collapsed to the last one per document.

A table with a key: one write per document id, carrying the seqno as its external version
(``version_type=external``, or ``external_gte`` for a seqno in several fragments, whose
later fragments may replace its own writes). A table without one: per distinct row, the row
count changes of the block in THL order (``Counted``), turned into writes once the stored
documents are read (``ElasticsearchApplier._counted_writes``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from consumers.elasticsearch.bulk import Write
from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.elasticsearch.indices import TableIndex
from consumers.elasticsearch.naming import document_id, row_id
from consumers.elasticsearch.types import DELETED, JsonValue, RowEncoder, dumps, iso
from thl_topics.event import RowAction, RowChange, ThlEvent


@dataclass(slots=True)
class Counted:
    """A document of a table without a key, and the row count changes of the block."""

    table: TableIndex
    doc_id: str
    values: dict[str, JsonValue]
    #: (seqno, fragno, +1/-1) in THL order.
    deltas: list[tuple[int, int, int]]
    tstamp: int


class BlockDocuments:
    """What the open block writes, document by document."""

    def __init__(self, cfg: ElasticsearchTarget) -> None:
        self.cfg = cfg
        self.tombstones = cfg.deletes == "tombstone"
        self.writes: dict[tuple[str, str], Write] = {}
        self.counted: dict[tuple[str, str], Counted] = {}
        #: Bytes held (about, for the keyless counts): the block sends what it holds
        #: beyond ``bulk_max_bytes``.
        self.pending_bytes = 0
        #: The seqno being applied, and its version_type (external_gte when it comes in
        #: several fragments).
        self._open_seqno = -1
        self._version_type = b'"external"'

    def start(self, event: ThlEvent) -> None:
        """An event of the block is about to be applied."""
        if event.seqno != self._open_seqno:
            self._open_seqno = event.seqno
            # The first fragment tells: a transaction that is not whole in it may be sent
            # in several bulks.
            self._version_type = b'"external"' if event.last_frag else b'"external_gte"'

    def version(self, seqno: int) -> bytes:
        """The end of a bulk action line: the seqno as the document's version."""
        return (b',"version":' + str(seqno).encode() + b',"version_type":'
                + self._version_type + b"}}\n")

    def sent(self) -> None:
        """What was held has gone out (or is given up)."""
        self.writes.clear()
        self.counted.clear()
        self.pending_bytes = 0

    def clear(self) -> None:
        """The block is over."""
        self.sent()
        self._open_seqno = -1

    def keyed(self, table: TableIndex, change: RowChange, event: ThlEvent,
              after: RowEncoder | None, before: RowEncoder | None,
              extra: dict[str, Any]) -> None:
        """The writes of a row change of a table with a key: a document per key, versioned
        with the seqno."""
        after_key = [i for i, s in enumerate(change.column_specs) if s.primary_key]
        before_key = [i for i, s in enumerate(change.key_specs) if s.primary_key]
        version = self.version(event.seqno)
        for r in range(change.row_count):
            old_id = new_id = None
            values: list[JsonValue] | None = None
            if after is not None and change.action is not RowAction.DELETE:
                values = after.values(change.column_values[r])
                new_id = document_id([values[i] for i in after_key])
            if before is not None and change.action is not RowAction.INSERT:
                old = before.values(change.key_values[r])
                old_id = document_id([old[i] for i in before_key])
                if old_id != new_id:
                    # A delete, or an UPDATE that changed the key: the old id goes.
                    self.delete(table, old_id, event, version,
                                {before.names[i]: old[i] for i in before_key}, extra)
            if values is not None and new_id is not None and after is not None:
                doc = dict(zip(after.names, values, strict=True))
                if extra:
                    doc.update(extra)
                self._put(table, new_id, event.seqno, table.index_prefix, dumps(doc),
                          version, "index")

    def optional_fields(self, schema: str, table: str, seqno: int, tstamp: int) -> dict[str, Any]:
        """The optional document fields (``document_fields``) of a row of this seqno."""
        extra: dict[str, Any] = {}
        for name in self.cfg.document_fields:
            if name == "source_schema":
                extra[name] = schema
            elif name == "source_table":
                extra[name] = table
            elif name == "committime":
                extra[name] = iso(dt.datetime.fromtimestamp(tstamp / 1e6, dt.UTC))
            else:
                extra[name] = seqno
        return extra

    def delete(self, table: TableIndex, doc_id: str, event: ThlEvent, version: bytes,
               key: dict[str, JsonValue], extra: dict[str, Any]) -> None:
        """A document goes: deleted, or replaced by its tombstone (``deletes: tombstone``)."""
        if self.tombstones:
            # The version stays with a document: a replay from before the delete is refused.
            self._put(table, doc_id, event.seqno, table.index_prefix,
                      dumps({**key, **extra, DELETED: True}), version, "index")
        else:
            self._put(table, doc_id, event.seqno, table.delete_prefix, None, version,
                      "delete")

    def _put(self, table: TableIndex, doc_id: str, seqno: int, prefix: bytes,
             source: bytes | None, version: bytes, action: str) -> None:
        key = (table.index, doc_id)
        lines = prefix + dumps(doc_id) + version
        if source is not None:
            lines += source + b"\n"
        self.writes[key] = Write(lines, seqno, table, doc_id, action)
        self.pending_bytes += len(lines)

    def keyless(self, table: TableIndex, change: RowChange, event: ThlEvent,
                after: RowEncoder | None, before: RowEncoder | None,
                extra: dict[str, Any]) -> None:
        """The row count changes of a row change of a table without a key."""
        for r in range(change.row_count):
            if before is not None and change.action is not RowAction.INSERT:
                self._count(table, before, before.values(change.key_values[r]), -1, event)
            if after is not None and change.action is not RowAction.DELETE:
                self._count(table, after, after.values(change.column_values[r]), +1, event)

    def _count(self, table: TableIndex, enc: RowEncoder, values: list[JsonValue], delta: int,
               event: ThlEvent) -> None:
        doc_id = row_id(enc.names, values)
        key = (table.index, doc_id)
        found = self.counted.get(key)
        if found is None:
            found = self.counted[key] = Counted(
                table, doc_id, dict(zip(enc.names, values, strict=True)), [], event.tstamp)
            self.pending_bytes += 200 + 32 * len(values)
        found.deltas.append((event.seqno, event.fragno, delta))
        found.tstamp = event.tstamp
