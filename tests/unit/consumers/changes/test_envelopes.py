"""Change topics without servers: configuration, topic names, shapes, envelopes, JSON bytes."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import fastavro
import pytest
from pydantic import ValidationError

from consumers.changes.config import ChangesTarget
from consumers.changes.envelopes import (
    DebeziumEnvelope,
    Origin,
    Shape,
    ShapeError,
    TungstenEnvelope,
    committime,
    origin_parts,
)
from consumers.changes.naming import TopicNames
from consumers.changes.positions import decode_position, encode_position
from consumers.changes.readback import Change, materialize
from consumers.changes.serde import JsonSerde, json_text
from consumers.errors import DataError
from consumers.position import Position
from thl_topics.event import ColumnSpec

SPECS = [ColumnSpec(1, "b", "VARCHAR", charset="utf8mb4", primary_key=True),
         ColumnSpec(2, "a", "INT", primary_key=True),
         ColumnSpec(3, "price", "DECIMAL", length=12, scale=2),
         ColumnSpec(4, "ünï é", "BLOB", blob=True)]
ORIGIN = Origin(seqno=42, epoch=7, event_id="mariadb-bin.000003:0000000000001234;99",
                source_id="src", tstamp=1_700_000_000_123_456, server_id=1, gtid="0-1-9",
                file="mariadb-bin.000003", pos=1234, thread=99, txn_id="0-1-9")


def _shape(avro: bool) -> Shape:
    return Shape.of("svc.shop.items", "shop", "items", SPECS, avro)


def test_avro_target_needs_a_registry_and_templates_know_their_placeholders() -> None:
    with pytest.raises(ValidationError, match="schema_registry"):
        ChangesTarget(format="avro")
    with pytest.raises(ValidationError, match="may use only"):
        ChangesTarget(format="json", topic="{service}.{db}.{table}")
    with pytest.raises(ValidationError, match="may use only"):
        ChangesTarget(format="json", topics={"a.*": "{nope}"})
    assert ChangesTarget(format="json").topic == "{service}.{schema}.{table}"


def test_topic_names_follow_templates_and_map_what_kafka_cannot_take() -> None:
    names = TopicNames(ChangesTarget(format="json", topics={"shop.order *": "x.{table}s"}),
                       "svc")
    assert names.topic("shop", "items", 1) == "svc.shop.items"
    assert names.topic("shop", "order items", 17) == "x.order_itemss"
    assert names.topic("hold out", "ü", 3) == "svc.hold_out._"
    with pytest.raises(DataError) as bad:  # meets the topic of `hold out`.`ü`
        names.topic("hold_out", "_", 18)
    assert bad.value.seqno == 18
    assert "hold out.ü and hold_out._ both map to topic svc.hold_out._" in str(bad.value)
    strict = TopicNames(ChangesTarget(format="json", names="strict"), "svc")
    with pytest.raises(DataError, match=r"table shop\.ü: a Kafka topic name cannot contain "
                       r"'ü' \(names: strict\).*seqno 3"):
        strict.topic("shop", "ü", 3)
    assert TopicNames(ChangesTarget(format="json", names="strict",
                                    topics={"shop.ü*": "svc.shop.u"}),
                      "svc").topic("shop", "ü", 3) == "svc.shop.u"


def test_shapes_key_fields_and_avro_names() -> None:
    avro, plain = _shape(True), _shape(False)
    assert plain.fields == ("b", "a", "price", "ünï é")
    assert avro.fields[3] == "_u00fcn_u00ef_u0020_u00e9"
    assert avro.key == (0, 1)
    assert avro.key_of(["x", 1, None, None]) == {"b": "x", "a": 1}
    assert Shape.of("t", "s", "nokey", SPECS[2:], True).key_of([None, None]) is None
    field = next(f for f in avro.value_avro()["fields"] if f["name"] == avro.fields[3])
    assert field["tungsten.column"] == "ünï é"
    with pytest.raises(ShapeError, match="same field name"):
        Shape.of("t", "s", "clash", [ColumnSpec(1, "a b", "INT"),
                                     ColumnSpec(2, "a_u0020b", "INT")], True)


def test_debezium_envelope_round_trips_through_its_avro_schema() -> None:
    shape = _shape(True)
    env = DebeziumEnvelope("svc")
    row = shape.row(["x", 1, Decimal("12.50"), b"\x00\xff"])
    datum = env.value(shape, "c", None, row, ORIGIN, 0, 3, 1, 1_800_000_000_000_000)
    schema = fastavro.parse_schema(env.value_avro(shape))
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, datum)
    out.seek(0)
    back = fastavro.schemaless_reader(out, schema, schema)
    assert back == datum
    assert datum["source"]["seqno"] == 42 and datum["source"]["file"] == "mariadb-bin.000003"
    assert datum["transaction"] == {"id": "0-1-9", "total_order": 3,
                                    "data_collection_order": 1}
    assert env.value_avro(shape)["connect.name"] == "svc.shop.items.Envelope"
    read = env.value(shape, "r", None, row, ORIGIN, 0, 0, 0, 0)
    assert (read["op"], read["source"]["snapshot"], datum["source"]["snapshot"]) == (
        "r", "true", "false")


def test_tungsten_envelope_is_the_seeds_message() -> None:
    shape = _shape(False)
    row = shape.row(["x", 1, Decimal("12.50"), b""])
    value = TungstenEnvelope().value(shape, "d", row, None, ORIGIN, 0, 0, 0, 0)
    assert value == {"record": row, "_optype": "DELETE", "_seqno": 42,
                     "_committime": "2023-11-14 22:13:20.123456",
                     "_source_schema": "shop", "_source_table": "items"}
    assert committime(1_500_000_000_000_000) == "2017-07-14 02:40:00.0"


def test_truncate_records_fit_both_envelopes_and_empty_what_a_reader_folded() -> None:
    shape = _shape(True)
    for env in (DebeziumEnvelope("svc"), TungstenEnvelope()):
        datum = env.value(shape, "t", None, None, ORIGIN, 0, 5, 0, 0)
        schema = fastavro.parse_schema(env.value_avro(shape))
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, datum)  # every record field is optional
        out.seek(0)
        assert fastavro.schemaless_reader(out, schema, schema) == datum
    debezium = DebeziumEnvelope("svc").value(shape, "t", None, None, ORIGIN, 0, 5, 0, 0)
    assert (debezium["op"], debezium["before"], debezium["after"]) == ("t", None, None)
    tungsten = TungstenEnvelope().value(shape, "t", None, None, ORIGIN, 0, 5, 0, 0)
    assert tungsten["_optype"] == "TRUNCATE"
    assert set(tungsten["record"].values()) == {None}
    # Folding: rows before the truncate in its partition go; later ones and other
    # partitions' stay.
    def change(part: int, seqno: int, op: str, value: int | None) -> Change:
        row = {"v": value} if value is not None else None
        return Change("t", part, seqno, seqno, 0, None, op, None, row)
    folded = materialize([change(0, 1, "c", 1), change(0, 2, "c", 1), change(1, 3, "c", 2),
                          change(0, 4, "t", None), change(0, 5, "r", 1),
                          change(1, 6, "c", 3)], keyed=False)
    assert sorted(r["v"] for r in folded) == [1, 2, 3]


def test_json_is_connect_layout_with_exact_decimals_and_stable_key_bytes() -> None:
    shape = _shape(False)
    key_writer, value_writer = JsonSerde(DebeziumEnvelope("svc"), schemas=True).writers(
        shape, 1)
    assert key_writer is not None
    key = key_writer(shape.key_of(["ü", 1, None, None]))
    assert key == key_writer({"b": "ü", "a": 1})  # equal keys, equal bytes
    decoded = json.loads(key)
    assert decoded["payload"] == {"b": "ü", "a": 1}
    assert [f["field"] for f in decoded["schema"]["fields"]] == ["b", "a"]
    row = shape.row(["ü", 1, Decimal("-99999999999999999999.999999"), b"\x00\x01"])
    env = DebeziumEnvelope("svc").value(shape, "c", None, row, ORIGIN, 0, 0, 0, 0)
    value = json.loads(value_writer(env), parse_float=Decimal)
    assert value["payload"]["after"]["price"] == Decimal("-99999999999999999999.999999")
    assert value["payload"]["after"]["ünï é"] == "AAE="
    assert value["schema"]["name"] == "svc.shop.items.Envelope"
    plain = JsonSerde(TungstenEnvelope(), schemas=False).writers(shape, 1)[1]
    assert json.loads(plain({"k": [1, None, True, 1.5]})) == {"k": [1, None, True, 1.5]}
    assert json_text("a\"\n😀") == '"a\\"\\n😀"'
    with pytest.raises(ValueError, match="no JSON form"):
        json_text(float("nan"))


def test_event_ids_split_into_binlog_file_offset_and_session() -> None:
    assert origin_parts("mariadb-bin.000003:0000000000001234;99") == (
        "mariadb-bin.000003", 1234, 99)
    assert origin_parts("weird") == ("weird", 0, 0)


def test_position_records_round_trip_and_carry_the_last_heartbeat() -> None:
    position = Position(seqno=9, epoch=2, event_id="f:1;0", source_id="s", fragno=3,
                        shard_id="shop", tstamp=5, offset=77)
    value = encode_position(position, {"name": 'he"ll', "seqno": 9, "lag_millis": None})
    assert decode_position(value) == position
    assert json.loads(value)["heartbeat"]["name"] == 'he"ll'
    with pytest.raises(ValueError):
        decode_position(b"[1]")
