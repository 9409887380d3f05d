"""Requests that ``trepctl`` makes of the extractor: provisioning and consistency checks.

Each lives in ZooKeeper (``<root>/<service>/extractor/<kind>``); the extractor takes it up,
publishes its progress there for ``trepctl`` and its status, and marks it done. How far a
provisioning got is decided by the THL itself (see ``extractor.provision``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from replicator.config import ServiceSettings
from replicator.zk import zk_call


@dataclass
class _Request:
    KIND: ClassVar[str] = ""

    @classmethod
    def from_json(cls: type[_R], data: bytes) -> _R:
        raw = json.loads(data) if data else {}
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()


_R = TypeVar("_R", bound=_Request)


@dataclass
class ProvisionRequest(_Request):
    """What ``trepctl provision`` asked for, and how far the extractor got."""

    KIND: ClassVar[str] = "provision"

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    #: Explicit tables as [schema, table] (empty with ``schemas`` empty: every replicated one).
    tables: list[list[str]] = field(default_factory=list)
    schemas: list[str] = field(default_factory=list)
    #: requested -> running -> done (or failed)
    state: str = "requested"
    #: The first seqno that can hold this request's chunks (where a restart scans from).
    started_seqno: int = -1
    #: The tables in provisioning order once resolved.
    resolved: list[list[str]] = field(default_factory=list)
    #: Estimated rows per table ("schema.table" -> rows), for progress.
    estimates: dict[str, int] = field(default_factory=dict)
    rows_done: int = 0
    rows_total: int = 0
    current: str = ""
    message: str = ""
    updated: float = 0.0


@dataclass
class CheckRequest(_Request):
    """What ``trepctl check`` asked for: row ranges of tables to checksum in the stream."""

    KIND: ClassVar[str] = "check"

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    #: Tables as [schema, table] (empty: every table the extractor replicates).
    tables: list[list[str]] = field(default_factory=list)
    #: Rows per checked range.
    limit: int = 10_000
    state: str = "requested"
    resolved: list[list[str]] = field(default_factory=list)
    #: Ranges emitted so far per "schema.table".
    ranges: dict[str, int] = field(default_factory=dict)
    rows_done: int = 0
    message: str = ""
    updated: float = 0.0
    started: float = field(default_factory=time.time)


def request_path(service: ServiceSettings, kind: str = ProvisionRequest.KIND) -> str:
    """The ZooKeeper node of a service's request of one kind."""
    return request_path_under(f"{service.zookeeper.root.rstrip('/')}/{service.service}", kind)


def request_path_under(base: str, kind: str = ProvisionRequest.KIND) -> str:
    """The request node of one kind under a service's node ``base``."""
    return f"{base}/extractor/{kind}"


def write_request(client: KazooClient, service: ServiceSettings,
                  req: ProvisionRequest | CheckRequest) -> None:
    """Create or replace the request node."""
    path = request_path(service, req.KIND)
    req.updated = time.time()
    try:
        zk_call(client, client.set_async, path, req.to_json())
    except NoNodeError:
        zk_call(client, client.create_async, path, req.to_json(), makepath=True)


def read_request(client: KazooClient, service: ServiceSettings,
                 kind: type[_R] = ProvisionRequest) -> _R | None:  # type: ignore[assignment]
    """The current request of one kind, if any."""
    try:
        data, _ = zk_call(client, client.get_async, request_path(service, kind.KIND))
    except NoNodeError:
        return None
    return kind.from_json(data)


def describe(req: Any) -> str:
    """A request in a few words, for errors."""
    return f"{req.KIND} {req.id} ({req.state})"
