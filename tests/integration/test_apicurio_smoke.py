"""Apicurio's Confluent-compatible API: register, compatibility, wire format round trip."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from stack.services.apicurio import Apicurio


def _record(*fields: tuple[str, object]) -> str:
    return json.dumps({"type": "record", "name": "V", "namespace": "smoke",
                       "fields": [{"name": n, "type": t, **({"default": None}
                                                            if isinstance(t, list) else {})}
                                  for n, t in fields]})


def test_register_evolve_refuse_and_round_trip(apicurio: Apicurio) -> None:
    client = SchemaRegistryClient({"url": apicurio.ccompat_url})
    subject = f"smoke-{uuid.uuid4().hex[:8]}-value"
    v1 = _record(("id", "int"), ("name", ["null", "string"]))
    first = client.register_schema(subject, Schema(v1, "AVRO"))
    client.set_compatibility(subject, "BACKWARD")
    assert client.get_compatibility(subject) == "BACKWARD"
    # A new optional field is backward compatible: a new version, a new id.
    v2 = _record(("id", "int"), ("name", ["null", "string"]), ("extra", ["null", "long"]))
    second = client.register_schema(subject, Schema(v2, "AVRO"))
    assert second != first
    assert client.register_schema(subject, Schema(v1, "AVRO")) == first  # known: same id
    # A changed type is not: 409 with the reason.
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(_record(("id", "string")), "AVRO"))
    assert refused.value.http_status_code == 409
    assert "not compatible" in str(refused.value)
    # Confluent's own serializer and deserializer round-trip through it (magic 0 + 4-byte id).
    topic = subject.removesuffix("-value")
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = AvroSerializer(client, v2, conf={"auto.register.schemas": False,
                                            "use.latest.version": True})(
        {"id": 7, "name": "ü😀", "extra": 2**40}, ctx)
    assert data is not None and data[0] == 0
    assert int.from_bytes(data[1:5], "big") == second
    assert AvroDeserializer(client)(data, ctx) == {"id": 7, "name": "ü😀", "extra": 2**40}


@pytest.mark.exclusive("apicurio")  # restarts the registry
def test_schemas_survive_a_restart(apicurio: Apicurio) -> None:
    client = SchemaRegistryClient({"url": apicurio.ccompat_url})
    subject = f"persist-{uuid.uuid4().hex[:8]}-value"
    schema_id = client.register_schema(subject, Schema(_record(("k", "long")), "AVRO"))
    apicurio.stop()
    apicurio.start()
    # A new client: nothing cached. The id still names the same schema (H2 file storage).
    fresh = SchemaRegistryClient({"url": apicurio.ccompat_url})
    assert json.loads(fresh.get_schema(schema_id).schema_str or "")["fields"] == [
        {"name": "k", "type": "long"}]
    assert subject in fresh.get_subjects()
