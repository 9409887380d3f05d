"""The demo on a MongoDB target (FerretDB in the local stack): DDL does not flow there, so the
demo drops its collections before a run, and reads documents back for the comparison."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bson.decimal128 import Decimal128
from pymongo import MongoClient

from consumers.mongodb.config import MongoTarget
from consumers.mongodb.naming import field_name, namespace
from consumers.mongodb.server import is_ferretdb
from consumers.mongodb.types import DELETED
from demo.compare import Digest, digest
from demo.tables import SCHEMA, DemoTable
from trep.config import ServiceConfig


class MongoDemoTarget:
    """A MongoDB consumer group's target."""

    def __init__(self, cfg: ServiceConfig, group: str, tables: Sequence[DemoTable]) -> None:
        target = cfg.consumers[group].target
        if not isinstance(target, MongoTarget):
            raise TypeError(f"{group} is not a MongoDB group")
        self.target = target
        self.service = cfg.service
        self.tables = tables

    def _client(self) -> MongoClient[dict[str, Any]]:
        return MongoClient(self.target.url, **self.target.client_options())

    def rebuild(self) -> None:
        """Drop the demo collections (tombstones and keyless marks with them)."""
        with self._client() as client:
            ferretdb = is_ferretdb(client)
            for table in self.tables:
                ns = namespace(self.target, self.service, SCHEMA, table.name, ferretdb)
                client[ns.database].drop_collection(ns.collection)

    def digests(self) -> dict[str, Digest]:
        """Row count and checksum of the live documents, read back into the source's types
        where BSON differs (Decimal128 -> Decimal) so ``demo.compare`` prints them alike."""
        out = {}
        with self._client() as client:
            ferretdb = is_ferretdb(client)
            for table in self.tables:
                ns = namespace(self.target, self.service, SCHEMA, table.name, ferretdb)
                fields = [field_name(c, self.target.escape_names) for c in table.columns]
                rows = [[_plain(doc.get(f)) for f in fields] for doc in
                        client[ns.database][ns.collection].find({DELETED: {"$exists": False}})]
                out[table.name] = digest(rows)
        return out


def _plain(value: Any) -> Any:
    return value.to_decimal() if isinstance(value, Decimal128) else value
