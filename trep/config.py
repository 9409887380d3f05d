"""The service configuration file: one YAML for the extractor and every consumer group.

```yaml
service: shop
kafka: {bootstrap_servers: "kafka1:9092"}
zookeeper: {hosts: "zk1:2181"}
source: {host: db1, port: 3306, user: tungsten}
extractor: {server_id: 1001}
consumers:
  mariadb:
    target: {type: sql, url: "mysql+pymysql://tungsten@db2:3306/"}
metrics: {port: 9108}
```

Environment variables override the file: ``TREP_<SECTION>__<FIELD>``, e.g.
``TREP_SOURCE__PASSWORD``. Every field and its default is documented in its model:
``replicator.config`` (service, kafka, zookeeper, source, metrics),
``extractor.config`` and ``consumers.config`` (with one model per target type).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from consumers.config import GroupConfig
from extractor.config import ExtractorConfig
from replicator.config import (
    ConfigError,
    MetricsConfig,
    ServiceSettings,
    read_yaml,
    validation_problems,
)

__all__ = ["ConfigError", "ServiceConfig", "load_config"]


class ServiceConfig(ServiceSettings):
    """The whole service configuration."""

    extractor: ExtractorConfig = ExtractorConfig()
    #: Consumer groups by name (the Kafka group is ``tungsten-<service>-<name>``).
    consumers: dict[str, GroupConfig] = Field(default_factory=dict)
    metrics: MetricsConfig = MetricsConfig()

    @field_validator("consumers")
    @classmethod
    def _group_names(cls, value: dict[str, GroupConfig]) -> dict[str, GroupConfig]:
        for name in value:
            if not name or not all(c.isalnum() or c in "_-" for c in name):
                raise ValueError(f"consumer group name {name!r}: use letters, digits, '_', '-'")
        return value


def load_config(path: Path | str, **overrides: Any) -> ServiceConfig:
    """Read a YAML configuration; raise ConfigError naming the file and the bad fields."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from exc
    data = read_yaml(str(path), text)
    data.update(overrides)
    try:
        return ServiceConfig(**data)
    except ValidationError as exc:
        raise validation_problems(str(path), exc) from exc
