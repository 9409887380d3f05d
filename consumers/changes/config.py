"""Configuration of change topics (``target: {type: changes, ...}``).

```yaml
consumers:
  changes:
    target:
      type: changes
      envelope: debezium            # or tungsten
      format: avro                  # or json
      schema_registry: {url: http://127.0.0.1:18081/apis/ccompat/v7}
      topic: "{service}.{schema}.{table}"
      partitions: 3
```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from consumers.naming import NamePolicy, check_template

#: Placeholders a topic template may use.
TOPIC_FIELDS = ("service", "schema", "table")


class SchemaRegistryConfig(BaseModel):
    """A Confluent-compatible schema registry (Confluent's, or Apicurio's ``/apis/ccompat/v7``)."""

    model_config = {"extra": "forbid"}

    url: str
    #: Basic authentication, if the registry asks for it.
    user: str | None = None
    password: SecretStr | None = None
    #: Compatibility set on every subject this group registers (``NONE`` leaves the
    #: registry's own setting alone). BACKWARD: a consumer with the newest schema reads
    #: every older record; a new source column is always backward compatible here.
    compatibility: Literal["BACKWARD", "BACKWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE",
                           "FORWARD", "FORWARD_TRANSITIVE", "NONE"] = "BACKWARD"
    #: Seconds one registry request may take.
    timeout_s: float = Field(10.0, gt=0)

    def client_config(self) -> dict[str, Any]:
        """Settings of ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s}
        if self.user is not None:
            secret = self.password.get_secret_value() if self.password else ""
            conf["basic.auth.user.info"] = f"{self.user}:{secret}"
        return conf


class ChangesTarget(BaseModel):
    """Per-table change topics for data teams, written exactly once.

    One record per row change, keyed by the primary key fields in key order, in Debezium's
    envelope (for Flink ``debezium-json``/``debezium-avro-confluent``, Kafka Connect sinks,
    Spark jobs written for Debezium topics) or Tungsten's (seeds/001 "Applying to Kafka"),
    as Avro in the Confluent wire format (schema registry) or JSON.
    """

    model_config = {"extra": "forbid"}

    type: Literal["changes"] = "changes"
    #: Record layout: ``debezium`` (before/after/source/op/ts_ms/transaction) or
    #: ``tungsten`` (record + _optype, _seqno, _committime, _source_schema, _source_table).
    envelope: Literal["debezium", "tungsten"] = "debezium"
    #: ``avro`` (Confluent wire format, needs ``schema_registry``) or ``json``.
    format: Literal["avro", "json"] = "avro"
    #: JSON only: wrap key and value in Kafka Connect's ``{"schema": ..., "payload": ...}``
    #: (JsonConverter with ``schemas.enable=true``); false writes the payload alone.
    json_schemas: bool = True
    schema_registry: SchemaRegistryConfig | None = None
    #: Kafka cluster of the change topics; default: the service's own cluster.
    bootstrap_servers: str | None = None
    #: Topic of each table; placeholders {service}, {schema}, {table}.
    topic: str = "{service}.{schema}.{table}"
    #: Templates for particular tables, by ``schema.table`` (an exact name first, then shell
    #: wildcards in order), e.g. ``{"shop.order items": "{service}.shop.orders"}``.
    topics: dict[str, str] = Field(default_factory=dict)
    #: A name Kafka refuses: ``map`` (characters other than ``A-Za-z0-9._-`` become ``_``,
    #: over 249 characters cut with a hash; two tables on one topic stop the group) or
    #: ``strict`` (stop on every such name).
    names: NamePolicy = "map"
    #: Partitions of a new topic of a table with a primary key.
    partitions: int = Field(1, ge=1)
    #: Partitions of a new topic of a table without a key: 1 keeps its records in one
    #: total (seqno) order, since null keys give a reader no other order to rely on.
    keyless_partitions: int = Field(1, ge=1)
    replication_factor: int = Field(1, ge=1)
    #: Extra topic settings for new change topics (e.g. ``retention.ms``, ``segment.ms``).
    topic_config: dict[str, str] = Field(default_factory=dict)
    #: A tombstone (same key, null value) after each delete, so compaction drops the key.
    tombstones: bool = True
    #: Debezium envelope: ``source.name`` (Debezium's topic prefix); default: the service.
    server_name: str | None = None
    #: The compacted topic that holds the group's position, written in the same Kafka
    #: transaction as the records; default ``tungsten_{service}.{group}.positions``.
    positions_topic: str | None = None
    #: Seconds a Kafka transaction commit (or the producer's start) may take; also how long
    #: a consistency check waits for a transaction left open in a topic it reads back
    #: (then it is retried).
    transaction_timeout_s: float = Field(60.0, gt=0)
    #: Largest record the producer sends, and the ``max.message.bytes`` of the topics it
    #: creates: a row of 64 MiB is 85 MiB of base64 in JSON. A record must also pass the
    #: broker's ``socket.request.max.bytes`` (100 MiB by default), and a data team's reader
    #: must take it (librdkafka's ``receive.message.max.bytes``: 100 MB by default). A
    #: larger record stops the group with a data error.
    max_message_bytes: int = Field(90 * 1024 * 1024, ge=1024 * 1024)
    #: Extra librdkafka producer settings (security, ...), applied last.
    producer: dict[str, Any] = Field(default_factory=dict)

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        return check_template(value, TOPIC_FIELDS, "topic")

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: dict[str, str]) -> dict[str, str]:
        for template in value.values():
            check_template(template, TOPIC_FIELDS, "topic")
        return value

    @model_validator(mode="after")
    def _registry(self) -> ChangesTarget:
        if self.format == "avro" and self.schema_registry is None:
            raise ValueError("format: avro needs schema_registry: {url: ...} (Confluent's "
                             "registry, or Apicurio's .../apis/ccompat/v7); or use "
                             "format: json")
        return self
