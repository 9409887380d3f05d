"""The servers of the local stack, in start order (ZooKeeper before Kafka, and so on).

Each module exposes one ``Service`` subclass and a factory; this registry is the only place
that knows them all, so the CLI, the Makefile and the test fixtures stay in step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from stack.service import Service

#: service name -> "module:factory"
_FACTORIES: dict[str, str] = {
    "zookeeper": "stack.services.zookeeper:service",
    "kafka": "stack.services.kafka:service",
    "mariadb-source": "stack.services.mariadb:source",
    "mariadb-target": "stack.services.mariadb:target",
    "postgresql": "stack.services.postgresql:service",
    "elasticsearch": "stack.services.elasticsearch:service",
    "ferretdb": "stack.services.ferretdb:service",
    "spark": "stack.services.spark:service",
    "spark-connect": "stack.services.spark_connect:service",
    "apicurio": "stack.services.apicurio:service",
    "spark-standalone": "stack.services.spark_standalone:service",
    "mariadb-scratch": "stack.services.mariadb:scratch",
    "zookeeper-scratch": "stack.services.zookeeper:scratch",
    "kafka-scratch": "stack.services.kafka:scratch",
}

NAMES: tuple[str, ...] = tuple(_FACTORIES)
#: Second servers of the tests that stop or purge one under a running service (test-only:
#: not in docker-compose.yml, where no test runs).
SCRATCH: tuple[str, ...] = ("mariadb-scratch", "zookeeper-scratch", "kafka-scratch")
#: Started only when named (by the test that needs them), never by a bare ``stack up``.
ON_DEMAND: tuple[str, ...] = ("spark-standalone", "spark-connect", *SCRATCH)


def get(name: str) -> Service:
    """The service called ``name``; unknown names list the known ones."""
    try:
        module, factory = _FACTORIES[name].split(":")
    except KeyError:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(NAMES)}") from None
    make: Callable[[], Service] = getattr(importlib.import_module(module), factory)
    return make()


def select(names: list[str] | None = None) -> list[Service]:
    """Services by name in start order; all of them when ``names`` is empty."""
    wanted = names or [n for n in NAMES if n not in ON_DEMAND]
    for name in wanted:
        if name not in _FACTORIES:
            raise KeyError(f"unknown service {name!r}; known: {', '.join(NAMES)}")
    return [get(n) for n in NAMES if n in wanted]
