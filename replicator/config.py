"""Configuration of a replicator service: one YAML file, overridable from the environment.

Every field has a documented default. Environment variables win over the file:
``TREP_<SECTION>__<FIELD>``, e.g. ``TREP_EXTRACTOR__SOURCE__PASSWORD=...``. Secrets are
``SecretStr`` and never appear in logs or in ``repr``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError


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


class ZooKeeperConfig(BaseModel):
    """ZooKeeper: position mirrors, leader lock, epoch, control plane."""

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
    """Extract-stage replicate/ignore filter by ``schema.table`` with shell wildcards."""

    #: Keep only these (empty: everything).
    replicate: list[str] = Field(default_factory=list)
    #: Then drop these.
    ignore: list[str] = Field(default_factory=list)


class ExtractorConfig(BaseModel):
    """The binlog extractor of a service."""

    source: SourceConfig = SourceConfig()
    #: server_id this replication client announces; unique among the source's replicas.
    server_id: int = Field(1001, gt=0)
    #: SOURCEID stamped on every event.
    source_id: str = Field(default_factory=socket.gethostname)
    #: Rows per THL fragment: a larger transaction is split, never held whole in memory.
    fragment_rows: int = Field(5000, gt=0)
    #: Approximate bytes per THL fragment.
    fragment_bytes: int = Field(1024 * 1024, gt=1024)
    #: Where to start when no position exists anywhere: the binlog's current end or its start.
    start_at: Literal["current", "earliest"] = "current"
    filters: FilterConfig = FilterConfig()
    #: Source transactions per Kafka transaction at most (latency bound below).
    batch_transactions: int = Field(200, gt=0)
    #: Longest a source transaction waits before its Kafka transaction commits.
    batch_ms: int = Field(100, ge=0)
    #: Longest the source or Kafka may stay unreachable before the extractor stops with
    #: OFFLINE:ERROR; meanwhile it starts again from the THL tail with backoff. 0: forever.
    retry_limit_s: float = Field(0, ge=0)


class ConsumerConfig(BaseModel):
    """One consumer group: an applier fed from the THL topic."""

    model_config = {"extra": "forbid"}

    #: The applier kind; more kinds (mongodb, elasticsearch, warehouse) plug in later.
    type: Literal["sql"] = "sql"
    #: SQLAlchemy URL of the target, e.g. ``mysql+pymysql://user@host:3306/`` or
    #: ``postgresql+psycopg://user@host:5432/db``. Put the password in ``password``.
    url: str
    #: The target's password; overrides one written in ``url``. Never logged.
    password: SecretStr | None = None
    #: THL events (source transactions) per target transaction at most ...
    block_commit_events: int = Field(10, gt=0)
    #: ... and the longest a block stays open waiting for more events.
    block_commit_ms: int = Field(500, ge=0)
    #: Statement events (DDL, statement-format DML): ``apply`` (MySQL-family targets only),
    #: ``skip`` them, or stop with an ``error``. Default: apply on MySQL/MariaDB, else error.
    statements: Literal["apply", "skip", "error"] | None = None
    #: Go ONLINE when the process starts, unless an operator set the group OFFLINE.
    auto_online: bool = True
    #: Apply-stage replicate/ignore filter (changes only this target).
    filters: FilterConfig = FilterConfig()
    #: Longest a transient failure (target or broker down) is retried before OFFLINE:ERROR;
    #: 0 retries forever.
    retry_limit_s: float = Field(0, ge=0)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a SQLAlchemy URL: {exc}") from exc
        return value

    def engine_url(self) -> URL:
        """The target URL with the configured password."""
        url = make_url(self.url)
        if self.password is not None:
            url = url.set(password=self.password.get_secret_value())
        return url


class MetricsConfig(BaseModel):
    """Prometheus metrics of the runner."""

    #: Port of the ``/metrics`` endpoint on 127.0.0.1; 0 turns it off.
    port: int = Field(0, ge=0, lt=65536)


class ReplicatorConfig(BaseSettings):
    """The whole service configuration."""

    model_config = SettingsConfigDict(env_prefix="TREP_", env_nested_delimiter="__",
                                      extra="forbid")

    #: Service name: the THL topic, the tracking schema and the znodes are named after it.
    service: str
    kafka: KafkaConfig = KafkaConfig()
    zookeeper: ZooKeeperConfig = ZooKeeperConfig()
    extractor: ExtractorConfig = ExtractorConfig()
    #: Consumer groups by name (the Kafka group is ``tungsten-<service>-<name>``).
    consumers: dict[str, ConsumerConfig] = Field(default_factory=dict)
    metrics: MetricsConfig = MetricsConfig()

    @field_validator("consumers")
    @classmethod
    def _group_names(cls, value: dict[str, ConsumerConfig]) -> dict[str, ConsumerConfig]:
        for name in value:
            if not name or not all(c.isalnum() or c in "_-" for c in name):
                raise ValueError(f"consumer group name {name!r}: use letters, digits, '_', '-'")
        return value

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
        """The Kafka consumer group of one consumer."""
        return f"tungsten-{self.service}-{consumer}"

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init arguments; the environment overrides it.
        return env_settings, init_settings


def load_config(path: Path | str, **overrides: Any) -> ReplicatorConfig:
    """Read a YAML configuration; raise ConfigError naming the file and the bad fields."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    data.update(overrides)
    try:
        return ReplicatorConfig(**data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"{path}: {problems}") from exc
