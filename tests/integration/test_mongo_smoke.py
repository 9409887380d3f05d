"""pymongo replace (upsert) and delete on the Mongo-wire server, as the Mongo applier does."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from bson import Binary, Int64
from pymongo import DeleteOne, ReplaceOne
from pymongo.errors import DuplicateKeyError

from stack.services.ferretdb import FerretDB

#: 2**62 + 1 has no exact double: a server that stored it as a double would change it.
BIG = Int64(2**62 + 1)

FIRST: list[dict[str, Any]] = [
    {"_id": 1, "name": "first", "old": "must vanish on replace"},
    {"_id": 2, "name": "second", "n": 1},
    {"_id": 3, "name": "third"},
]
#: What rows 1 and 2 become; row 3 is deleted.
REPLACED: list[dict[str, Any]] = [
    {"_id": 1, "name": "héllo wörld 😀 日本", "big": BIG, "f": -1.5, "none": None,
     "nested": {"a": {"b": [1, "x", None]}, "ok": True}},
    {"_id": 2, "name": "second", "bin": Binary(b"\x00\xff\x00bytes")},
]


def test_bulk_replace_upsert_delete_and_unique_index(ferretdb: FerretDB) -> None:
    db_name = f"smoke_{uuid.uuid4().hex[:8]}"
    with ferretdb.client() as client:
        assert db_name not in client.list_database_names()
        coll = client[db_name]["rows"]
        try:
            inserted = coll.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in FIRST])
            assert (inserted.matched_count, inserted.upserted_count) == (0, 3)
            assert inserted.upserted_ids == {0: 1, 1: 2, 2: 3}
            assert list(coll.find().sort("_id", 1)) == FIRST

            changed = coll.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in REPLACED]
                + [DeleteOne({"_id": 3})])
            assert (changed.matched_count, changed.modified_count, changed.upserted_count,
                    changed.deleted_count) == (2, 2, 0, 1)

            docs = list(coll.find().sort("_id", 1))
            # Binary subtype 0 comes back as plain bytes; everything else as it went in.
            assert docs == [REPLACED[0], {**REPLACED[1], "bin": b"\x00\xff\x00bytes"}]
            assert [list(d) for d in docs] == [list(d) for d in REPLACED]  # field order kept
            assert type(docs[0]["big"]) is Int64 and docs[0]["big"] == 2**62 + 1
            assert type(docs[0]["f"]) is float
            assert type(docs[1]["bin"]) is bytes

            coll.create_index("name", unique=True)
            with pytest.raises(DuplicateKeyError) as refused:
                coll.insert_one({"_id": 4, "name": "second"})
            assert refused.value.code == 11000
            assert coll.count_documents({}) == 2
        finally:
            client.drop_database(db_name)
        assert db_name not in client.list_database_names()
