"""The service file a test writes for its own service, and the names that keep services apart.

Every test makes a service of its own (its THL topic, tracking schema, znodes and source
schema all carry the service's name), so tests running at once on the shared stack never
see each other's data.
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path
from typing import Any

import yaml

from trep.config import ServiceConfig, load_config


def service_name(prefix: str) -> str:
    """A fresh service name: one letter naming the harness, then ten hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


#: Replication client ids taken by this test process so far.
_server_ids = itertools.count()
#: Ids per pytest worker: more than a run of the suite takes.
_IDS_PER_WORKER = 100_000


def server_id() -> int:
    """A replication client id (``server_id``) no other extractor or reader of this test run
    announces to the source.

    The source drops the older of two binlog clients with one id, and a client that retries
    drops the other in turn: two services of tests running at once must never share one.
    Each pytest worker draws from its own range, above the ids the demo, the benchmarks and
    the stack's servers use.
    """
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return _IDS_PER_WORKER * (1 + worker) + next(_server_ids)


def source_section(port: int) -> dict[str, Any]:
    """The ``source`` section for the stack's MariaDB source on ``port``."""
    return {"host": "127.0.0.1", "port": port, "user": "root", "password": ""}


def extractor_section(schema: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The ``extractor`` section that replicates ``schema`` only (``settings`` add to it)."""
    return {"server_id": server_id(),
            "filters": {"replicate": [f"{schema}.*"]}, **settings}


def write_service(path: Path, name: str, *, bootstrap: str, zookeeper: dict[str, Any],
                  source_port: int, extractor: dict[str, Any] | None = None,
                  consumers: dict[str, Any] | None = None) -> ServiceConfig:
    """(Re)write the service file at ``path``; the configuration it loads as."""
    doc: dict[str, Any] = {
        "service": name,
        "kafka": {"bootstrap_servers": bootstrap},
        "zookeeper": zookeeper,
        "source": source_section(source_port),
    }
    if extractor is not None:
        doc["extractor"] = extractor
    if consumers is not None:
        doc["consumers"] = consumers
    path.write_text(yaml.safe_dump(doc))
    return load_config(path)
