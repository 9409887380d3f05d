"""How source names become MongoDB names: a table's database and collection, a column's field.

Mapping (``config.MongoTarget``): database = source schema, collection = source table, both
from the target's templates. Database names follow the one naming rule (``consumers.naming``):
a character the server refuses there becomes ``_`` (MongoDB: ``/\\. "$*<>:|?`` and U+0000;
FerretDB: anything but ASCII letters, digits, ``_`` and ``-``) and a name over 63 bytes is cut
with a hash; ``names: strict`` refuses such a name instead. Two tables meeting on one
collection are refused, the owner of each collection kept in the tracking database
(``trep_names``). With ``escape_names`` (the default) collection and field names
percent-encode the characters that MongoDB or FerretDB cannot take there (``%`` ``$`` ``.``
``"`` ``\\`` and control characters: injective, so no two names meet); without it, such a
name is refused. A name the server refuses is a data error naming the table
(``collection_problem``, ``refused_field``), never a silently changed one.
"""

from __future__ import annotations

from typing import NamedTuple

from consumers.mongodb.config import MongoTarget
from consumers.mongodb.types import RESERVED, refused_key
from consumers.naming import StoreRule

#: Characters percent-encoded in collection and field names (see the module docstring).
_ESCAPED = frozenset('%$."\\') | frozenset(chr(c) for c in range(0x20)) | {"\x7f"}


class Namespace(NamedTuple):
    """Where a table's documents live."""

    database: str
    collection: str

    def __str__(self) -> str:
        return f"{self.database}.{self.collection}"


#: Database names (MongoDB's manual, "Naming Restrictions"; 64 bytes with the terminator).
DATABASE = StoreRule("MongoDB database name", 63, takes=lambda ch: ch not in '/\\. "$*<>:|?\x00')
#: FerretDB 1.24 takes fewer characters in database names (they become SQLite tables).
FERRETDB_DATABASE = StoreRule("FerretDB database name", 63,
                              takes=lambda ch: ch.isascii() and (ch.isalnum() or ch in "_-"))


def namespace(cfg: MongoTarget, service: str, schema: str, table: str,
              ferretdb: bool) -> Namespace:
    """Where the documents of a source table live: the ``database`` template made a database
    name by the naming rule (UnfitName if it cannot be one), the ``collection`` template
    with schema and table escaped (``escape_names``)."""
    escape = escape_name if cfg.escape_names else str
    rule = FERRETDB_DATABASE if ferretdb else DATABASE
    raw = cfg.database.format(schema=schema, service=service)
    database = rule.name(raw, cfg.names, f"database {raw!r}")
    return Namespace(database,
                     cfg.collection.format(schema=escape(schema), table=escape(table)))


def escape_name(name: str) -> str:
    """``name`` with the characters no server takes percent-encoded (``a.b`` -> ``a%2Eb``)."""
    if not any(ch in _ESCAPED for ch in name):
        return name
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in name)


def field_name(column: str, escape: bool) -> str:
    """The document field of a column: escaped, and never one of the applier's own fields."""
    name = escape_name(column) if escape else column
    if escape and name in RESERVED:
        return "%5F" + name[1:]
    return name


def refused_field(name: str, ferretdb: bool) -> str | None:
    """Why a (verbatim) top-level field name cannot be stored, or None if it can."""
    if name in RESERVED:
        return f"it is one of the applier's own fields ({', '.join(sorted(RESERVED))})"
    problem = refused_key(name)
    if problem is None and ferretdb and any(ch in '"\\' or ord(ch) < 0x20 for ch in name):
        # FerretDB 1.24 (SQLite) breaks on these in top-level keys: '"' fails the insert,
        # '\\' and control characters make every later read of the collection fail.
        problem = "FerretDB cannot take '\"', '\\' or control characters in a top-level field"
    return problem


def collection_problem(database: str, name: str) -> str | None:
    """Why ``name`` cannot be a collection name, or None if it can."""
    if not name:
        return "it is empty"
    if "$" in name or "\x00" in name:
        return "it contains '$' or U+0000"
    if name.startswith("system."):
        return "names starting with 'system.' belong to the server"
    if len(f"{database}.{name}".encode()) > 255:
        return "database and collection together are longer than 255 bytes"
    return None
