"""Kafka keys and headers of THL records.

The key is ``<seqno:020d>.<fragno:06d>``: unique per fragment, so compaction only removes a
re-published duplicate, and it sorts in seqno order as plain text in any Kafka tool.

A fragment whose encoded value is larger than one Kafka record may be (a row of many MiB) is
cut into chunks (``thl_topics.chunks``), records of their own in the same Kafka transaction,
keyed ``<seqno:020d>.<fragno:06d>.<index:04d>/<count:04d>``: still unique and in order, and
readers put them back together before decoding.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from thl_topics.event import ThlEvent, ThlValue

HEADER_EPOCH = "epoch"
HEADER_FINGERPRINT = "schema_fingerprint"
#: The extractor run that wrote the record: a fresh id at each extractor start, which is
#: also where a new epoch starts. Consumers refuse a record of another run that does not
#: start an epoch: the topic was deleted and recreated under them (``consumers.feed``).
HEADER_RUN = "run_id"
#: Event metadata of a provisioned chunk (JSON marks: request id, table, chunk number, first,
#: end, rows, last key); also a record header, readable without decoding the value.
META_PROVISION = HEADER_PROVISION = "provision"
#: Event metadata of a binlog transaction touching tables being provisioned (JSON list of
#: [schema, table]).
META_PROVISIONING = "provisioning"
#: Event metadata of a consistency check: a row range's count and digest on the source at
#: this point of the THL (JSON: request id, table, range, key bounds, columns, digest).
META_CHECK = "check"
#: Event metadata of a fragment deleting or updating rows of a table other tables reference
#: with cascading foreign keys: the rules and the child tables' specs (JSON,
#: ``thl_topics.foreign_keys``).
META_FOREIGN_KEYS = "foreign_keys"


#: The chunk header of a chunked fragment's records: ``<index>/<count>``.
HEADER_CHUNK = "chunk"


def record_key(seqno: int, fragno: int, chunk: tuple[int, int] | None = None) -> bytes:
    """The record key of fragment ``fragno`` of ``seqno`` (of its chunk ``(index, count)``
    if it is cut into chunks)."""
    if chunk is None:
        return f"{seqno:020d}.{fragno:06d}".encode()
    return f"{seqno:020d}.{fragno:06d}.{chunk[0]:04d}/{chunk[1]:04d}".encode()


def parse_key(key: bytes) -> tuple[int, int]:
    """(seqno, fragno) from a record key (a chunk's too); ValueError if it is not a THL key."""
    seqno, _, rest = key.decode("ascii").partition(".")
    fragno, _, _ = rest.partition(".")
    return int(seqno), int(fragno)


def parse_chunk(key: bytes) -> tuple[int, int] | None:
    """(index, count) of a chunk's record key; None for a whole fragment's."""
    parts = key.split(b".", 2)
    if len(parts) < 3:
        return None
    index, _, count = parts[2].partition(b"/")
    return int(index), int(count)


def record_headers(event: ThlEvent, fingerprint_hex: str, marks: bool = True,
                   run_id: str = "") -> list[tuple[str, str | bytes | None]]:
    """Headers on every THL record: the epoch first, then what lets tools filter unread
    (``marks``: the provisioning marks too; a chunked fragment has them on its last chunk,
    so a reader that counts them by header counts the fragment once)."""
    headers: list[tuple[str, str | bytes | None]] = [
        (HEADER_EPOCH, str(event.epoch).encode()),
        (HEADER_RUN, run_id.encode()),
        ("seqno", str(event.seqno).encode()),
        ("fragno", str(event.fragno).encode()),
        ("last_frag", b"true" if event.last_frag else b"false"),
        ("source_id", event.source_id.encode()),
        ("event_id", event.event_id.encode()),
        (HEADER_FINGERPRINT, fingerprint_hex.encode()),
    ]
    provision = event.metadata.get(HEADER_PROVISION) if marks else None
    if provision is not None:
        headers.append((HEADER_PROVISION, provision.encode()))
    return headers


def run_of(headers: object) -> str:
    """The ``run_id`` header of a message's headers ("" for records written before it
    existed)."""
    if isinstance(headers, list):
        for name, value in headers:
            if name == HEADER_RUN:
                return value.decode() if isinstance(value, bytes) else str(value or "")
    return ""


@dataclass(frozen=True)
class RecordHeaders:
    """The headers of one THL record, as read back."""

    epoch: int
    seqno: int
    fragno: int
    last_frag: bool
    source_id: str
    event_id: str
    fingerprint: str

    @classmethod
    def parse(cls, headers: object) -> RecordHeaders:
        """Parse a message's headers; KeyError/ValueError if one is missing or malformed."""
        pairs: Iterable[tuple[str, object]] = (
            headers.items() if isinstance(headers, dict)
            else headers if isinstance(headers, list) else [])
        h = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in pairs}
        return cls(int(h[HEADER_EPOCH]), int(h["seqno"]), int(h["fragno"]),
                   h["last_frag"] == "true", h["source_id"], h["event_id"],
                   h[HEADER_FINGERPRINT])


def encode_key(values: list[ThlValue]) -> list[Any]:
    """Key values (THL values) in JSON, bytes tagged: how check and chunk marks carry keys."""
    return [{"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v
            for v in values]


def decode_key(values: list[Any]) -> list[ThlValue]:
    """The key values ``encode_key`` wrote."""
    return [base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in values]
