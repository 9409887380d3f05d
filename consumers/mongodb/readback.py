"""Reading a replicated table back from MongoDB as source rows (consistency checks).

Every live document of the table's collection (tombstones, ``_deleted``, are not rows) is
turned back into the row it stands for: each field through the type map backwards
(``types.thl_value``), a JSON column from its embedded value or its text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from consumers.cascades import chunks, integer_lookup
from consumers.check import CheckRange
from consumers.errors import DataError
from consumers.mongodb.blocks import RawDoc
from consumers.mongodb.config import MongoTarget
from consumers.mongodb.errors import classify
from consumers.mongodb.naming import field_name, namespace
from consumers.mongodb.types import DELETED, ID, ValueRefused, thl_value
from thl_topics.event import ColumnSpec, ThlValue


def read_range(client: MongoClient[RawDoc], cfg: MongoTarget, service: str, check: CheckRange,
               target: str, ferretdb: bool) -> Iterator[list[ThlValue]]:
    """The live documents of a checked key range, as the source rows they stand for, in
    THL values (``consumers.check``): the type map backwards. The range is cut here, not
    in the query: key order is the source's (typed) order, not BSON's."""
    names = [c.name for c in check.specs]
    key_at = [names.index(k) for k in check.key]
    for values in _rows(client, cfg, service, check.schema, check.table, check.specs,
                        [{}], target, ferretdb, "a check"):
        if key_at and not check.contains([values[i] for i in key_at]):
            continue
        yield values


def rows_matching(client: MongoClient[RawDoc], cfg: MongoTarget, service: str, schema: str,
                  table: str, specs: list[ColumnSpec], columns: Sequence[str],
                  values: Sequence[tuple[ThlValue, ...]], target: str, ferretdb: bool
                  ) -> Iterator[list[ThlValue]]:
    """The live documents whose ``columns`` hold one of ``values`` (a cascade's child
    rows), as THL values in ``specs`` order: matched by the query on integer columns, else
    every document (the caller keeps exact matches)."""
    filters: list[dict[str, Any]] = [{}]
    if integer_lookup(specs, columns, values):
        fields = [field_name(c, cfg.escape_names) for c in columns]
        filters = [{fields[0]: {"$in": [v[0] for v in chunk]}} if len(fields) == 1 else
                   {"$or": [dict(zip(fields, row, strict=True)) for row in chunk]}
                   for chunk in chunks(values)]
    yield from _rows(client, cfg, service, schema, table, specs, filters, target, ferretdb,
                     "a cascade")


def _rows(client: MongoClient[RawDoc], cfg: MongoTarget, service: str, schema: str,
          table: str, specs: list[ColumnSpec], filters: list[dict[str, Any]], target: str,
          ferretdb: bool, doing: str) -> Iterator[list[ThlValue]]:
    ns = namespace(cfg, service, schema, table, ferretdb)
    fields = [field_name(c.name, cfg.escape_names) for c in specs]
    json_text = [cfg.is_json(schema, table, c.name) for c in specs]
    coll = client[ns.database][ns.collection]
    try:
        for query in filters:
            for doc in coll.find({**query, DELETED: {"$exists": False}}):
                try:
                    yield [thl_value(spec, doc.get(f), j)
                           for spec, f, j in zip(specs, fields, json_text, strict=True)]
                except ValueRefused as exc:
                    raise DataError(f"{target}: {ns}: document {doc.get(ID)!r} cannot be "
                                    f"read for {doing}: {exc}") from exc
    except PyMongoError as exc:
        raise classify(exc, target, f"reading {ns} for {doing}") from exc
