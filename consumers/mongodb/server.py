"""What kind of MongoDB-wire server a target is, from its ``buildInfo`` and ``hello`` answers.

Never from ``hello`` alone: FerretDB 1.24 answers ``hello`` like a server with sessions
(``logicalSessionTimeoutMinutes``) although it has no transactions (1.24 refuses
``startTransaction`` on an insert; other versions were seen to ignore it, which would only
look atomic). FerretDB names itself in ``buildInfo`` (``ferretdbVersion``). A real MongoDB
has transactions as a replica set member or behind a mongos, never as a standalone mongod;
this applier asks for 4.4+, where a transaction may create the collections it writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Replica sets have multi-document transactions from 4.0 and sharded clusters from 4.2,
#: but collections can be created inside one only from 4.4 on.
TRANSACTIONS_FROM = (4, 4)


@dataclass(frozen=True)
class ServerTraits:
    """What the applier needs to know about the server."""

    #: For messages: "FerretDB v1.24.0", "MongoDB 7.0.14 (replica set rs0)" ...
    name: str
    ferretdb: bool
    #: Multi-document transactions really exist there.
    transactions: bool
    #: Why not, when ``transactions`` is False.
    no_transactions_because: str
    decimal128: bool
    #: ``writeErrors[].index`` names the op that failed (FerretDB 1.24 says 0 whatever op
    #: failed, seen on an ordered update batch).
    reliable_error_index: bool
    #: Every update statement scans the whole collection: FerretDB 1.24 (SQLite) pushes a
    #: filter down only when it is exactly ``{_id: <string or ObjectId>}``, so a guarded
    #: upsert ``{_id, _seqno: {$lt: S}}`` costs a scan per document.
    scanning_updates: bool = False
    max_bson_size: int = 16 * 1024 * 1024


def _version(build_info: Mapping[str, Any]) -> tuple[int, ...]:
    array = build_info.get("versionArray")
    if isinstance(array, list) and array and all(isinstance(p, int) for p in array):
        return tuple(array[:3])
    text = str(build_info.get("version", "0"))
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def detect(build_info: Mapping[str, Any], hello: Mapping[str, Any]) -> ServerTraits:
    """The traits of a server from its ``buildInfo`` and ``hello`` answers."""
    max_bson = int(hello.get("maxBsonObjectSize") or build_info.get("maxBsonObjectSize")
                   or 16 * 1024 * 1024)
    version = _version(build_info)
    shown = ".".join(str(p) for p in version)
    ferret = build_info.get("ferretdbVersion")
    if ferret:
        return ServerTraits(
            name=f"FerretDB {ferret} (MongoDB {build_info.get('version', '?')} wire)",
            ferretdb=True, transactions=False,
            no_transactions_because=(
                f"FerretDB {ferret} has no multi-document transactions: it accepts "
                "transaction fields and ignores them, so nothing would be atomic"),
            decimal128=False, reliable_error_index=False, scanning_updates=True,
            max_bson_size=max_bson)
    set_name = hello.get("setName")
    mongos = hello.get("msg") == "isdbgrid"
    sessions = hello.get("logicalSessionTimeoutMinutes") is not None
    if set_name or mongos:
        kind = f"replica set {set_name}" if set_name else "sharded cluster (mongos)"
        ok = version >= TRANSACTIONS_FROM and sessions
    else:
        kind, ok = "standalone", False
    if ok:
        why = ""
    elif kind == "standalone":
        why = ("a standalone mongod has no multi-document transactions; run it as a "
               "(single-member) replica set")
    else:
        why = (f"MongoDB {shown} as a {kind} cannot create collections inside a "
               "transaction (4.4+ can)")
    return ServerTraits(name=f"MongoDB {shown} ({kind})", ferretdb=False, transactions=ok,
                        no_transactions_because=why, decimal128=True,
                        reliable_error_index=True, max_bson_size=max_bson)


def is_ferretdb(client: Any) -> bool:
    """Whether a connected pymongo client talks to FerretDB (for readers outside the
    applier, which take names by the server's rule, ``naming.namespace``)."""
    return "ferretdbVersion" in client.admin.command("buildInfo")


class Unsupported(ValueError):
    """The configuration asks for something this server cannot do."""


def use_transactions(mode: str, traits: ServerTraits) -> bool:
    """Whether blocks run in transactions: ``on`` (refused where impossible), ``off``,
    or ``auto``."""
    if mode == "off":
        return False
    if mode == "on" and not traits.transactions:
        raise Unsupported(f"transactions: on, but {traits.no_transactions_because}. Use "
                          "transactions: auto or off (seqno-guarded writes, position last)")
    return traits.transactions


def use_decimal128(mode: str, traits: ServerTraits) -> bool:
    """Whether DECIMALs and big integers are stored as Decimal128."""
    if mode == "string":
        return False
    if mode == "decimal128" and not traits.decimal128:
        raise Unsupported(f"decimal: decimal128, but {traits.name} has no Decimal128 (FerretDB "
                          "drops the connection on one); use decimal: auto or string")
    return traits.decimal128
