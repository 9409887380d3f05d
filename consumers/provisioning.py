"""What provisioning asks of every applier (marks set by ``extractor.provision``).

- A provisioned chunk is an event whose metadata ``provision`` holds its marks: the table,
  the chunk number, whether it is the table's first and last chunk. On the table's first
  chunk the target empties the table (re-provisioning repairs a target that drifted), then
  every chunk's rows are written as upserts.
- A binlog transaction touching a table of a running provisioning that is not done yet
  carries ``provisioning`` (the tables concerned): the target applies those row changes
  idempotently (insert or replace, delete if present; for a table without a key, no
  complaint about a row it does not have), because the row may not have arrived yet; the
  table's first chunk empties it and its chunks bring its state as of each snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from thl_topics.event import ThlEvent
from thl_topics.records import META_PROVISION, META_PROVISIONING


@dataclass(frozen=True)
class Chunk:
    """The marks of one provisioned chunk."""

    request: str
    schema: str
    table: str
    number: int
    first: bool
    end: bool
    rows: int


def chunk_of(event: ThlEvent) -> Chunk | None:
    """The chunk ``event`` carries, if it is a provisioned one."""
    raw = event.metadata.get(META_PROVISION)
    if raw is None:
        return None
    marks = json.loads(raw)
    if marks.get("begin"):
        return None  # the request's opening event: DDL only
    schema, table = marks["table"]
    return Chunk(str(marks["id"]), schema, table, int(marks["chunk"]), bool(marks["first"]),
                 bool(marks["end"]), int(marks["rows"]))


def idempotent_tables(event: ThlEvent) -> set[tuple[str, str]]:
    """Tables whose row changes in ``event`` must be applied idempotently."""
    out: set[tuple[str, str]] = set()
    raw = event.metadata.get(META_PROVISIONING)
    if raw is not None:
        out.update((s, t) for s, t in json.loads(raw))
    chunk = chunk_of(event)
    if chunk is not None:
        out.add((chunk.schema, chunk.table))
    return out
