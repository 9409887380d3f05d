"""Reading a replicated table back from MongoDB as source rows (consistency checks).

Every live document of the table's collection (tombstones, ``_deleted``, are not rows) is
turned back into the row it stands for: each field through the type map backwards
(``types.thl_value``), a JSON column from its embedded value or its text.
"""

from __future__ import annotations

from collections.abc import Iterator

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from consumers.check import CheckRange
from consumers.errors import DataError
from consumers.mongodb.blocks import RawDoc
from consumers.mongodb.config import MongoTarget
from consumers.mongodb.errors import classify
from consumers.mongodb.naming import field_name, namespace
from consumers.mongodb.types import DELETED, ID, ValueRefused, thl_value
from thl_topics.event import ThlValue


def read_range(client: MongoClient[RawDoc], cfg: MongoTarget, service: str, check: CheckRange,
               target: str, ferretdb: bool) -> Iterator[list[ThlValue]]:
    """The live documents of a checked key range, as the source rows they stand for, in
    THL values (``consumers.check``): the type map backwards. The range is cut here, not
    in the query: key order is the source's (typed) order, not BSON's."""
    ns = namespace(cfg, service, check.schema, check.table, ferretdb)
    fields = [field_name(c.name, cfg.escape_names) for c in check.specs]
    json_text = [cfg.is_json(check.schema, check.table, c.name) for c in check.specs]
    names = [c.name for c in check.specs]
    key_at = [names.index(k) for k in check.key]
    coll = client[ns.database][ns.collection]
    try:
        for doc in coll.find({DELETED: {"$exists": False}}):
            try:
                values = [thl_value(spec, doc.get(f), j)
                          for spec, f, j in zip(check.specs, fields, json_text,
                                                strict=True)]
            except ValueRefused as exc:
                raise DataError(f"{target}: {ns}: document {doc.get(ID)!r} cannot be "
                                f"checked: {exc}") from exc
            if key_at and not check.contains([values[i] for i in key_at]):
                continue
            yield values
    except PyMongoError as exc:
        raise classify(exc, target, f"reading {ns} for a check") from exc
