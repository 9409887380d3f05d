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
- A transaction that comes before a provisioning's first seqno, while the request is known
  (``trepctl provision`` wrote it to ZooKeeper), is applied the same way for the tables the
  request covers (``PendingProvisioning``): those tables are emptied and reloaded further on
  in the log, so a change meeting a row that drifted on the target is no divergence. That is
  how a group stopped on a drifted table is repaired: ``trepctl provision -table t``, then
  ``trepctl online``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from replicator.requests import ProvisionRequest
from thl_topics.event import RowChange, ThlEvent
from thl_topics.records import META_PROVISION, META_PROVISIONING

log = logging.getLogger(__name__)

#: Seconds between two reads of the provisioning request while events are marked.
_ASK_EVERY_S = 1.0


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


def covers(req: ProvisionRequest, schema: str, table: str) -> bool:
    """Whether ``req`` provisions ``schema.table`` (its resolved list once the extractor has
    one, else what ``trepctl`` asked: tables, schemas, or everything)."""
    if req.resolved:
        return [schema, table] in req.resolved
    if req.tables:
        return [schema, table] in req.tables
    if req.schemas:
        return schema in req.schemas
    return True


def preceding_tables(req: ProvisionRequest | None, event: ThlEvent) -> set[tuple[str, str]]:
    """The tables of ``event`` that ``req`` empties and reloads later in the log."""
    if req is None or req.state not in ("requested", "running", "done"):
        return set()
    if req.state != "requested" and not 0 <= event.seqno < req.started_seqno:
        return set()  # at or after its first seqno: the extractor marked what it had to
    return {(i.schema, i.table) for i in event.data
            if isinstance(i, RowChange) and covers(req, i.schema, i.table)}


def with_provisioning(event: ThlEvent, tables: set[tuple[str, str]]) -> ThlEvent:
    """``event`` with ``tables`` added to its ``provisioning`` mark."""
    raw = event.metadata.get(META_PROVISIONING)
    marked = {(s, t) for s, t in json.loads(raw)} if raw is not None else set()
    if tables <= marked:
        return event
    metadata = dict(event.metadata)
    metadata[META_PROVISIONING] = json.dumps(sorted([s, t] for s, t in marked | tables))
    return replace(event, metadata=metadata)


class PendingProvisioning:
    """The service's provisioning request as last read from ZooKeeper.

    Read again at most once a second and without waiting (an asynchronous read picked up at
    a later event), so that neither the round trip nor ZooKeeper being away slows apply;
    while it is away the last request read stands.
    """

    def __init__(self, client: KazooClient, path: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._path = path
        self._clock = clock
        self._asked_at = float("-inf")
        self._reading: Any = None
        self._lock = threading.Lock()  # channels prepare their events side by side
        self.request: ProvisionRequest | None = None

    def read_now(self, timeout: float = 5.0) -> None:
        """Read the request and wait for it (at the start of a session: the first event may
        be the one a group stopped on before the operator asked for provisioning)."""
        with self._lock:
            self._reading = None
            self._asked_at = self._clock()
            self._take(lambda: self._client.get_async(self._path).get(timeout=timeout))

    def mark(self, event: ThlEvent) -> ThlEvent:
        """``event``, its changes to tables of a provisioning still ahead marked
        ``provisioning``."""
        # Between two asks (a second apart) with no answer awaited there is nothing to
        # refresh: no lock taken (once an event, on every channel's thread).
        if self._reading is not None or self._clock() - self._asked_at >= _ASK_EVERY_S:
            with self._lock:
                self._refresh()
        tables = preceding_tables(self.request, event)
        return with_provisioning(event, tables) if tables else event

    def _refresh(self) -> None:
        reading = self._reading
        if reading is not None and reading.ready():
            self._reading = None
            self._take(lambda: reading.get(block=False))
        now = self._clock()
        if self._reading is None and now - self._asked_at >= _ASK_EVERY_S:
            self._asked_at = now
            try:
                self._reading = self._client.get_async(self._path)
            except KazooException as exc:  # a closed session: ask again later
                log.debug("provisioning request not asked for: %s", exc)

    def _take(self, answer: Callable[[], Any]) -> None:
        """The request from ZooKeeper's ``answer``; while ZooKeeper is away, the last one
        read stands."""
        try:
            data, _ = answer()
        except NoNodeError:
            self.request = None
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("provisioning request not read: %s", exc)
        else:
            self.request = ProvisionRequest.from_json(data)
