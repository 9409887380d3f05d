"""The direct THL writer produces fastavro's bytes exactly, and falls back where it must."""

from __future__ import annotations

import random

import pytest

from thl_topics import fast_encoder
from thl_topics.codec import ThlCodec
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.schema_change import ChangeKind, SchemaChange

CODEC = ThlCodec()

SPECS = [
    ColumnSpec(1, "id", "INT", primary_key=True, nullable=False),
    ColumnSpec(2, "u_big", "BIGINT", unsigned=True),
    ColumnSpec(3, "dec", "DECIMAL", length=65, scale=30),
    ColumnSpec(4, "e", "ENUM", charset="utf8mb4", enum_values=["a", "b", "ç😀"]),
    ColumnSpec(5, "bl", "BLOB", blob=True),
    ColumnSpec(6, "name_" + "x" * 200, "VARCHAR", length=300, charset="latin1"),
]

#: Every branch of the value union at its edges: the values the type matrix puts in the THL.
VALUES: list[ThlValue] = [
    None, 0, 1, -1, 63, 64, -64, -65, 127, 128, (1 << 63) - 1, -(1 << 63),
    "18446744073709551615", "99999999999999999999999999999999999.999999999999999999999999999999",
    0.0, -0.0, 3.4028234663852886e38, 1.7976931348623157e308, -2.2250738585072014e-308,
    float("inf"), float("-inf"), "", "ç😀", "héllo wörld 😀 \u0000 end", "x" * 70000,
    b"", b"\x00", b"\x00\x01\x00\xff", bytes(range(256)) * 300,
    "0000-00-00 00:00:00.000000", "-838:59:59.000000", "9999-12-31",
]


def _event(data: list[RowChange | Statement], metadata: dict[str, str] | None = None,
           seqno: int = 12345678901) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=42, source_id="db1.example", event_id="bin.000001:"
                    "0000000000000697;77", shard_id="shop", tstamp=1_763_900_000_123_456,
                    fragno=3, last_frag=False, metadata=metadata or {}, data=data)


def _same(event: ThlEvent) -> None:
    fast = CODEC.encode(event)
    assert fast == CODEC.encode_reference(event)
    assert CODEC.decode(fast) == event


def test_the_writer_is_used_for_the_newest_schema() -> None:
    assert CODEC.fast, "the THL schema changed: update fast_encoder for it (and its fingerprint)"
    assert CODEC.fingerprint_hex == fast_encoder.SCHEMA_FINGERPRINT_HEX


def test_every_union_branch_and_edge_value_encodes_like_fastavro() -> None:
    rows = [[v, v, v, v, v, v] for v in VALUES]
    for action in RowAction:
        change = RowChange(action=action, schema="shop", table="t", column_specs=SPECS,
                           key_specs=SPECS if action is not RowAction.INSERT else [],
                           column_values=rows if action is not RowAction.DELETE else [],
                           key_values=rows if action is not RowAction.INSERT else [])
        _same(_event([change], {"service": "s", "gtid": "0-1-99", "é": "😀"}))


def test_statements_empty_parts_and_mixed_items() -> None:
    stmt = Statement(sql="CREATE TABLE t (c ENUM('ç😀'))", default_schema="shop",
                     options={"sql_mode": "1436549152", "autocommit": "1"}, error_code=1062,
                     timestamp=1_763_900_000_000_000)
    bare = Statement(sql="")
    empty = RowChange(action=RowAction.INSERT, schema="", table="")
    _same(_event([]))
    _same(_event([stmt, bare, empty, stmt], seqno=0))
    _same(_event([RowChange(action=RowAction.INSERT, schema="s", table="t",
                            column_specs=SPECS, column_values=[[]] * 3)], seqno=-5))


def test_statements_with_schema_changes_encode_like_fastavro() -> None:
    every = [
        SchemaChange(ChangeKind.ADD_COLUMN, "shop", "t", column="c", column_type="BIGINT UNSIGNED",
                     nullable=False, position="AFTER `b c`"),
        SchemaChange(ChangeKind.RENAME_TABLE, "shop", "t", new_schema="arch", new_name="t😀"),
        SchemaChange(ChangeKind.RENAME_COLUMN, "shop", "t", column="a", new_name="b"),
        SchemaChange(ChangeKind.MODIFY_COLUMN, "shop", "t", column="a", column_type="INT",
                     nullable=True),
        SchemaChange(ChangeKind.CREATE_INDEX, "shop", "t", index="i", columns=("a", "b"),
                     unique=True),
        *(SchemaChange(kind, "s" * 64, "") for kind in ChangeKind),
    ]
    _same(_event([Statement(sql="ALTER TABLE t ...", schema_changes=every)]))
    _same(_event([Statement(sql="GRANT ALL ON *.* TO u", schema_changes=[]),
                  Statement(sql="ALTER TABLE t ADD p POINT", schema_changes=None)]))


def test_random_events_encode_like_fastavro() -> None:
    rng = random.Random(7)
    for _ in range(200):
        items: list[RowChange | Statement] = []
        for _ in range(rng.randint(0, 5)):
            if rng.random() < 0.3:
                items.append(Statement(sql=rng.choice(VALUES[22:25]) or "x",  # type: ignore[arg-type]
                                       default_schema=rng.choice([None, "db"]),
                                       timestamp=rng.choice([None, rng.getrandbits(60)])))
                continue
            n = rng.randint(1, len(SPECS))
            rows = [[rng.choice(VALUES) for _ in range(n)] for _ in range(rng.randint(0, 70))]
            items.append(RowChange(action=rng.choice(list(RowAction)), schema="db", table="t",
                                   column_specs=SPECS[:n], column_values=rows,
                                   key_specs=SPECS[:n], key_values=rows[:2]))
        _same(_event(items, {str(i): "v" * i for i in range(rng.randint(0, 70))},
                     seqno=rng.getrandbits(62)))


def test_cached_specs_are_those_of_the_same_list() -> None:
    specs = list(SPECS)
    first = _event([RowChange(action=RowAction.INSERT, schema="s", table="t",
                              column_specs=specs, column_values=[[1] * 6])])
    _same(first)
    other = [ColumnSpec(1, "renamed", "BIGINT")]
    _same(_event([RowChange(action=RowAction.INSERT, schema="s", table="t",
                            column_specs=other, column_values=[[1]])]))


def test_a_value_outside_the_schema_is_refused_by_fastavro() -> None:
    bad = _event([RowChange(action=RowAction.INSERT, schema="s", table="t",
                            column_specs=SPECS[:1], column_values=[[True]])])
    with pytest.raises(TypeError):
        fast_encoder.encode_body(bad)
    # The codec falls back to fastavro, whose error names the field.
    with pytest.raises(ValueError, match="column_values"):
        CODEC.encode(bad)
    with pytest.raises(ValueError):
        CODEC.encode(_event([RowChange(action=RowAction.INSERT, schema="s", table="t",
                                       column_specs=SPECS[:1],
                                       column_values=[[object()]])]))  # type: ignore[list-item]
