"""Record bytes: Avro in the Confluent wire format (schema registry), or JSON.

Avro: ``0x00`` + the schema id (4 bytes, big-endian) + the Avro binary body, the bytes every
Confluent-compatible deserializer reads (confluent-kafka's ``AvroDeserializer``, Kafka
Connect's Avro converters, Flink's ``avro-confluent``, Spark's ``from_avro`` after the 5-byte
header). Schemas are registered under ``<topic>-key`` and ``<topic>-value`` (TopicNameStrategy)
with the configured compatibility; the registry decides whether a new version is allowed.

JSON: Kafka Connect's JsonConverter layout (``{"schema": ..., "payload": ...}``, or the
payload alone), bytes in base64, decimals as exact JSON numbers, written by a small encoder
here because ``json.dumps`` cannot write a Decimal as a number. Keys are written with fields
in key order and no spaces, so equal keys are equal bytes (compaction works).
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from consumers.changes.config import SchemaRegistryConfig
from consumers.changes.envelopes import Envelope, Shape
from consumers.changes.errors import registry_error
from consumers.errors import ConsumerError

Writer = Callable[[Any], bytes]

_encode_str = json.encoder.encode_basestring


def json_text(value: Any) -> str:
    """Compact JSON of ``value``: Decimal as a plain number, bytes in base64 (Connect's way)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return str(_encode_str(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} has no JSON form")
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return '"' + base64.b64encode(value).decode("ascii") + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{_encode_str(k)}:{json_text(v)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    raise TypeError(f"no JSON form for {type(value).__name__}")


class JsonSerde:
    """Kafka Connect JSON, with or without the schema block."""

    def __init__(self, envelope: Envelope, schemas: bool) -> None:
        self.envelope = envelope
        self.schemas = schemas

    @property
    def avro(self) -> bool:
        return False

    def writers(self, shape: Shape, seqno: int) -> tuple[Writer | None, Writer]:
        """(key writer or None for a keyless table, value writer) of a shape."""
        return (self._writer(shape.key_connect()) if shape.key else None,
                self._writer(self.envelope.value_connect(shape)))

    def _writer(self, schema: dict[str, Any]) -> Writer:
        if not self.schemas:
            return lambda payload: json_text(payload).encode()
        head = '{"schema":' + json_text(schema) + ',"payload":'
        return lambda payload: (head + json_text(payload) + "}").encode()


class AvroSerde:
    """Avro with a Confluent-compatible schema registry."""

    def __init__(self, envelope: Envelope, cfg: SchemaRegistryConfig) -> None:
        self.envelope = envelope
        self.cfg = cfg
        self.client = SchemaRegistryClient(cfg.client_config())
        #: Subjects whose compatibility this process has set.
        self._configured: set[str] = set()

    @property
    def avro(self) -> bool:
        return True

    @property
    def where(self) -> str:
        return self.cfg.url

    def writers(self, shape: Shape, seqno: int) -> tuple[Writer | None, Writer]:
        key = self._writer(f"{shape.topic}-key", shape.key_avro(), shape, seqno) \
            if shape.key else None
        return key, self._writer(f"{shape.topic}-value", self.envelope.value_avro(shape),
                                 shape, seqno)

    def _writer(self, subject: str, schema: dict[str, Any], shape: Shape,
                seqno: int) -> Writer:
        schema_id = self.register(subject, schema, shape, seqno)
        parsed = fastavro.parse_schema(schema)
        header = b"\x00" + schema_id.to_bytes(4, "big")

        def write(datum: Any) -> bytes:
            out = io.BytesIO()
            out.write(header)
            fastavro.schemaless_writer(out, parsed, datum)
            return out.getvalue()
        return write

    def register(self, subject: str, schema: dict[str, Any], shape: Shape, seqno: int) -> int:
        """The id of ``schema`` under ``subject``, registered if new (the registry checks
        compatibility with the earlier versions)."""
        where = f"table {shape.schema}.{shape.table}, seqno {seqno}, subject {subject}"
        try:
            schema_id = int(self.client.register_schema(
                subject, Schema(json.dumps(schema), "AVRO")))
            if subject not in self._configured and self.cfg.compatibility != "NONE":
                self.client.set_compatibility(subject, self.cfg.compatibility)
                self._configured.add(subject)
        except SchemaRegistryError as exc:
            raise self._refused(exc, where, seqno) from exc
        except Exception as exc:  # httpx transport errors, DNS, refused connections
            raise registry_error(-1, f"{type(exc).__name__}: {exc}", self.cfg.url,
                                 f"registering the schema of {where}", seqno) from exc
        return schema_id

    def _refused(self, exc: SchemaRegistryError, where: str, seqno: int) -> ConsumerError:
        status = int(getattr(exc, "http_status_code", -1) or -1)
        text = str(getattr(exc, "error_message", "") or exc)
        if status == 409:
            text = (f"the registry refuses the new schema as incompatible with the "
                    f"subject's earlier versions ({text}); the source table changed in a "
                    f"way readers of the topic cannot follow: give the table a new topic "
                    f"(`topics:` in the target), or change the subject's compatibility, "
                    f"then bring the group online")
        return registry_error(status, text, self.cfg.url, f"registering the schema of {where}",
                              seqno)


Serde = JsonSerde | AvroSerde
