"""The service file a test writes for its own service, and the names that keep services apart.

Every test makes a service of its own (its THL topic, tracking schema, znodes and source
schema all carry the service's name), so tests running at once on the shared stack never
see each other's data.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from trep.config import ServiceConfig, load_config


def service_name(prefix: str) -> str:
    """A fresh service name: one letter naming the harness, then ten hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def server_id(name: str, first: int, count: int) -> int:
    """The extractor's replica server id, one of ``count`` from ``first``.

    Two extractors with one server id on the same source throw each other off; each harness
    draws from its own range, by the name's first hex digits.
    """
    return first + int(name[1:5], 16) % count


def source_section(port: int) -> dict[str, Any]:
    """The ``source`` section for the stack's MariaDB source on ``port``."""
    return {"host": "127.0.0.1", "port": port, "user": "root", "password": ""}


def extractor_section(name: str, schema: str, first_id: int, ids: int,
                      settings: dict[str, Any]) -> dict[str, Any]:
    """The ``extractor`` section that replicates ``schema`` only (``settings`` add to it)."""
    return {"server_id": server_id(name, first_id, ids),
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
