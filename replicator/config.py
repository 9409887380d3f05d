"""Configuration shared by every part of a service: its name, Kafka, ZooKeeper, the source.

The whole service file (``trep.config.ServiceConfig``) adds the extractor's and the consumer
groups' sections; each part reads only what it needs from here. Every field has a documented
default; secrets are ``SecretStr`` and never appear in logs or in ``repr``.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


class ConfigError(ValueError):
    """The configuration file or environment is unusable; the message says what to fix."""


class KafkaConfig(BaseModel):
    """The Kafka cluster that holds the THL topic."""

    bootstrap_servers: str = "127.0.0.1:19092"
    #: THL topic name; default ``thl.<service>``.
    thl_topic: str | None = None
    replication_factor: int = Field(1, ge=1)
    #: Largest THL record; fragments are kept well below it.
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=1024 * 1024)
    #: Seconds a produce/commit may take before the producer is thrown away and rebuilt.
    transaction_timeout_s: float = Field(60.0, gt=0)

    def client(self, **settings: Any) -> dict[str, Any]:
        """librdkafka settings of a client of this cluster, plus ``settings``."""
        return {"bootstrap.servers": self.bootstrap_servers, **settings}


class ZooKeeperConfig(BaseModel):
    """ZooKeeper: position mirrors, leader locks, epoch, control plane."""

    hosts: str = "127.0.0.1:12181"
    #: Root znode; a service lives under ``<root>/<service>``.
    root: str = "/tungsten"
    timeout_s: float = Field(10.0, gt=0)


class SourceConfig(BaseModel):
    """The MySQL/MariaDB server whose binlog is extracted."""

    host: str = "127.0.0.1"
    port: int = Field(3306, gt=0, lt=65536)
    user: str = "tungsten"
    password: SecretStr = SecretStr("")


class FilterConfig(BaseModel):
    """Replicate/ignore by ``schema.table`` with shell wildcards (Tungsten's replicate filter)."""

    #: Keep only these (empty: everything).
    replicate: list[str] = Field(default_factory=list)
    #: Then drop these.
    ignore: list[str] = Field(default_factory=list)


class MetricsConfig(BaseModel):
    """Prometheus metrics of the runner."""

    #: Port of the ``/metrics`` endpoint on 127.0.0.1; 0 turns it off.
    port: int = Field(0, ge=0, lt=65536)


class ServiceSettings(BaseSettings):
    """What every part of one service shares: its name, Kafka, ZooKeeper and the source.

    Environment variables override the file: ``TREP_<SECTION>__<FIELD>``, e.g.
    ``TREP_SOURCE__PASSWORD=...``.
    """

    model_config = SettingsConfigDict(env_prefix="TREP_", env_nested_delimiter="__",
                                      extra="forbid")

    #: Service name: the THL topic, the tracking schema and the znodes are named after it.
    service: str
    kafka: KafkaConfig = KafkaConfig()
    zookeeper: ZooKeeperConfig = ZooKeeperConfig()
    #: The source database (the extractor reads its binlog; trepctl writes heartbeats there).
    source: SourceConfig = SourceConfig()

    @field_validator("service")
    @classmethod
    def _service_name(cls, value: str) -> str:
        if not value or not all(c.isalnum() or c == "_" for c in value):
            raise ValueError("service names use letters, digits and '_' only "
                             "(they name a schema, a topic and znodes)")
        return value

    @property
    def thl_topic(self) -> str:
        return self.kafka.thl_topic or f"thl.{self.service}"

    @property
    def tracking_schema(self) -> str:
        return f"tungsten_{self.service}"

    def group_id(self, consumer: str) -> str:
        """The Kafka consumer group of one consumer group of this service."""
        return f"tungsten-{self.service}-{consumer}"

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init arguments; the environment overrides it.
        return env_settings, init_settings


def read_yaml(path: str, text: str) -> dict[str, Any]:
    """The mapping at the top of a YAML configuration (ConfigError otherwise)."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def validation_problems(path: str, exc: ValidationError) -> ConfigError:
    """One ConfigError naming the file and every bad field."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
    return ConfigError(f"{path}: {problems}")
