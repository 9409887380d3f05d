"""THL codec: exact round trips, and clear errors for records that do not decode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from thl_topics.codec import MAGIC, SCHEMA_DIR, ThlCodec
from thl_topics.errors import ThlDecodeError
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent


def sample_event() -> ThlEvent:
    spec_id = ColumnSpec(1, "id", "BIGINT", length=20, unsigned=True, nullable=False,
                         primary_key=True)
    spec_b = ColumnSpec(2, "b", "BLOB", blob=True)
    spec_s = ColumnSpec(3, "s", "SET", charset="utf8mb4", enum_values=["a", "b"])
    return ThlEvent(
        seqno=42, epoch=40, source_id="db1", event_id="mariadb-bin.000003:0000000000001234;0",
        shard_id="shop", tstamp=1_700_000_000_123_456, fragno=1, last_frag=False,
        metadata={"mysql_server_id": "1", "dbms_type": "mysql", "service": "alpha",
                  "gtid": "0-1-99"},
        data=[
            Statement(sql="ALTER TABLE t ADD c INT", default_schema="shop",
                      options={"sql_mode": "STRICT_ALL_TABLES", "time_zone": "+00:00"},
                      timestamp=1_700_000_000_000_000),
            RowChange(RowAction.UPDATE, "shop", "t", column_specs=[spec_id, spec_b, spec_s],
                      key_specs=[spec_id, spec_b, spec_s],
                      column_values=[["18446744073709551615", b"\x00\x01\x00", "a,b"]],
                      key_values=[[-9223372036854775808, None, ""]]),
            RowChange(RowAction.DELETE, "shop", "t", key_specs=[spec_id],
                      key_values=[[1], [2]]),
        ],
    )


def test_round_trip_is_exact() -> None:
    codec = ThlCodec()
    event = sample_event()
    data = codec.encode(event)
    assert data[:2] == MAGIC
    assert data[2:10] == codec.current.fingerprint
    assert codec.decode(data) == event


def test_fingerprint_is_crc64_avro_of_the_canonical_form() -> None:
    # Known vector from the Avro specification's test data: fingerprint of "int".
    from fastavro.schema import fingerprint

    assert fingerprint('"int"', "CRC-64-AVRO") == "8f5c393f1ad57572"
    assert len(ThlCodec().fingerprint_hex) == 16


def test_unknown_fingerprint_names_topic_offset_and_reason() -> None:
    codec = ThlCodec()
    data = bytearray(codec.encode(sample_event()))
    data[2:10] = b"\xff" * 8
    with pytest.raises(ThlDecodeError) as err:
        codec.decode(bytes(data), topic="thl.alpha", partition=0, offset=17)
    assert str(err.value) == ("THL record thl.alpha[0] at offset 17: cannot decode: "
                              "unknown schema fingerprint ffffffffffffffff")
    assert err.value.offset == 17


@pytest.mark.parametrize(("mangle", "reason"), [
    (lambda d: d[:-5], "corrupt body"),
    (lambda d: d + b"\x00", "trailing bytes"),
    (lambda d: b"{}" + d[2:], "bad marker"),
    (lambda d: d[:5], "bad marker"),
])
def test_corrupt_records_raise_decode_errors(mangle: object, reason: str) -> None:
    codec = ThlCodec()
    bad = mangle(codec.encode(sample_event()))  # type: ignore[operator]
    with pytest.raises(ThlDecodeError, match=reason):
        codec.decode(bad, topic="thl.alpha", offset=3)


def test_tombstone_is_a_decode_error() -> None:
    with pytest.raises(ThlDecodeError, match="tombstone"):
        ThlCodec().decode(None, topic="thl.alpha", offset=0)


def test_records_of_an_older_schema_version_still_decode(tmp_path: Path) -> None:
    # A v2 that adds a field with a default: v1 records must read through schema resolution.
    shutil.copy(SCHEMA_DIR / "thl_event.v1.avsc", tmp_path)
    old = ThlCodec(tmp_path).encode(sample_event())
    schema = json.loads((SCHEMA_DIR / "thl_event.v1.avsc").read_text())
    schema["fields"].append({"name": "extra", "type": "string", "default": ""})
    (tmp_path / "thl_event.v2.avsc").write_text(json.dumps(schema))
    codec = ThlCodec(tmp_path)
    assert codec.current.version == 2
    assert codec.decode(old) == sample_event()


def test_v1_records_decode_with_the_shipped_schemas_and_no_schema_changes(
        tmp_path: Path) -> None:
    # Topics written before THL schema v2 stay readable; their statements were never parsed.
    shutil.copy(SCHEMA_DIR / "thl_event.v1.avsc", tmp_path)
    old = ThlCodec(tmp_path).encode(sample_event())
    decoded = ThlCodec().decode(old)
    assert decoded == sample_event()
    statement = decoded.data[0]
    assert isinstance(statement, Statement) and statement.schema_changes is None
