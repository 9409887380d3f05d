"""The one registry of applier types: the configuration model and the factory of each ``type``.

A new kind of target is one folder under ``consumers/`` (``config.py``, ``types.py``,
``naming.py``, ``positions.py``, ``readback.py``, ``errors.py``, ``applier.py``: the same
names in every kind, for the parts it has) and one entry here; the runtime reads the
applier's capabilities and never asks which kind it is. Applier modules are imported only
when a group of their type is built, so a service with SQL targets never imports pyspark or
the Elasticsearch client.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from consumers.applier import Applier
from consumers.changes.config import ChangesTarget
from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.memory.config import MemoryTarget
from consumers.metrics import ConsumerMetrics
from consumers.mongodb.config import MongoTarget
from consumers.schema_changes import SchemaChangeMode
from consumers.sql.config import SqlTarget
from consumers.warehouse.config import WarehouseTarget
from replicator.config import ServiceSettings

#: Every target configuration, told apart by its ``type``.
TargetConfig = Annotated[SqlTarget | MemoryTarget | ElasticsearchTarget | ChangesTarget
                         | MongoTarget | WarehouseTarget, Field(discriminator="type")]

#: type -> "module:factory"; a factory takes (target configuration, ApplierContext).
_FACTORIES: dict[str, str] = {
    "sql": "consumers.sql.applier:SqlApplier",
    "memory": "consumers.memory.applier:MemoryApplier",
    "elasticsearch": "consumers.elasticsearch.applier:ElasticsearchApplier",
    "changes": "consumers.changes.applier:ChangesApplier",
    "mongodb": "consumers.mongodb.applier:MongoApplier",
    "warehouse": "consumers.warehouse.applier:WarehouseApplier",
}


@dataclass(frozen=True)
class ApplierContext:
    """What an applier may know about the service and group it serves."""

    service: ServiceSettings
    group: str
    #: The group's metrics, for an applier that counts what it does (values changed by a
    #: policy); by default a private registry nobody scrapes.
    metrics: ConsumerMetrics = field(default_factory=ConsumerMetrics.disabled)
    #: The channel this applier serves (parallel apply, ``channels: N``): the ``task_id``
    #: of its position row. 0 for a group with one channel.
    channel: int = 0
    #: The group's ``schema_changes`` mode: what the applier does with a column the source
    #: dropped (``consumers.schema_changes``).
    schema_changes: SchemaChangeMode = "lenient"

    @property
    def tracking_schema(self) -> str:
        """``tungsten_<service>``: where the target keeps the group's position."""
        return self.service.tracking_schema


def applier_types() -> tuple[str, ...]:
    """The registered ``type`` names."""
    return tuple(_FACTORIES)


def build_applier(target: Any, ctx: ApplierContext) -> Applier:
    """The applier of one target configuration."""
    module, name = _FACTORIES[target.type].split(":")
    factory = getattr(importlib.import_module(module), name)
    applier: Applier = factory(target, ctx)
    return applier
