"""A block of row changes as MongoDB writes: one guarded write per document, last one wins.

MongoDB (FerretDB always, MongoDB without a transaction) has no atomic multi-document write,
so every write carries the seqno of the change it comes from and only replaces a document
whose ``_seqno`` is lower: ``update {q: {_id, _seqno: {$lt: S}}, u: <doc>, upsert: true}``.
A delete writes a tombstone (``{_id, _seqno: S, _deleted: true}``) the same way, so an older
write replayed later finds a newer document and changes nothing. When the document is already
at S or beyond, the filter matches nothing and the upsert collides with the existing ``_id``
(E11000): that means "already applied".

Inside a block, the writes of one document collapse to the last one (ordered by seqno and row
ordinal), so a block writes each document once and the order between documents no longer
matters. Rows of tables without a primary key cannot collapse (no identity across changes):
they stay in order, see ``KeylessOp``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import bson
from bson.errors import InvalidDocument
from bson.int64 import Int64
from bson.raw_bson import RawBSONDocument

from consumers.mongodb.naming import Namespace
from consumers.mongodb.types import DELETED, ID, OP, SEQNO

if TYPE_CHECKING:
    from pymongo import MongoClient
    from pymongo.client_session import ClientSession
    from pymongo.database import Database

#: A document as pymongo returns it.
RawDoc = dict[str, Any]

#: Bytes of documents in one write command at most (a command is at most 16 MiB + 16 KiB).
COMMAND_BYTES = 8 * 1024 * 1024


class Unencodable(ValueError):
    """A document BSON cannot encode (the write says which)."""

    def __init__(self, write: Write, why: str) -> None:
        super().__init__(why)
        self.write = write


@dataclass(slots=True)
class Write:
    """One guarded replace of one document: the row (``doc``, the whole replacement with
    ``_id`` and ``_seqno`` first: see ``row_document``) or a tombstone (None)."""

    seqno: int
    #: Order of the change inside its seqno (across fragments).
    ordinal: int
    event_id: str
    #: ``schema.table`` of the source, for messages.
    table: str
    ident: Any
    doc: dict[str, Any] | None
    #: The encoded replacement, once ``encode`` ran.
    raw: RawBSONDocument | None = field(default=None, repr=False)

    def document(self) -> dict[str, Any]:
        """The replacement document: the row, or a tombstone."""
        if self.doc is not None:
            return self.doc
        return {ID: self.ident, SEQNO: Int64(self.seqno), DELETED: True}

    def encode(self) -> int:
        """Encode the replacement once (its size in bytes)."""
        if self.raw is None:
            try:
                self.raw = RawBSONDocument(bson.encode(self.document()))
            except (InvalidDocument, OverflowError, UnicodeEncodeError) as exc:
                raise Unencodable(self, f"BSON cannot encode the document: {exc}") from exc
        return len(self.raw.raw)

    def spec(self) -> dict[str, Any]:
        """This write as one statement of an ``update`` command."""
        self.encode()
        return {"q": {ID: self.ident, SEQNO: {"$lt": Int64(self.seqno)}}, "u": self.raw,
                "upsert": True}


def row_document(ident: Any, seqno: int, fields: Iterable[tuple[str, Any]]
                 ) -> dict[str, Any]:
    """A row's document: ``_id``, ``_seqno``, then its fields in column order."""
    doc: dict[str, Any] = {ID: ident, SEQNO: Int64(seqno)}
    doc.update(fields)
    return doc


def key_of(ident: Any) -> Any:
    """A hashable stand-in of an ``_id`` (composite keys are documents)."""
    if type(ident) in (int, str):
        return ident
    return bson.encode({"": ident})


class KeyedWrites:
    """The last write per (namespace, ``_id``) of a block, in the order of those last writes
    (by seqno and row ordinal, as they were added)."""

    def __init__(self) -> None:
        self._writes: dict[tuple[Namespace, Any], Write] = {}

    def add(self, ns: Namespace, write: Write) -> None:
        """Add a write; an earlier write of the same document is dropped."""
        slot = (ns, key_of(write.ident))
        # Re-inserted, not overwritten: the dict's order is the order of the last writes.
        self._writes.pop(slot, None)
        self._writes[slot] = write

    def __len__(self) -> int:
        return len(self._writes)

    def drop(self, ns: Namespace) -> None:
        """Forget the writes of one namespace (a provisioning clear supersedes them)."""
        for slot in [slot for slot in self._writes if slot[0] == ns]:
            del self._writes[slot]

    def by_namespace(self) -> dict[Namespace, list[Write]]:
        """The writes of each namespace, in order."""
        out: dict[Namespace, list[Write]] = {}
        for (ns, _), write in self._writes.items():
            out.setdefault(ns, []).append(write)
        return out


@dataclass(slots=True)
class KeylessOp:
    """A change of a row of a table without a primary key.

    Such a row has no identity of its own: its document's ``_id`` is where it was inserted,
    ``"<seqno>:<row>"`` (a string: FerretDB looks up only string and ObjectId ``_id``s without
    scanning the collection). An insert is a guarded write of that ``_id`` like any other. An update
    or delete finds one document equal to the before image (the lowest ``_id`` among exact
    duplicates: which one does not change the table's contents) and records itself in the
    document's ``_op: {s: seqno, r: ordinal}``. These are applied one at a time and in order,
    so the highest ``_op`` of a collection says how far its updates and deletes went: a
    replay skips those at or below it.
    """

    seqno: int
    ordinal: int
    event_id: str
    table: str
    #: The before image to look for (update, delete), as document fields.
    before: dict[str, Any] | None
    #: The row after the change (insert, update); None for a delete.
    after: dict[str, Any] | None
    #: The table is being provisioned: a row the target does not have is no divergence
    #: (its chunk brings the table's state), the change is left out.
    loose: bool = False

    def insert(self) -> Write:
        """The guarded write of an inserted row."""
        ident = f"{self.seqno}:{self.ordinal}"
        return Write(self.seqno, self.ordinal, self.event_id, self.table, ident,
                     None if self.after is None else row_document(ident, self.seqno,
                                                                  self.after.items()))

    @property
    def mark(self) -> tuple[int, int]:
        return self.seqno, self.ordinal

    def replacement(self, ident: Any) -> dict[str, Any]:
        """What the found document becomes: the new row, or a tombstone."""
        out: dict[str, Any] = {ID: ident, SEQNO: Int64(self.seqno),
                               OP: {"s": Int64(self.seqno), "r": Int64(self.ordinal)}}
        if self.after is None:
            out[DELETED] = True
        else:
            out.update(self.after)
        return out


@dataclass(frozen=True, slots=True)
class Clear:
    """A table's first provisioned chunk empties its collection before its rows are written.

    Replay-safe like the rest: every live document older than the chunk's seqno becomes a
    tombstone at that seqno (a guarded write: documents of later seqnos, already written
    before a crash, are not touched), except the documents the chunk's block writes itself
    (its rows, at that seqno or later: they replace the old documents anyway). Documents
    without ``_seqno`` were not written by the replicator: they are deleted. A marker in the
    tracking database (``provisioned``, ``_id`` = the namespace) records the seqno of the
    last clear, so a replayed chunk does not clear again what replayed older changes may
    have touched in between.
    """

    seqno: int
    event_id: str
    #: ``schema.table`` of the source, for messages.
    table: str
    #: The table has no primary key: the tombstones carry ``_op: {s: seqno, r: 0}``, so the
    #: updates and deletes the clear superseded count as applied (``KeylessOp``'s marks).
    keyless: bool

    def tombstone(self, ident: Any) -> Write:
        """The guarded write that empties one document."""
        doc: dict[str, Any] = {ID: ident, SEQNO: Int64(self.seqno), DELETED: True}
        if self.keyless:
            doc[OP] = {"s": Int64(self.seqno), "r": Int64(0)}
        return Write(self.seqno, 0, self.event_id, self.table, ident, doc)


def chunks(writes: list[Write], max_ops: int, max_bytes: int = COMMAND_BYTES
           ) -> Iterator[list[Write]]:
    """Consecutive runs of writes that fit one command (encoding each write once)."""
    run: list[Write] = []
    size = 0
    for write in writes:
        n = write.encode()
        if run and (len(run) >= max_ops or size + n > max_bytes):
            yield run
            run, size = [], 0
        run.append(write)
        size += n
    if run:
        yield run


def fresh(writes: Iterable[Write], stored: Mapping[Any, int]) -> list[Write]:
    """The writes the target does not hold yet: ``stored`` maps ``key_of(_id)`` to the
    document's ``_seqno``; a write at or below it was applied before (a replay)."""
    return [w for w in writes if stored.get(key_of(w.ident), -1) < w.seqno]


def update(client: MongoClient[RawDoc], ns: Namespace, specs: list[dict[str, Any]],
           session: ClientSession | None) -> RawDoc:
    """One ordered ``update`` command of write specs (``Write.spec``) in ``ns``; its reply."""
    db: Database[RawDoc] = client[ns.database]
    return db.command({"update": ns.collection, "updates": specs, "ordered": True},
                      session=session)
