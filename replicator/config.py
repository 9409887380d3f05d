"""Configuration shared by every part of a service: its name, Kafka, ZooKeeper, the source.

The whole service file (``trep.config.ServiceConfig``) adds the extractor's and the consumer
groups' sections; each part reads only what it needs from here. Every field has a documented
default; secrets are ``SecretStr`` and never appear in logs or in ``repr``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from replicator.filters.specs import FilterSpec
from thl_topics.client import ClientSettings, is_secret_setting


class ConfigError(ValueError):
    """The configuration file or environment is unusable; the message says what to fix."""


SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]

#: Mechanisms that log in with a username and a password.
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: librdkafka settings that have a typed field: ``properties`` may not set them.
_TYPED_PROPERTIES = {
    "bootstrap.servers": "kafka.bootstrap_servers",
    "metadata.broker.list": "kafka.bootstrap_servers",
    "security.protocol": "kafka.security_protocol",
    "sasl.mechanism": "kafka.sasl.mechanism",
    "sasl.mechanisms": "kafka.sasl.mechanism",
    "sasl.username": "kafka.sasl.username",
    "sasl.password": "kafka.sasl.password",
    "ssl.ca.location": "kafka.tls.ca_location",
    "ssl.certificate.location": "kafka.tls.certificate_location",
    "ssl.key.location": "kafka.tls.key_location",
    "ssl.key.password": "kafka.tls.key_password",
    "ssl.endpoint.identification.algorithm": "kafka.tls.check_hostname",
}

#: Settings each client sets itself because the THL's guarantees depend on them.
_OWNED_PROPERTIES = frozenset({
    "group.id", "transactional.id", "enable.idempotence", "acks", "isolation.level",
    "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
    "enable.partition.eof", "transaction.timeout.ms", "message.max.bytes",
    "error_cb", "logger", "on_delivery", "stats_cb", "throttle_cb", "oauth_cb",
})


def _read_secret(path: Path, field: str) -> SecretStr:
    """A secret kept in a file (one line; the trailing newline is not part of it)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{field}: cannot read {path}: {exc.strerror or exc}") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise ValueError(f"{field}: {path} is empty")
    return SecretStr(secret)


def _must_exist(path: Path | None, field: str) -> None:
    if path is not None and not path.exists():
        raise ValueError(f"{field}: {path} does not exist")


class KafkaSasl(BaseModel):
    """SASL login (``security_protocol`` SASL_SSL or SASL_PLAINTEXT).

    The password comes from ``password`` (in the file or ``TREP_KAFKA__SASL__PASSWORD``) or
    from ``password_file`` (read when the configuration is loaded), never both.
    """

    model_config = ConfigDict(extra="forbid")

    #: PLAIN and SCRAM log in with ``username``/``password``; GSSAPI (Kerberos) and
    #: OAUTHBEARER take their settings from ``kafka.properties`` (``sasl.kerberos.*``,
    #: ``sasl.oauthbearer.*``; secrets in ``kafka.secret_properties``).
    mechanism: SaslMechanism = "SCRAM-SHA-512"
    username: str | None = None
    password: SecretStr | None = None
    #: A file holding the password (e.g. a mounted secret).
    password_file: Path | None = None
    _file_password: SecretStr | None = PrivateAttr(default=None)

    @field_validator("mechanism", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _credentials(self) -> KafkaSasl:
        if self.password is not None and self.password_file is not None:
            raise ValueError("set kafka.sasl.password or kafka.sasl.password_file, not both")
        if self.mechanism in _PASSWORD_MECHANISMS:
            if not self.username:
                raise ValueError(f"SASL {self.mechanism} needs kafka.sasl.username")
            if self.password is None and self.password_file is None:
                raise ValueError(
                    f"SASL {self.mechanism} needs a password: kafka.sasl.password, "
                    "kafka.sasl.password_file or TREP_KAFKA__SASL__PASSWORD")
        elif self.username or self.password is not None or self.password_file is not None:
            raise ValueError(
                f"SASL {self.mechanism} takes no username/password here; give its settings "
                "in kafka.properties (secrets in kafka.secret_properties)")
        if self.password_file is not None:
            self._file_password = _read_secret(self.password_file, "kafka.sasl.password_file")
        return self

    def secret(self) -> SecretStr | None:
        """The password, wherever it came from."""
        return self.password if self.password is not None else self._file_password


class KafkaTls(BaseModel):
    """TLS (``security_protocol`` SSL or SASL_SSL): whom to trust and, for mutual TLS, who
    this client is. Files are PEM."""

    model_config = ConfigDict(extra="forbid")

    #: CA certificate(s) that signed the brokers' certificates; default: the system's.
    ca_location: Path | None = None
    #: This client's certificate, for brokers that ask for one (mutual TLS).
    certificate_location: Path | None = None
    #: This client's private key.
    key_location: Path | None = None
    #: Password of an encrypted ``key_location``.
    key_password: SecretStr | None = None
    #: A file holding the key's password.
    key_password_file: Path | None = None
    #: Check that the broker's certificate names the host connected to. Turn off only for
    #: brokers reached through addresses their certificates do not list.
    check_hostname: bool = True
    _file_key_password: SecretStr | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaTls:
        _must_exist(self.ca_location, "kafka.tls.ca_location")
        _must_exist(self.certificate_location, "kafka.tls.certificate_location")
        _must_exist(self.key_location, "kafka.tls.key_location")
        if (self.certificate_location is None) != (self.key_location is None):
            raise ValueError("kafka.tls.certificate_location and kafka.tls.key_location go "
                             "together (mutual TLS needs both)")
        if self.key_password is not None and self.key_password_file is not None:
            raise ValueError("set kafka.tls.key_password or kafka.tls.key_password_file, "
                             "not both")
        if (self.key_password is not None or self.key_password_file is not None) \
                and self.key_location is None:
            raise ValueError("kafka.tls.key_password is set but kafka.tls.key_location is not")
        if self.key_password_file is not None:
            self._file_key_password = _read_secret(self.key_password_file,
                                                   "kafka.tls.key_password_file")
        return self

    def key_secret(self) -> SecretStr | None:
        """The key's password, wherever it came from."""
        return self.key_password if self.key_password is not None else self._file_key_password


class KafkaConfig(BaseModel):
    """The Kafka cluster that holds the THL topic, and how every client connects to it.

    Every Kafka client of the replicator (THL producer, THL readers, consumer feeds, admin
    clients, the ``thl`` command) is built from ``client()``, so the security settings are
    given once here.
    """

    model_config = ConfigDict(extra="forbid")

    bootstrap_servers: str = "127.0.0.1:19092"
    #: THL topic name; default ``thl.<service>``.
    thl_topic: str | None = None
    replication_factor: int = Field(1, ge=1)
    #: Largest THL record; fragments are kept well below it.
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=1024 * 1024)
    #: Seconds a produce/commit may take before the producer is thrown away and rebuilt.
    transaction_timeout_s: float = Field(60.0, gt=0)
    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (librdkafka's ``security.protocol``).
    security_protocol: SecurityProtocol = "PLAINTEXT"
    #: SASL login; required by the SASL_* protocols, refused by the others.
    sasl: KafkaSasl | None = None
    #: TLS settings; only with SSL or SASL_SSL (which work without them: system CAs).
    tls: KafkaTls | None = None
    #: Other librdkafka settings, passed through as they are (``socket.keepalive.enable``,
    #: ``client.dns.lookup``, ``sasl.kerberos.service.name`` ...). Not for settings that have
    #: a field here, nor for those the replicator sets itself (``isolation.level`` ...).
    properties: dict[str, str] = Field(default_factory=dict)
    #: librdkafka settings that are secrets (``sasl.oauthbearer.client.secret`` ...):
    #: passed through like ``properties`` but never shown.
    secret_properties: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("security_protocol", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("properties", mode="before")
    @classmethod
    def _as_strings(cls, value: Any) -> Any:
        # YAML turns `true` and `6000` into bool and int; librdkafka wants strings.
        if not isinstance(value, dict):
            return value
        return {k: (str(v).lower() if isinstance(v, bool) else
                    str(v) if isinstance(v, int | float) else v) for k, v in value.items()}

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConfig:
        protocol = self.security_protocol
        if protocol.startswith("SASL_") and self.sasl is None:
            raise ValueError(f"kafka.security_protocol {protocol} needs kafka.sasl "
                             "(mechanism, username, password)")
        if self.sasl is not None and not protocol.startswith("SASL_"):
            raise ValueError(f"kafka.sasl is set but kafka.security_protocol is {protocol}; "
                             "use SASL_SSL (or SASL_PLAINTEXT)")
        if self.tls is not None and not protocol.endswith("SSL"):
            raise ValueError(f"kafka.tls is set but kafka.security_protocol is {protocol}; "
                             "TLS settings apply to SSL and SASL_SSL only")
        for name in (*self.properties, *self.secret_properties):
            where = "secret_properties" if name in self.secret_properties else "properties"
            if name in _TYPED_PROPERTIES:
                raise ValueError(f"kafka.{where}[{name!r}]: set {_TYPED_PROPERTIES[name]} "
                                 "instead")
            if name in _OWNED_PROPERTIES:
                raise ValueError(f"kafka.{where}[{name!r}]: the replicator sets it itself "
                                 "(the THL's guarantees depend on it); remove it")
        for name in self.properties:
            if name in self.secret_properties:
                raise ValueError(f"kafka.properties[{name!r}] is also in "
                                 "kafka.secret_properties; keep one")
            if is_secret_setting(name):
                raise ValueError(f"kafka.properties[{name!r}] holds a secret: put it in "
                                 "kafka.secret_properties, which is never shown")
        return self

    def client(self, **settings: Any) -> ClientSettings:
        """librdkafka settings of a client of this cluster, plus ``settings``.

        The result holds the secrets in clear (librdkafka needs them) but hides them in its
        ``repr``; never log its items one by one.
        """
        out = ClientSettings(self.properties)
        out.update({k: v.get_secret_value() for k, v in self.secret_properties.items()})
        out["bootstrap.servers"] = self.bootstrap_servers
        out["security.protocol"] = self.security_protocol
        if self.sasl is not None:
            out["sasl.mechanism"] = self.sasl.mechanism
            secret = self.sasl.secret()
            if self.sasl.username is not None:
                out["sasl.username"] = self.sasl.username
            if secret is not None:
                out["sasl.password"] = secret.get_secret_value()
        if self.tls is not None:
            tls = self.tls
            for key, path in (("ssl.ca.location", tls.ca_location),
                              ("ssl.certificate.location", tls.certificate_location),
                              ("ssl.key.location", tls.key_location)):
                if path is not None:
                    out[key] = str(path)
            key_secret = tls.key_secret()
            if key_secret is not None:
                out["ssl.key.password"] = key_secret.get_secret_value()
            out["ssl.endpoint.identification.algorithm"] = \
                "https" if tls.check_hostname else "none"
        out.update(settings)
        return out


class ZooKeeperConfig(BaseModel):
    """ZooKeeper: position mirrors, leader locks, epoch, control plane."""

    hosts: str = "127.0.0.1:12181"
    #: Root znode; a service lives under ``<root>/<service>``.
    root: str = "/tungsten"
    timeout_s: float = Field(10.0, gt=0)
    #: Local directory of the session slots (``replicator.zk_session_slot``): a process
    #: restarted after a crash ends its dead predecessor's session there instead of waiting
    #: ``timeout_s`` for its locks. Default: ``$XDG_RUNTIME_DIR/tungsten-kafka``, else
    #: ``<tmp>/tungsten-kafka-<uid>``.
    session_dir: str | None = None


class SourceConfig(BaseModel):
    """The MySQL/MariaDB server whose binlog is extracted."""

    host: str = "127.0.0.1"
    port: int = Field(3306, gt=0, lt=65536)
    user: str = "tungsten"
    password: SecretStr = SecretStr("")


class FilterConfig(BaseModel):
    """Filters of one stage: replicate/ignore by ``schema.table`` with shell wildcards
    (Tungsten's replicate filter), then the declared chain (``replicator.filters.specs``)."""

    model_config = {"extra": "forbid"}

    #: Keep only these (empty: everything).
    replicate: list[str] = Field(default_factory=list)
    #: Then drop these.
    ignore: list[str] = Field(default_factory=list)
    #: Then these filters, in this order.
    chain: list[FilterSpec] = Field(default_factory=list)


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
