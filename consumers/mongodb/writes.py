"""Writing a block's documents: guarded writes, changes of keyless tables, provisioning clears.

Every write is guarded by its seqno (``blocks``): a write the server refuses because the
document is already at that seqno or newer (E11000) is "already applied"; the rest of that
command is checked against the stored ``_seqno``s and sent again, so one stale write never
stops the writes after it. Inside a transaction a write error would abort it: the writes a
replay would find already applied are left out first, by their stored seqnos. On FerretDB
(every update statement scans the collection) new documents go in with one unordered
``insert_many`` instead. A document above the server's limit is a data error before it is
sent.
"""

from __future__ import annotations

import logging
from typing import Any

from bson.errors import InvalidDocument
from bson.int64 import Int64
from pymongo import ASCENDING, DESCENDING
from pymongo.client_session import ClientSession
from pymongo.errors import BulkWriteError, DocumentTooLarge

from consumers.errors import DataError, PositionConflict
from consumers.mongodb.blocks import (
    Clear,
    KeyedWrites,
    KeylessOp,
    RawDoc,
    Write,
    chunks,
    fresh,
    key_of,
    row_document,
    update,
)
from consumers.mongodb.context import TargetContext
from consumers.mongodb.errors import DUPLICATE_KEY, classify, data_error, error_text
from consumers.mongodb.naming import Namespace
from consumers.mongodb.positions import PROVISIONED
from consumers.mongodb.types import DELETED, ID, OP, SEQNO
from consumers.oversize import largest, mib, too_large

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.mongodb.applier")


class DocumentWriter:
    """Writes blocks of documents to one MongoDB deployment (in a session, or not)."""

    def __init__(self, ctx: TargetContext, tracking_db: str) -> None:
        self.ctx = ctx
        self.tracking_db = tracking_db
        #: Keyless collections whose ``_op`` index is known to be there.
        self._mark_indexes: set[Namespace] = set()

    def forget(self, ns: Namespace) -> None:
        """The collection was renamed or dropped: its index must be made again if needed."""
        self._mark_indexes.discard(ns)

    def write_data(self, writes: KeyedWrites, keyless: dict[Namespace, list[KeylessOp]],
                   session: ClientSession | None,
                   marks: dict[Namespace, tuple[int, int]],
                   clears: dict[Namespace, Clear] | None = None) -> None:
        """The data of a block (or of a part written ahead): provisioning clears first,
        then the guarded writes, then the changes of keyless tables in order."""
        # Before the writes: every write of a cleared collection left in the block comes
        # from the chunk's seqno or later (``_clear`` dropped the older ones).
        by_ns = writes.by_namespace()
        for ns, clear in (clears or {}).items():
            self._empty(ns, clear, session, marks,
                        {key_of(w.ident) for w in by_ns.get(ns, [])})
        for ns, run in by_ns.items():
            self.guarded(ns, run, session)
        for ns, ops in keyless.items():
            self._apply_keyless(ns, ops, session, marks)

    def _check_sizes(self, writes: list[Write]) -> None:
        """A document above the server's limit is a data error here, before it is sent:
        FerretDB stores one, a MongoDB server refuses it, pymongo's insert_many does not
        check. Cheap for the usual rows: only a document whose values could add up to the
        limit is encoded to know its size."""
        limit = self._max_bson()
        for w in writes:
            if w.raw is None and _upper_bound(w.document()) < limit:
                continue
            if w.encode() > limit:
                why = too_large(
                    "the document", w.table, w.seqno, w.encode(),
                    largest((w.document() or {}).items()),
                    f"the {mib(self._max_bson())} the server takes (maxBsonObjectSize, "
                    "fixed in MongoDB)", "no setting raises it")
                raise DataError(f"{self.ctx.target}: {why}", seqno=w.seqno, event_id=w.event_id)

    def _send(self, ns: Namespace, writes: list[Write], session: ClientSession | None
              ) -> list[RawDoc]:
        """One ordered update command of these writes; its write errors."""
        self._check_sizes(writes)
        reply = update(self.ctx.client, ns, [w.spec() for w in writes], session)
        errors: list[RawDoc] = reply.get("writeErrors") or []
        return errors

    def _max_bson(self) -> int:
        return self.ctx.server.max_bson_size

    def guarded(self, ns: Namespace, writes: list[Write], session: ClientSession | None
                ) -> None:
        """Apply guarded writes of one namespace; already applied ones change nothing."""
        self._check_sizes(writes)
        if session is None and self.ctx.server.scanning_updates:
            self._insert_first(ns, writes)
            return
        for run in chunks(writes, self.ctx.cfg.batch_ops):
            if session is not None:
                # Inside a transaction a write error aborts everything: leave out, by their
                # stored seqnos, the writes a replay would find already applied.
                run = fresh(run, self._stored_seqnos(ns, run, session))
                if run:
                    errors = self._send(ns, run, session)
                    if errors:
                        index = int(errors[0].get("index", 0))
                        raise self._refused(run[index if 0 <= index < len(run) else 0],
                                            errors[0])
                continue
            errors = self._send(ns, run, None)
            if not errors:
                continue
            if all(e.get("code") == DUPLICATE_KEY for e in errors):
                # Already applied writes (a replay) stop an ordered command, and FerretDB
                # does not say which one it stopped at: send again what is not applied yet.
                run = fresh(run, self._stored_seqnos(ns, run, None))
                if not run or not self._send(ns, run, None):
                    continue
            self._one_by_one(ns, run)

    def _insert_first(self, ns: Namespace, writes: list[Write]) -> None:
        """Guarded writes where every update statement scans the collection (FerretDB).

        Documents that do not exist yet (most rows of an insert) go in with one unordered
        ``insert_many``; for the ones that collide with an existing ``_id``, the stored
        ``_seqno``s are read, the already applied ones are left alone, and the others are
        deleted and inserted again, each in one statement: a few scans per thousand
        documents instead of one per document. A crash between that delete and insert
        leaves those documents missing until the runtime applies the block again from the
        stored position (which it does first).
        """
        taken = self._insert(ns, writes)
        for start in range(0, len(taken), self.ctx.cfg.batch_ops):
            run = taken[start:start + self.ctx.cfg.batch_ops]
            newer = fresh(run, self._stored_seqnos(ns, run, None))
            if not newer:
                continue
            coll = self.ctx.client[ns.database][ns.collection]
            coll.delete_many({ID: {"$in": [w.ident for w in newer]}})
            # With their _id gone, a duplicate key can only come from another unique index.
            self._insert(ns, newer, duplicates_refused=True)

    def _insert(self, ns: Namespace, writes: list[Write], duplicates_refused: bool = False
                ) -> list[Write]:
        """Insert the documents of these writes (unordered); the ones whose ``_id`` exists.

        Through ``insert_many``: pymongo sends the documents as OP_MSG document sequences,
        which FerretDB takes faster than one command document holding them all.
        """
        coll = self.ctx.client[ns.database][ns.collection]
        try:
            coll.insert_many([w.document() for w in writes], ordered=False)
        except BulkWriteError as exc:
            taken = []
            for error in exc.details.get("writeErrors") or []:
                index = int(error.get("index", -1))
                w = writes[index] if 0 <= index < len(writes) else writes[0]
                if error.get("code") != DUPLICATE_KEY or duplicates_refused:
                    raise self._refused(w, error) from exc
                taken.append(w)
            return taken
        except (DocumentTooLarge, InvalidDocument) as exc:
            # Slow path, for the error only: encode each to find the culprit.
            self._check_sizes(writes)
            raise classify(exc, self.ctx.target, f"inserting into {ns}", writes[-1].seqno,
                           writes[-1].event_id) from exc
        return []

    def _one_by_one(self, ns: Namespace, writes: list[Write]) -> None:
        """Each write alone, to tell an already applied one from the one the server refuses."""
        for w in writes:
            errors = self._send(ns, [w], None)
            if not errors:
                continue
            if errors[0].get("code") == DUPLICATE_KEY and self._stored_seqnos(
                    ns, [w], None).get(key_of(w.ident), -1) >= w.seqno:
                continue  # already applied
            raise self._refused(w, errors[0])

    def _refused(self, w: Write, error: RawDoc) -> DataError:
        if error.get("code") == DUPLICATE_KEY:
            why = ("a unique index other than _id refuses the document (duplicate key): "
                   f"{error_text(error)}")
        else:
            why = f"the server refuses the document: {error_text(error)}"
        return data_error(self.ctx.target, w, w.table, None, why)

    def _stored_seqnos(self, ns: Namespace, writes: list[Write],
                       session: ClientSession | None) -> dict[Any, int]:
        coll = self.ctx.client[ns.database][ns.collection]
        ids = [w.ident for w in writes]
        found: dict[Any, int] = {}
        for doc in coll.find({ID: {"$in": ids}}, {SEQNO: 1}, session=session):
            seqno = doc.get(SEQNO)
            found[key_of(doc[ID])] = int(seqno) if seqno is not None else -1
        return found

    def _apply_keyless(self, ns: Namespace, ops: list[KeylessOp],
                       session: ClientSession | None,
                       marks: dict[Namespace, tuple[int, int]]) -> None:
        coll = self.ctx.client[ns.database][ns.collection]
        mark = marks.get(ns)
        if mark is None:
            mark = self._read_mark(ns, session)
        inserts: list[Write] = []
        try:
            for op in ops:
                if op.before is None:
                    inserts.append(op.insert())
                    continue
                if inserts:
                    self.guarded(ns, inserts, session)
                    inserts = []
                if op.mark <= mark:
                    continue  # applied before a restart
                found = coll.find_one({**op.before, DELETED: {"$exists": False}}, {ID: 1},
                                      sort=[(ID, ASCENDING)], session=session)
                if found is None and op.loose:
                    # Provisioning: the row may not be here yet; its chunk brings it.
                    continue
                if found is None:
                    raise data_error(
                        self.ctx.target, op, op.table, None,
                        f"no document of {ns} equals the row to "
                        f"{'update' if op.after is not None else 'delete'}: the target has "
                        "diverged from the source")
                # By _id alone: the one filter FerretDB does not answer with a scan.
                reply = update(self.ctx.client, ns, [{"q": {ID: found[ID]},
                                                      "u": op.replacement(found[ID]),
                                                      "upsert": False}], session)
                errors = reply.get("writeErrors")
                if errors:
                    raise data_error(self.ctx.target, op, op.table, None, "the server refuses "
                                     f"the document: {error_text(errors[0])}")
                if reply.get("n") == 0:
                    raise PositionConflict(
                        f"{self.ctx.target}: {ns}: a document went away under this consumer "
                        f"while seqno {op.seqno} was applied: another process applies the "
                        "same consumer group to this target", seqno=op.seqno)
                mark = op.mark
            if inserts:
                self.guarded(ns, inserts, session)
        finally:
            marks[ns] = mark

    def _empty(self, ns: Namespace, clear: Clear, session: ClientSession | None,
               marks: dict[Namespace, tuple[int, int]], written: set[Any]) -> None:
        """Carry out a provisioning clear (``blocks.Clear``), unless it was done before.

        ``written``: the documents (``key_of``) the block writes next in this collection,
        at the chunk's seqno or later; they get no tombstone (one at the chunk's seqno would
        refuse the chunk's own row, the guard being strict) and are replaced anyway.
        """
        marker = self.ctx.client[self.tracking_db][PROVISIONED]
        key = str(ns)
        done = marker.find_one({ID: key}, {SEQNO: 1}, session=session)
        if done is not None and int(done.get(SEQNO, -1)) >= clear.seqno:
            return  # a replay: this clear (or a later one) happened already
        coll = self.ctx.client[ns.database][ns.collection]
        # Not written by the replicator (no _seqno): no replay can need them.
        coll.delete_many({SEQNO: {"$exists": False}}, session=session)
        ids = [doc[ID] for doc in coll.find(
            {SEQNO: {"$lt": Int64(clear.seqno)}, DELETED: {"$exists": False}}, {ID: 1},
            session=session) if key_of(doc[ID]) not in written]
        if ids:
            self.guarded(ns, [clear.tombstone(i) for i in ids], session)
        if clear.keyless and ns in marks:
            # The tombstones carry this mark (a mark not known yet is read from them).
            marks[ns] = max(marks[ns], (clear.seqno, 0))
        self.guarded(Namespace(self.tracking_db, PROVISIONED), [Write(
            clear.seqno, 0, clear.event_id, clear.table, key,
            row_document(key, clear.seqno, [("database", ns.database),
                                            ("collection", ns.collection)]))], session)
        log.info("%s: %s emptied at seqno %d (a provisioning chunk or a TRUNCATE): %d "
                 "document(s)", self.ctx.target, ns, clear.seqno, len(ids))

    def _read_mark(self, ns: Namespace, session: ClientSession | None) -> tuple[int, int]:
        coll = self.ctx.client[ns.database][ns.collection]
        if ns not in self._mark_indexes and session is None:
            # Finds the highest _op without a scan (idempotent; outside transactions only).
            coll.create_index([(f"{OP}.s", DESCENDING), (f"{OP}.r", DESCENDING)],
                              name="tungsten_op")
            self._mark_indexes.add(ns)
        top = coll.find_one({OP: {"$exists": True}}, {OP: 1},
                            sort=[(f"{OP}.s", DESCENDING), (f"{OP}.r", DESCENDING)],
                            session=session)
        if top is None:
            return (-1, -1)
        return int(top[OP]["s"]), int(top[OP]["r"])


def _upper_bound(value: Any) -> int:
    """At least the BSON size of a value (a row's document, or a value in it): 4 bytes a
    UTF-8 character, 64 for numbers, dates and the like; nested documents summed."""
    if isinstance(value, (bytes, bytearray)):  # bson's Binary too
        return len(value) + 16
    if isinstance(value, str):
        return 4 * len(value) + 16
    if isinstance(value, dict):
        return sum(4 * len(k) + _upper_bound(v) for k, v in value.items()) + 16
    if isinstance(value, (list, tuple)):
        return sum(24 + _upper_bound(v) for v in value) + 16
    return 64
