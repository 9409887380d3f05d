"""The compiled THL reader reads exactly what fastavro reads, and refuses what it refuses."""

from __future__ import annotations

import random

import pytest

from thl_topics import fast_encoder
from thl_topics.codec import MAGIC, ThlCodec
from thl_topics.errors import ThlDecodeError
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.schema_change import ChangeKind, SchemaChange

from .test_fast_encoder import SPECS, VALUES, _event


def _read(event: ThlEvent, codec: ThlCodec | None = None) -> ThlEvent:
    codec = codec or ThlCodec()
    data = codec.encode(event)
    fast = codec.decode(data)
    assert fast == codec.decode_reference(data) == event
    return fast


def test_every_union_branch_and_edge_value_reads_like_fastavro() -> None:
    rows = [[v, v, v, v, v, v] for v in VALUES]
    for action in RowAction:
        change = RowChange(action=action, schema="shop", table="t", column_specs=SPECS,
                           key_specs=SPECS if action is not RowAction.INSERT else [],
                           column_values=rows if action is not RowAction.DELETE else [],
                           key_values=rows if action is not RowAction.INSERT else [])
        _read(_event([change], {"service": "s", "gtid": "0-1-99", "é": "😀"}))


def test_statements_schema_changes_and_empty_parts_read_like_fastavro() -> None:
    every = [
        SchemaChange(ChangeKind.ADD_COLUMN, "shop", "t", column="c", column_type="BIGINT",
                     nullable=False, position="FIRST"),
        SchemaChange(ChangeKind.MODIFY_COLUMN, "shop", "t", column="a", nullable=True),
        SchemaChange(ChangeKind.RENAME_TABLE, "shop", "t", new_schema="a", new_name="t😀"),
        SchemaChange(ChangeKind.CREATE_INDEX, "shop", "t", index="i", columns=("a", "b"),
                     unique=True),
        *(SchemaChange(kind, "s" * 64, "") for kind in ChangeKind),
    ]
    stmt = Statement(sql="ALTER TABLE t ...", default_schema="shop",
                     options={"sql_mode": "1436549152", "ç": "😀"}, error_code=-1062,
                     timestamp=-(1 << 62), schema_changes=every)
    _read(_event([stmt, Statement(sql=""), Statement(sql="x", schema_changes=[]),
                  RowChange(action=RowAction.DELETE, schema="", table="")], seqno=0))
    _read(_event([], seqno=-5))
    _read(_event([RowChange(action=RowAction.INSERT, schema="s", table="t",
                            column_specs=SPECS, column_values=[[]] * 3)]))


def test_random_events_read_like_fastavro() -> None:
    rng = random.Random(11)
    codec = ThlCodec()
    for _ in range(200):
        items: list[RowChange | Statement] = []
        for _ in range(rng.randint(0, 6)):
            if rng.random() < 0.2:
                items.append(Statement(sql="x" * rng.randint(0, 9),
                                       timestamp=rng.choice([None, rng.getrandbits(60)])))
                continue
            n = rng.randint(1, len(SPECS))
            rows = [[rng.choice(VALUES) for _ in range(n)] for _ in range(rng.randint(0, 30))]
            table = rng.choice(["a", "b"])
            items.append(RowChange(action=rng.choice(list(RowAction)), schema="db",
                                   table=table, column_specs=SPECS[:n], column_values=rows,
                                   key_specs=SPECS[:n][::-1], key_values=rows[:2]))
        _read(_event(items, {str(i): "v" * i for i in range(rng.randint(0, 9))},
                     seqno=rng.getrandbits(62)), codec)


def test_specs_are_shared_per_shape_and_follow_a_changed_table() -> None:
    codec = ThlCodec()
    wide = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "v", "TEXT")]
    narrow = [ColumnSpec(1, "id", "INT", primary_key=True)]

    def change(specs: list[ColumnSpec], row: list[ThlValue]) -> RowChange:
        return RowChange(action=RowAction.INSERT, schema="s", table="t", column_specs=specs,
                         column_values=[row])

    first = _read(_event([change(wide, [1, "a"]), change(wide, [2, "b"])]), codec)
    a, b = first.data
    assert isinstance(a, RowChange) and isinstance(b, RowChange)
    assert a.column_specs is b.column_specs
    # A column dropped, then added back: each event reads its own table shape.
    shapes: list[tuple[list[ColumnSpec], list[ThlValue]]] = [
        (narrow, [3]), (wide, [4, "d"]), (narrow, [5])]
    for specs, row in shapes:
        later = _read(_event([change(specs, row)]), codec)
        assert isinstance(later.data[0], RowChange)
        assert later.data[0].column_specs == specs


def _body(event: ThlEvent) -> bytes:
    return ThlCodec().encode(event)[len(MAGIC) + 8:]


def test_arrays_and_maps_in_several_blocks_read_like_fastavro() -> None:
    # fastavro and our writer write one block; other Avro writers may write several, and
    # negative counts followed by the block's size in bytes.
    long, string = fast_encoder._long, fast_encoder._string
    specs = b"".join(fast_encoder._spec(s) for s in SPECS[:2])
    row = long(2) + long(1) + long(7) + long(3) + string("é") + long(0)  # [7, "é"]
    body = b"".join([
        long(9), long(0), b"\x01", long(3), string("src"), string("b.1:4;0"), string("shard"),
        long(1), long(-1), long(len(string("k") + string("v"))), string("k") + string("v"),
        long(1), string("k2") + string("v2"), long(0),  # metadata: two blocks
        long(1), long(1),  # data: one item, a RowChange
        long(1), string("s"), string("t"),
        long(-2), long(len(specs)), specs, long(0),  # column specs: one sized block
        long(0),  # no key specs
        long(1), row, long(-1), long(len(row)), row, long(0),  # rows: two blocks
        long(0), long(0),  # no key rows; end of data
    ])
    codec = ThlCodec()
    data = MAGIC + bytes.fromhex(fast_encoder.SCHEMA_FINGERPRINT_HEX) + body
    fast = codec.decode(data)
    assert fast == codec.decode_reference(data)
    assert fast.metadata == {"k": "v", "k2": "v2"}
    change = fast.data[0]
    assert isinstance(change, RowChange)
    assert change.column_values == [[7, "é"], [7, "é"]]
    assert change.column_specs == SPECS[:2]


def test_every_truncated_body_is_a_decode_error() -> None:
    event = _event([Statement(sql="DROP TABLE t", schema_changes=[
                        SchemaChange(ChangeKind.DROP_TABLE, "s", "t")]),
                    RowChange(action=RowAction.UPDATE, schema="s", table="t",
                              column_specs=SPECS, key_specs=SPECS,
                              column_values=[[1, 2.5, "x", b"y", None, (1 << 63) - 1]],
                              key_values=[[1, 2.5, "x", b"y", None, -1]])],
                   {"m": "v"})
    codec = ThlCodec()
    data = codec.encode(event)
    for end in range(len(MAGIC) + 8, len(data)):
        with pytest.raises(ThlDecodeError, match="corrupt body"):
            codec.decode(data[:end])
    with pytest.raises(ThlDecodeError, match="trailing bytes"):
        codec.decode(data + b"\x00")


def test_corrupt_bytes_are_refused_or_read_as_fastavro_reads_them() -> None:
    rng = random.Random(5)
    codec = ThlCodec()
    data = codec.encode(_event([RowChange(
        action=RowAction.UPDATE, schema="s", table="t", column_specs=SPECS, key_specs=SPECS,
        column_values=[[1, -2, "x", b"y", None, 0.5]] * 3, key_values=[[1] * 6] * 3)]))
    start = len(MAGIC) + 8
    for _ in range(3000):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(start, len(bad))] = rng.randrange(256)
        try:
            fast: ThlEvent | None = codec.decode(bytes(bad))
        except ThlDecodeError:
            fast = None
        try:
            reference: ThlEvent | None = codec.decode_reference(bytes(bad))
        except ThlDecodeError:
            reference = None
        if fast is not None:
            # Whatever the compiled reader accepts, fastavro reads the same way.
            assert fast == reference
