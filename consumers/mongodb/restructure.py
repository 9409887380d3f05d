"""Following a renamed table or column, or a dropped table, on MongoDB (issue 28: the
applier's ``rename_table``, ``rename_column`` and ``drop_table``).

Every step is replay-safe without a marker of its own, since each one only finds what is
still left to do:

- a collection moves with ``renameCollection`` (atomic, indexes and tombstones with it).
  Where the server cannot rename across databases (FerretDB 1.24: ``NotImplemented``, code
  238), its documents and indexes are copied (a duplicate ``_id`` is a document an
  interrupted copy already brought) and the old collection dropped last;
- a field is renamed or copied only in documents written before the change (``_seqno``
  below its seqno) that still have the old field (and, for a copy, lack the new one). The
  documents keep their ``_seqno``: an older write replayed later is still refused by it, and
  every later write (a higher seqno) still passes;
- a composite key's ``_id`` is a sub-document named by the key's fields: when one of them is
  renamed, each document of the old ``_id`` (tombstones too) is inserted again under the
  new ``_id``, then the old one deleted; a replay finds the documents still left to move.

Copies go in batches read back and written with one bulk command each: FerretDB 1.24 has no
update with an aggregation pipeline (``{$set: {new: "$old"}}`` is refused: "BSON field
'update.updates.u' is the wrong type 'array'").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bson.codec_options import CodecOptions
from bson.int64 import Int64
from bson.raw_bson import RawBSONDocument
from pymongo import ASCENDING, MongoClient, UpdateOne
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, OperationFailure

from consumers.mongodb.blocks import RawDoc
from consumers.mongodb.errors import DUPLICATE_KEY
from consumers.mongodb.naming import Namespace
from consumers.mongodb.types import ID, SEQNO

#: A ``renameCollection`` the server cannot do across databases: NotImplemented (FerretDB
#: 1.24) or IllegalOperation.
NO_CROSS_DATABASE = frozenset({238, 20})
#: Index options that are the index's own, not the ones a copy may set again.
_INDEX_META = frozenset({"v", "key", "ns"})


def exists(client: MongoClient[RawDoc], ns: Namespace) -> bool:
    """Whether the collection is there."""
    return bool(client[ns.database].list_collection_names(filter={"name": ns.collection}))


def move(client: MongoClient[RawDoc], old: Namespace, new: Namespace, batch: int) -> str:
    """``old``'s collection becomes ``new`` with its documents and indexes; how it went
    (``renamed``, or ``copied`` where the server cannot rename across databases)."""
    try:
        client.admin.command("renameCollection", str(old), to=str(new))
        return "renamed"
    except OperationFailure as exc:
        if old.database == new.database or exc.code not in NO_CROSS_DATABASE:
            raise
    copy(client, old, new, batch)
    client[old.database].drop_collection(old.collection)
    return "copied"


def copy(client: MongoClient[RawDoc], old: Namespace, new: Namespace, batch: int) -> int:
    """Copy the documents and indexes of ``old`` into ``new`` (resumable); how many went."""
    raw: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)
    source = client[old.database].get_collection(old.collection, codec_options=raw)
    target = client[new.database][new.collection]
    for index in source.list_indexes():
        if index["name"] != "_id_":
            options = {k: v for k, v in index.items() if k not in _INDEX_META}
            target.create_index(list(index["key"].items()), **options)
    copied = 0
    docs: list[Any] = []
    for doc in source.find({}, sort=[(ID, ASCENDING)]):
        docs.append(doc)
        if len(docs) >= batch:
            copied += insert_new(target, docs)
            docs = []
    return copied + insert_new(target, docs)


def insert_new(coll: Collection[RawDoc], docs: list[Any]) -> int:
    """Insert documents, leaving out the ones whose ``_id`` is there already (an
    interrupted run inserted them); how many went in."""
    if not docs:
        return 0
    try:
        return len(coll.insert_many(docs, ordered=False).inserted_ids)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors") or []
        if any(e.get("code") != DUPLICATE_KEY for e in errors):
            raise
        return len(docs) - len(errors)


def _before(seqno: int, **conditions: Any) -> dict[str, Any]:
    """The documents written before seqno ``seqno`` that match ``conditions``."""
    return {**conditions, SEQNO: {"$lt": Int64(seqno)}}


def _batches(coll: Collection[RawDoc], query: dict[str, Any], batch: int,
             projection: dict[str, Any] | None = None) -> Iterator[list[RawDoc]]:
    """The documents matching ``query``, a batch at a time, read afresh after each batch
    (the caller's writes make them stop matching); stops if a batch changed nothing."""
    seen: set[bytes] = set()
    while True:
        docs = list(coll.find(query, projection, limit=batch, sort=[(ID, ASCENDING)]))
        if not docs:
            return
        marks = {repr(d[ID]).encode() for d in docs}
        if marks <= seen:
            raise RuntimeError(f"{coll.full_name}: documents still match {query} after "
                               "they were written")
        seen |= marks
        yield docs


def renamed_id(ident: Any, old: str, new: str) -> Any:
    """A composite ``_id`` with its ``old`` field named ``new``, in the same place."""
    if not isinstance(ident, dict) or old not in ident:
        return ident
    return {new if k == old else k: v for k, v in ident.items()}


def renamed_document(doc: RawDoc, old: str, new: str) -> RawDoc:
    """A document (a tombstone too) with field ``old`` named ``new``, in ``_id`` and out."""
    out: RawDoc = {}
    for k, v in doc.items():
        if k == ID:
            out[ID] = renamed_id(v, old, new)
        elif k == old:
            out[new] = v
        else:
            out[k] = v
    return out


def rekey(coll: Collection[RawDoc], old: str, new: str, seqno: int, batch: int) -> int:
    """The documents whose composite ``_id`` names ``old`` move to the ``_id`` naming
    ``new`` (the field renamed too): inserted again, then the old deleted; how many."""
    moved = 0
    for docs in _batches(coll, _before(seqno, **{f"{ID}.{old}": {"$exists": True}}), batch):
        insert_new(coll, [renamed_document(d, old, new) for d in docs])
        coll.delete_many({ID: {"$in": [d[ID] for d in docs]}})
        moved += len(docs)
    return moved


def unfound(coll: Collection[RawDoc], fields: Sequence[str], ident: Callable[[RawDoc], Any],
            seqno: int, sample: int = 5) -> Any:
    """The ``_id`` of a document written before ``seqno`` that its ``_id`` made from
    ``fields`` by ``ident`` would not find (None: the sample found all), ``sample``
    documents looked at. The server compares the two ``_id`` (numbers of any BSON type by
    value, as a write's filter would)."""
    query = _before(seqno, **{f: {"$exists": True} for f in fields})
    for doc in coll.find(query, limit=sample):
        made = ident(doc)
        if made is not None and coll.find_one({"$and": [{ID: doc[ID]}, {ID: made}]},
                                              {ID: 1}) is None:
            return doc[ID]
    return None


def rename_field(coll: Collection[RawDoc], old: str, new: str, seqno: int) -> int:
    """``$rename`` ``old`` to ``new`` in the documents that have it; how many changed."""
    done = coll.update_many(_before(seqno, **{old: {"$exists": True}}),
                            {"$rename": {old: new}})
    return done.modified_count


def unset_field(coll: Collection[RawDoc], name: str, seqno: int) -> int:
    """``name`` removed from the documents written before ``seqno`` that have it; how
    many changed."""
    done = coll.update_many(_before(seqno, **{name: {"$exists": True}}), {"$unset": {name: ""}})
    return done.modified_count


def copy_field(coll: Collection[RawDoc], old: str, new: str, seqno: int, batch: int) -> int:
    """``new`` set to ``old``'s value in the documents that have ``old`` and not ``new``
    (read and written back a batch at a time: no pipeline updates on FerretDB); how many."""
    query = _before(seqno, **{old: {"$exists": True}, new: {"$exists": False}})
    copied = 0
    for docs in _batches(coll, query, batch, {old: 1}):
        coll.bulk_write([UpdateOne({ID: d[ID]}, {"$set": {new: d[old]}}) for d in docs],
                        ordered=False)
        copied += len(docs)
    return copied
