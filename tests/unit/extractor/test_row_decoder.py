"""The rows decoder against pymysqlreplication, on rows events built here: random values of
every column kind the decoder takes, NULLs, all three actions, v1 and v2 events; and the
events it must leave to the reference."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.event import NotImplementedEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from extractor import binlog_fixes, row_decoder
from extractor.row_values import TableShape
from thl_topics.event import RowAction, ThlValue

binlog_fixes.install()  # the reference the extractor runs with

_CTL = SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mariadb")
_ALLOWED = frozenset({WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, NotImplementedEvent})
_ENUM = ["", "a", "b", "ç😀"]  # pymysqlreplication's list: the error value '' first
_SET = ["x", "y", "z"]


def _column(name: str, type_: int, **attrs: Any) -> Column:
    base = {"name": name, "type": type_, "unsigned": False, "is_primary": False,
            "character_set_name": None, "enum_values": None, "set_values": None}
    return Column(**{**base, **attrs})


def _columns() -> list[Column]:
    return [
        _column("id", FIELD_TYPE.LONG, is_primary=True),
        _column("u_big", FIELD_TYPE.LONGLONG, unsigned=True),
        _column("s_big", FIELD_TYPE.LONGLONG),
        _column("tiny", FIELD_TYPE.TINY), _column("u_tiny", FIELD_TYPE.TINY, unsigned=True),
        _column("small", FIELD_TYPE.SHORT), _column("u_small", FIELD_TYPE.SHORT, unsigned=True),
        _column("med", FIELD_TYPE.INT24), _column("u_med", FIELD_TYPE.INT24, unsigned=True),
        _column("u_i", FIELD_TYPE.LONG, unsigned=True),
        _column("dec65", FIELD_TYPE.NEWDECIMAL, precision=65, decimals=30),
        _column("dec_small", FIELD_TYPE.NEWDECIMAL, precision=10, decimals=4),
        _column("dec_frac", FIELD_TYPE.NEWDECIMAL, precision=5, decimals=5),
        _column("dec_int", FIELD_TYPE.NEWDECIMAL, precision=20, decimals=0),
        _column("f", FIELD_TYPE.FLOAT, size=4), _column("d", FIELD_TYPE.DOUBLE, size=8),
        _column("b64", FIELD_TYPE.BIT, bits=64, bytes=8),
        _column("b9", FIELD_TYPE.BIT, bits=9, bytes=2),
        _column("y", FIELD_TYPE.YEAR),
        *(_column(f"t{fsp}", FIELD_TYPE.TIME2, fsp=fsp) for fsp in range(7)),
        *(_column(f"dt{fsp}", FIELD_TYPE.DATETIME2, fsp=fsp) for fsp in range(7)),
        *(_column(f"ts{fsp}", FIELD_TYPE.TIMESTAMP2, fsp=fsp) for fsp in (0, 3, 6)),
        _column("dte", FIELD_TYPE.DATE),
        _column("e", FIELD_TYPE.ENUM, size=1, enum_values=_ENUM),
        _column("st", FIELD_TYPE.SET, size=1, set_values=_SET),
        _column("vc", FIELD_TYPE.VARCHAR, max_length=200, character_set_name="utf8mb4"),
        _column("vc_long", FIELD_TYPE.VARCHAR, max_length=1200, character_set_name="utf8mb4"),
        _column("ch", FIELD_TYPE.STRING, max_length=20, character_set_name="utf8mb4"),
        _column("lat", FIELD_TYPE.VARCHAR, max_length=50, character_set_name="latin1"),
        _column("txt", FIELD_TYPE.BLOB, length_size=2, character_set_name="utf8mb4"),
        _column("ltxt", FIELD_TYPE.BLOB, length_size=4, character_set_name="utf8mb4"),
        _column("vb", FIELD_TYPE.VARCHAR, max_length=20, character_set_name="binary"),
        _column("bn", FIELD_TYPE.STRING, max_length=4, character_set_name="binary"),
        _column("bl", FIELD_TYPE.BLOB, length_size=2, character_set_name="binary"),
    ]


def _decimal_bytes(rng: random.Random, precision: int, scale: int) -> bytes:
    """A valid packed DECIMAL (random digits, random sign), as the server writes it."""
    dig2bytes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    int_words, int_rest = divmod(precision - scale, 9)
    frac_words, frac_rest = divmod(scale, 9)
    raw = bytearray()
    if int_rest:
        raw += rng.randrange(10 ** int_rest).to_bytes(dig2bytes[int_rest], "big")
    for _ in range(int_words + frac_words):
        raw += rng.randrange(10 ** 9).to_bytes(4, "big")
    if frac_rest:
        raw += rng.randrange(10 ** frac_rest).to_bytes(dig2bytes[frac_rest], "big")
    if rng.random() < 0.5:
        raw = bytearray(b ^ 0xFF for b in raw)
        raw[0] &= 0x7F
    else:
        raw[0] |= 0x80
    return bytes(raw)


def _datetime2_bytes(rng: random.Random, fsp: int) -> bytes:
    if rng.random() < 0.1:
        packed = 1 << 39  # the zero date
    else:
        year, month, day = rng.randrange(1, 10000), rng.randrange(1, 13), rng.randrange(1, 29)
        hms = rng.randrange(24) << 12 | rng.randrange(60) << 6 | rng.randrange(60)
        packed = 1 << 39 | (year * 13 + month) << 22 | day << 17 | hms
    return packed.to_bytes(5, "big") + _fraction(rng, fsp)


def _fraction(rng: random.Random, fsp: int) -> bytes:
    width = (fsp + 1) // 2
    if not width:
        return b""
    value = rng.randrange(10 ** fsp) * (10 if fsp % 2 else 1)
    return value.to_bytes(width, "big")


def _text(rng: random.Random, alphabet: str, most: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(most)))


def _value_bytes(rng: random.Random, column: Column) -> bytes:
    t = column.type
    if t in (FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG,
             FIELD_TYPE.LONGLONG):
        width = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3,
                 FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8}[t]
        extreme = rng.choice([b"\x00", b"\xff", b"\x7f", b"\x80"]) * width
        return extreme if rng.random() < 0.3 else rng.randbytes(width)
    if t == FIELD_TYPE.FLOAT:
        return struct.pack("<f", rng.uniform(-3.4e38, 3.4e38))
    if t == FIELD_TYPE.DOUBLE:
        return struct.pack("<d", rng.choice([rng.uniform(-1e308, 1e308), -0.0, 5e-324]))
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal_bytes(rng, column.precision, column.decimals)
    if t == FIELD_TYPE.BIT:
        return rng.randbytes(column.bytes)
    if t == FIELD_TYPE.YEAR:
        return bytes([rng.randrange(256)])
    if t == FIELD_TYPE.TIME2:
        return rng.randbytes(3 + (column.fsp + 1) // 2)
    if t == FIELD_TYPE.DATETIME2:
        return _datetime2_bytes(rng, column.fsp)
    if t == FIELD_TYPE.TIMESTAMP2:
        seconds = 0 if rng.random() < 0.2 else rng.randrange(1, 2 ** 31)
        return seconds.to_bytes(4, "big") + (
            bytes((column.fsp + 1) // 2) if seconds == 0 and rng.random() < 0.5
            else _fraction(rng, column.fsp))
    if t == FIELD_TYPE.DATE:
        if rng.random() < 0.2:
            return rng.choice([0, 2024 << 9, 2024 << 9 | 3 << 5]).to_bytes(3, "little")
        return (rng.randrange(1, 10000) << 9 | rng.randrange(1, 13) << 5
                | rng.randrange(1, 29)).to_bytes(3, "little")
    if t == FIELD_TYPE.ENUM:
        return bytes([rng.randrange(len(_ENUM))])
    if t == FIELD_TYPE.SET:
        return bytes([rng.randrange(8)])
    if column.character_set_name == "binary":
        data = rng.randbytes(rng.randrange(20))
    elif column.character_set_name == "latin1":
        data = _text(rng, "abcé€ßü \t'\"\\", 50).encode("cp1252")
    else:
        data = _text(rng, "aé😀ç\x00\n'\"\\ ", 300).encode("utf-8")
    size = column.length_size if t == FIELD_TYPE.BLOB else (2 if column.max_length > 255 else 1)
    if size == 1:
        data = data[:255].decode("utf-8", "ignore").encode("utf-8") \
            if column.character_set_name == "utf8mb4" else data[:255]
    return len(data).to_bytes(size, "little") + data


def _image(rng: random.Random, columns: list[Column]) -> bytes:
    nulls = [i > 0 and rng.random() < 0.15 for i in range(len(columns))]
    bitmap = sum(1 << i for i, null in enumerate(nulls) if null)
    out = bitmap.to_bytes((len(columns) + 7) // 8, "little")
    for column, null in zip(columns, nulls, strict=True):
        if not null:
            out += _value_bytes(rng, column)
    return out


def _packet(event_type: int, table_id: int, ncols: int, rows: bytes, *,
            present: bytes | None = None, extra: bytes = b"") -> bytes:
    v2 = event_type in (BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2,
                        BINLOG.DELETE_ROWS_EVENT_V2)
    post = table_id.to_bytes(6, "little") + b"\x01\x00"
    if v2:
        post += (2 + len(extra)).to_bytes(2, "little") + extra
    bitmap = present if present is not None else b"\xff" * ((ncols + 7) // 8)
    images = 2 if event_type in (BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.UPDATE_ROWS_EVENT_V2) \
        else 1
    body = post + bytes([ncols]) + bitmap * images + rows
    size = 19 + len(body) + 4
    header = struct.pack("<xIBIIIH", 1_700_000_000, event_type, 1, size, 4242, 0)
    return header + body + b"\xde\xad\xbe\xef"


def _reference(data: bytes, table: Table) -> tuple[list[list[ThlValue]], list[list[ThlValue]]]:
    wrapper = BinLogPacketWrapper(MysqlPacket(data, "utf8"), {table.table_id: table}, _CTL,
                                  (10, 11, 0), True, _ALLOWED, None, None, None, None,
                                  False, False, False, False, False, False, None)
    event = wrapper.event
    shape = TableShape(table.columns)
    after: list[list[ThlValue]] = []
    before: list[list[ThlValue]] = []
    for row in event.rows:
        if isinstance(event, UpdateRowsEvent):
            before.append(shape.values(row["before_values"], row["before_none_sources"]))
            after.append(shape.values(row["after_values"], row["after_none_sources"]))
        elif isinstance(event, WriteRowsEvent):
            after.append(shape.values(row["values"], row["none_sources"]))
        else:
            before.append(shape.values(row["values"], row["none_sources"]))
    return after, before


_KINDS = [
    (BINLOG.WRITE_ROWS_EVENT_V1, RowAction.INSERT), (BINLOG.UPDATE_ROWS_EVENT_V1,
                                                     RowAction.UPDATE),
    (BINLOG.DELETE_ROWS_EVENT_V1, RowAction.DELETE), (BINLOG.WRITE_ROWS_EVENT_V2,
                                                      RowAction.INSERT),
    (BINLOG.UPDATE_ROWS_EVENT_V2, RowAction.UPDATE), (BINLOG.DELETE_ROWS_EVENT_V2,
                                                      RowAction.DELETE),
]


@pytest.mark.parametrize(("event_type", "action"), _KINDS)
def test_random_rows_decode_as_the_reference_does(event_type: int, action: RowAction) -> None:
    columns = _columns()
    table = Table(77, "s", "t", columns)
    rng = random.Random(event_type)
    for _ in range(60):
        nrows = rng.randrange(1, 6)
        images = 2 if action is RowAction.UPDATE else 1
        rows = b"".join(_image(rng, columns) for _ in range(nrows * images))
        data = _packet(event_type, 77, len(columns), rows)
        want = _reference(data, table)
        decoded = row_decoder.decode_packet(data, {77: table}, True, None)
        assert decoded is not None and decoded.event is not None
        event = decoded.event
        assert (decoded.log_pos, decoded.timestamp, event.action) == (4242, 1_700_000_000,
                                                                      action)
        got = event.images()
        for side_want, side_got in zip(want, got, strict=True):
            assert len(side_want) == len(side_got)
            for row_want, row_got in zip(side_want, side_got, strict=True):
                for column, w, g in zip(columns, row_want, row_got, strict=True):
                    assert type(g) is type(w) and g == w, f"{column.name}: {g!r} != {w!r}"


def test_packed_decimal_as_the_documentation_shows() -> None:
    """MySQL's own example: 1234567890.1234 as DECIMAL(14,4), and its negative."""
    decimal14 = _column("d", FIELD_TYPE.NEWDECIMAL, precision=14, decimals=4)
    table = Table(5, "s", "t", [decimal14])
    for stored, text in ((bytes.fromhex("810DFB38D204D2"), "1234567890.1234"),
                         (bytes.fromhex("7EF204C72DFB2D"), "-1234567890.1234")):
        data = _packet(BINLOG.WRITE_ROWS_EVENT_V1, 5, 1, b"\x00" + stored)
        decoded = row_decoder.decode_packet(data, {5: table}, True, None)
        assert decoded is not None and decoded.event is not None
        assert decoded.event.images() == ([[text]], [])


def test_what_only_the_reference_reads_is_left_to_it() -> None:
    columns = [_column("id", FIELD_TYPE.LONG, is_primary=True),
               _column("n", FIELD_TYPE.VARCHAR, max_length=10, character_set_name="utf8mb4")]
    table = Table(9, "s", "t", columns)
    row = b"\x00" + (1).to_bytes(4, "little") + b"\x01a"
    assert row_decoder.decode_packet(
        _packet(BINLOG.WRITE_ROWS_EVENT_V1, 9, 2, row), {9: table}, True, None) is not None
    # Unknown table id, a partial image, a column count that differs, v2 extra data.
    assert row_decoder.decode_packet(
        _packet(BINLOG.WRITE_ROWS_EVENT_V1, 10, 2, row), {9: table}, True, None) is None
    assert row_decoder.decode_packet(
        _packet(BINLOG.WRITE_ROWS_EVENT_V1, 9, 2, row, present=b"\x01"), {9: table}, True,
        None) is None
    assert row_decoder.decode_packet(
        _packet(BINLOG.WRITE_ROWS_EVENT_V1, 9, 3, row), {9: table}, True, None) is None
    assert row_decoder.decode_packet(
        _packet(BINLOG.WRITE_ROWS_EVENT_V2, 9, 2, row, extra=b"\x01\x02\x00"), {9: table},
        True, None) is None
    # Column kinds the decoder does not read: the whole table goes the reference way.
    for odd in (_column("g", FIELD_TYPE.GEOMETRY, length_size=4),
                _column("j", FIELD_TYPE.JSON, length_size=4),
                _column("old", FIELD_TYPE.DATETIME),
                _column("nocs", FIELD_TYPE.VARCHAR, max_length=10)):
        assert row_decoder.TableDecoder.build([columns[0], odd]) is None, odd.name
    unnamed = _column("", FIELD_TYPE.LONG)
    assert row_decoder.TableDecoder.build([unnamed]) is None


def test_images_that_do_not_end_with_the_event_are_an_error() -> None:
    columns = [_column("id", FIELD_TYPE.LONG, is_primary=True)]
    table = Table(3, "s", "t", columns)
    data = _packet(BINLOG.WRITE_ROWS_EVENT_V1, 3, 1, b"\x00" + b"\x01\x00\x00\x00" + b"\x00")
    decoded = row_decoder.decode_packet(data, {3: table}, True, None)
    assert decoded is not None and decoded.event is not None
    with pytest.raises(ValueError, match=r"s\.t ending at binlog position 4242"):
        decoded.event.images()


def _datetime2(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
               second: int = 0) -> bytes:
    packed = (1 << 39 | (year * 13 + month) << 22 | day << 17 | hour << 12 | minute << 6
              | second)
    return packed.to_bytes(5, "big")


@pytest.mark.parametrize(("date", "datetime", "micros", "expected"), [
    ((2024, 0, 0), (2024, 3, 0, 10), 0, ["2024-00-00", "2024-03-00 10:00:00"]),
    ((0, 1, 1), (2024, 0, 15, 23, 59, 58), 5000, ["0000-01-01", "2024-00-15 23:59:58.500000"]),
    ((2024, 5, 0), (0, 0, 0), 0, ["2024-05-00", "0000-00-00 00:00:00.0000"]),
    ((0, 0, 0), (2025, 12, 31, 1, 2, 3), 1234, ["0000-00-00", "2025-12-31 01:02:03.123400"]),
])
def test_partial_and_zero_dates_arrive_exactly(date: tuple[int, int, int],
                                               datetime: tuple[int, ...], micros: int,
                                               expected: list[ThlValue]) -> None:
    """'2024-00-00' and '2024-03-00 10:00:00' arrive as stored, not as the zero date; the
    whole zero date with the column's fractional digits, as the server prints it. The
    reference (pymysqlreplication with binlog_fixes, for tables the decoder leaves to it)
    reads them the same."""
    columns = [_column("d", FIELD_TYPE.DATE), _column("dt", FIELD_TYPE.DATETIME2, fsp=4)]
    table = Table(4, "s", "t", columns)
    year, month, day = date
    row = (b"\x00" + (year << 9 | month << 5 | day).to_bytes(3, "little")
           + _datetime2(*datetime) + micros.to_bytes(2, "big"))
    data = _packet(BINLOG.WRITE_ROWS_EVENT_V1, 4, 2, row)
    decoded = row_decoder.decode_packet(data, {4: table}, True, None)
    assert decoded is not None and decoded.event is not None
    assert decoded.event.images() == ([expected], [])
    assert _reference(data, table) == decoded.event.images()


def _python_rows(decoder: row_decoder.TableDecoder, data: bytes, pos: int,
                 end: int) -> list[list[ThlValue]]:
    rows = []
    while pos < end:
        values, pos = decoder.row(data, pos)
        rows.append(values)
    assert pos == end
    return rows


def test_the_compiled_reader_reads_as_the_python_decoders() -> None:
    """Every column kind, the compiled ones and those it hands to Python, value and type."""
    columns = _columns()
    decoder = row_decoder.TableDecoder.build(columns)
    assert decoder is not None
    rng = random.Random(3)
    for _ in range(300):
        rows = b"".join(_image(rng, columns) for _ in range(rng.randrange(1, 8)))
        data = b"head" + rows + b"tail"
        want = _python_rows(decoder, data, 4, 4 + len(rows))
        got = decoder.reader.rows(data, 4, 4 + len(rows))
        assert len(got) == len(want)
        for row_want, row_got in zip(want, got, strict=True):
            for column, w, g in zip(columns, row_want, row_got, strict=True):
                assert type(g) is type(w) and g == w, f"{column.name}: {g!r} != {w!r}"


def test_a_cut_row_image_is_an_error_never_a_read_past_the_packet() -> None:
    columns = [_column("id", FIELD_TYPE.LONG, is_primary=True),
               _column("big", FIELD_TYPE.LONGLONG, unsigned=True),
               _column("vc", FIELD_TYPE.VARCHAR, max_length=300, character_set_name="utf8mb4"),
               _column("bl", FIELD_TYPE.BLOB, length_size=4, character_set_name="binary"),
               _column("d", FIELD_TYPE.NEWDECIMAL, precision=10, decimals=2)]
    decoder = row_decoder.TableDecoder.build(columns)
    assert decoder is not None
    rng = random.Random(5)
    images = [_image(rng, columns) for _ in range(4)]
    data = b"".join(images)
    bounds = {sum(len(i) for i in images[:n]): n for n in range(len(images) + 1)}
    for cut in range(len(data) + 1):
        if cut in bounds:  # whole images: those rows
            assert len(decoder.reader.rows(data[:cut], 0, cut)) == bounds[cut]
        else:
            with pytest.raises(ValueError, match="byte"):
                decoder.reader.rows(data[:cut], 0, cut)
    with pytest.raises(ValueError, match="past the packet"):
        decoder.reader.rows(data, 0, len(data) + 1)
    # A length prefix that claims more than the packet holds.
    lying = b"\x00" + b"\x01\x00\x00\x00" + bytes(8) + b"\xff\xff" + b"abc"
    with pytest.raises(ValueError, match="run past"):
        decoder.reader.rows(lying, 0, len(lying))


def test_an_update_with_an_odd_number_of_images_is_an_error() -> None:
    columns = [_column("id", FIELD_TYPE.LONG, is_primary=True)]
    table = Table(3, "s", "t", columns)
    data = _packet(BINLOG.UPDATE_ROWS_EVENT_V1, 3, 1, b"\x00" + b"\x01\x00\x00\x00")
    decoded = row_decoder.decode_packet(data, {3: table}, True, None)
    assert decoded is not None and decoded.event is not None
    with pytest.raises(ValueError, match=r"s\.t ending at binlog position 4242: 1 row images"):
        decoded.event.images()
