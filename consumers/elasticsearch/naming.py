"""Index names and document ids: where a row lives in Elasticsearch.

Index: one per source table, from the target's template (``{schema}.{table}`` by default),
lower-cased (Elasticsearch allows nothing else), with the characters it refuses in index
names replaced by ``_``. Different tables can therefore meet on one name (``Shop.Items`` and
``shop.items``, ``a b`` and ``a_b``): the applier records the owning table in the index
mapping's ``_meta`` and refuses a second table with a data error. A name longer than
Elasticsearch's 255 bytes is cut and ends with 8 hex digits of its SHA-256.

Document id (``_id``), from the primary key columns in column order:

- one key column whose value is a number: its decimal text (``42``);
- one key column whose value is a non-empty string not starting with ``[`` or ``~``, at most
  512 bytes (Elasticsearch's limit): the string itself;
- anything else (composite keys, binary keys (base64), empty strings, strings starting with
  ``[`` or ``~``): the JSON array of the key values, ``[3,"x"]``;
- an id still longer than 512 bytes: ``~sha256:`` and the SHA-256 of that JSON.

The forms cannot meet (a plain string never starts with ``[`` or ``~``), so two keys of one
table always get two ids. A table without a primary key: ``~`` and the SHA-256 of the whole
row (column names and values), so equal rows share one document that counts them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from consumers.elasticsearch.types import JsonValue
from consumers.naming import NameOwners, NamePolicy, Overrides, StoreRule, UnfitName

#: Characters Elasticsearch refuses in index names (8.x), and its length limit in bytes.
INVALID_INDEX_CHARACTERS = frozenset('\\/*?"<>| ,#:')
MAX_INDEX_BYTES = 255
#: Elasticsearch's limit on ``_id``.
MAX_ID_BYTES = 512
#: Suffix of the index that holds every document in tombstone mode (the alias filters it).
TOMBSTONE_SUFFIX = ".all"


class IndexNameError(UnfitName):
    """No valid index name can be made for a table; the message says how to name one."""


#: Elasticsearch's index names (8.x): lower case, these characters refused, 255 bytes.
INDEX = StoreRule("Elasticsearch index name", MAX_INDEX_BYTES,
                  takes=lambda ch: ch not in INVALID_INDEX_CHARACTERS, lower=True,
                  reserved=frozenset({".", ".."}))


def index_owners() -> NameOwners:
    """Which table each index holds (the owner is also in the index mapping's ``_meta``)."""
    return NameOwners("index", "indices")


def index_name(template: str, service: str, schema: str, table: str,
               overrides: dict[str, str] | None = None, reserve: int = 0,
               policy: NamePolicy = "map") -> str:
    """The index of ``schema.table``: an override, else the template, made valid
    (IndexNameError if it cannot be, or ``policy`` is strict and it would change).

    ``reserve`` bytes are kept free for a suffix (``.all`` in tombstone mode).
    """
    chosen = Overrides(overrides or {}).match(schema, table)
    if chosen is None:
        chosen = template
    raw = chosen.format(schema=schema, table=table, service=service)
    problem = INDEX.problem(raw, reserve) if policy == "strict" else None
    if problem is not None:
        raise IndexNameError(f"table {schema}.{table}: {problem} ({raw!r}; names: strict); "
                             "give it a name in the target's `indices`, or set names: map")
    name = INDEX.fit(raw, reserve)
    if not name or name in INDEX.reserved or name[0] in "-_+":
        raise IndexNameError(
            f"table {schema}.{table} would go to index {name!r}, which Elasticsearch "
            "refuses (empty, '.', '..', or starting with '-', '_' or '+'); give it a name "
            "in the target's `indices` or a template with a prefix")
    return name


def document_id(key: Sequence[JsonValue]) -> str:
    """The ``_id`` of a row from its key values (JSON values, key columns in column order)."""
    if len(key) == 1:
        value = key[0]
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, str) and value and value[0] not in "[~" \
                and len(value.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
            return value
    text = json.dumps(list(key), ensure_ascii=False, separators=(",", ":"))
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_ID_BYTES:
        return text
    return "~sha256:" + hashlib.sha256(encoded).hexdigest()


def row_id(names: Sequence[str], values: Sequence[JsonValue]) -> str:
    """The ``_id`` of a row of a table without a key: the hash of the whole row."""
    text = json.dumps([list(names), list(values)], ensure_ascii=False, separators=(",", ":"))
    return "~" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
