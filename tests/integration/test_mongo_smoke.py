"""pymongo replace (upsert) and delete on the Mongo-wire server, as the Mongo applier does."""

from __future__ import annotations

import uuid

import pytest
from bson import Binary, Int64
from pymongo import DeleteOne, ReplaceOne
from pymongo.errors import DuplicateKeyError

from stack.services.ferretdb import FerretDB


def test_bulk_replace_upsert_and_delete(ferretdb: FerretDB) -> None:
    db_name = f"smoke_{uuid.uuid4().hex[:8]}"
    with ferretdb.client() as client:
        coll = client[db_name]["rows"]
        try:
            first = coll.bulk_write([
                ReplaceOne({"_id": 1}, {"_id": 1, "name": "héllo 😀", "n": Int64(2**62)},
                           upsert=True),
                ReplaceOne({"_id": 2}, {"_id": 2, "nested": {"a": [1, None]}, "f": 1.5},
                           upsert=True),
                ReplaceOne({"_id": 3}, {"_id": 3, "b": Binary(b"\x00\xff\x00")}, upsert=True),
            ], ordered=True)
            assert first.upserted_count == 3
            second = coll.bulk_write([
                ReplaceOne({"_id": 1}, {"_id": 1, "name": "replaced", "n": None}, upsert=True),
                DeleteOne({"_id": 2}),
            ], ordered=True)
            assert (second.modified_count, second.deleted_count) == (1, 1)
            docs = list(coll.find().sort("_id"))
            assert docs == [
                {"_id": 1, "name": "replaced", "n": None},
                {"_id": 3, "b": b"\x00\xff\x00"},
            ]
            coll.create_index("name", unique=True)
            with pytest.raises(DuplicateKeyError):
                coll.insert_one({"_id": 4, "name": "replaced"})
        finally:
            client.drop_database(db_name)
