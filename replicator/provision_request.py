"""A provisioning request: what ``trepctl provision`` asks of the extractor, and its progress.

It lives in ZooKeeper (``<root>/<service>/extractor/provision``); the extractor takes it up,
publishes its progress there for ``trepctl`` and its status, and marks it done. How far a
request got is decided by the THL itself (see ``extractor.provision``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from replicator.config import ServiceSettings
from replicator.zk import zk_call


@dataclass
class ProvisionRequest:
    """What ``trepctl provision`` asked for, and how far the extractor got."""

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

    @classmethod
    def from_json(cls, data: bytes) -> ProvisionRequest:
        raw = json.loads(data) if data else {}
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()


def request_path(service: ServiceSettings) -> str:
    """The ZooKeeper node of a service's provisioning request."""
    return f"{service.zookeeper.root.rstrip('/')}/{service.service}/extractor/provision"


def write_request(client: KazooClient, service: ServiceSettings, req: ProvisionRequest) -> None:
    """Create or replace the request node."""
    path = request_path(service)
    req.updated = time.time()
    try:
        zk_call(client, client.set_async, path, req.to_json())
    except NoNodeError:
        zk_call(client, client.create_async, path, req.to_json(), makepath=True)


def read_request(client: KazooClient, service: ServiceSettings) -> ProvisionRequest | None:
    """The current request, if any."""
    try:
        data, _ = zk_call(client, client.get_async, request_path(service))
    except NoNodeError:
        return None
    return ProvisionRequest.from_json(data)
