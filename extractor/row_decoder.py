"""Rows events decoded in one pass, straight into THL values.

pymysqlreplication turns every binlog event into a packet wrapper and an event object, and
every row into a dict of Python values that :mod:`extractor.row_values` then converts; with
one single-row statement per event (the common OLTP case) that per-event work is most of the
extractor's parse time (stop 22's profile: ``BinLogPacketWrapper.__init__`` alone was 5.3 s of
13.7 s). This module keeps pymysqlreplication's protocol loop (connection, packets, rotation,
table maps, every other event) and replaces how a rows event of a known table becomes
values: one decoder per distinct table map, built once, reads the row images from the packet
bytes (in compiled code, ``_row_images.pyx``, for the common column kinds) and produces the
same THL values :class:`extractor.row_values.TableShape` would.

Exactness is the rule, so the fast path only takes what it decodes exactly as the reference:
a table with a column type it does not know (MySQL's binary JSON, GEOMETRY, the pre-5.6
temporal types, a charset without a Python codec), a partial row image (``binlog_row_image``
other than FULL), a v2 event with extra data or a table map without column names goes the
reference way, event by event. The equality test over the type matrix is the judge.
"""

from __future__ import annotations

import codecs
import datetime as dt
import decimal
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pymysqlreplication import binlogstream
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from extractor import table_map_cache
from extractor._row_images import RowReader
from extractor.binlog_fixes import read_time2
from extractor.row_values import IdentityCache, TableShape, shape_of
from thl_topics.event import ColumnSpec, RowAction, ThlValue
from thl_topics.values import (
    format_date_parts,
    format_datetime,
    format_datetime_parts,
    format_time,
    set_to_thl,
    to_thl,
)

#: (packet bytes, offset) -> (THL value, offset after it).
ColumnDecoder = Callable[[bytes, int], tuple[ThlValue, int]]

# What the compiled reader (extractor/_row_images.pyx) reads itself, by column kind; K_PY
# columns it reads through their Python decoder. Keep in step with the .pyx.
(K_PY, K_I8, K_U8, K_I16, K_U16, K_I24, K_U24, K_I32, K_U32, K_I64, K_U64, K_F32, K_F64,
 K_TEXT, K_BYTES) = range(15)


@dataclass(frozen=True, slots=True)
class Column:
    """How one column's non-NULL values are read: its Python decoder, and the compiled
    reader's kind for it with the kind's width (a string's: its length prefix) and codec."""

    decode: ColumnDecoder
    kind: int = K_PY
    size: int = 0
    encoding: str | None = None

_ROWS_EVENTS: dict[int, tuple[type[RowsEvent], RowAction]] = {
    BINLOG.WRITE_ROWS_EVENT_V1: (WriteRowsEvent, RowAction.INSERT),
    BINLOG.WRITE_ROWS_EVENT_V2: (WriteRowsEvent, RowAction.INSERT),
    BINLOG.UPDATE_ROWS_EVENT_V1: (UpdateRowsEvent, RowAction.UPDATE),
    BINLOG.UPDATE_ROWS_EVENT_V2: (UpdateRowsEvent, RowAction.UPDATE),
    BINLOG.DELETE_ROWS_EVENT_V1: (DeleteRowsEvent, RowAction.DELETE),
    BINLOG.DELETE_ROWS_EVENT_V2: (DeleteRowsEvent, RowAction.DELETE),
}
_V2 = (BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2)
#: The OK byte, then the common header: timestamp, type, server id, size, next position,
#: flags.
_HEADER = struct.Struct("<xIBIIIH")
_COMMON_HEADER_LEN = 19
_HEADER_END = 1 + _COMMON_HEADER_LEN
_CHECKSUM_LEN = 4
_EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - the binlog's naive UTC, as the reference
_LONG_MAX = (1 << 63) - 1
#: Rows event post-header flag: the statement ran with ``foreign_key_checks=0``.
NO_FOREIGN_KEY_CHECKS = 0x0002
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_DIGITS_PER_WORD = 9


@dataclass(slots=True, kw_only=True)
class DecodedRows:
    """A rows event of one table, read here instead of by pymysqlreplication.

    It stands where pymysqlreplication's rows event would. Its row images (``data`` from
    ``start`` to ``end``) are read only when asked for (:meth:`images`), after the
    assembler's filters, as pymysqlreplication reads ``rows`` only when asked: a filtered
    table costs nothing and fails nothing.
    """

    action: RowAction
    decoder: TableDecoder
    schema: str
    table: str
    timestamp: int
    event_size: int
    log_pos: int
    data: bytes
    start: int
    end: int
    #: The rows event's NO_FOREIGN_KEY_CHECKS flag was clear: InnoDB ran the table's
    #: foreign-key actions (``extractor.foreign_keys``).
    fk_checks: bool = True

    @property
    def shape(self) -> TableShape:
        """The table's column specs (shared with the reference path's shape)."""
        return self.decoder.shape

    def images(self) -> tuple[list[list[ThlValue]], list[list[ThlValue]]]:
        """(after, before) as THL values in column order: the inserted rows and updated
        rows' new images; the deleted rows and updated rows' old images."""
        try:
            rows = self.decoder.reader.rows(self.data, self.start, self.end)
            if self.action is RowAction.INSERT:
                return rows, []
            if self.action is RowAction.DELETE:
                return [], rows
            if len(rows) % 2:
                raise ValueError(f"{len(rows)} row images, not pairs of before and after")
        except ValueError as exc:
            raise ValueError(f"rows event of {self.schema}.{self.table} ending at binlog "
                             f"position {self.log_pos}: {exc}") from exc
        return rows[1::2], rows[0::2]


@dataclass(slots=True)
class _Decoded:
    """What pymysqlreplication's fetch loop reads of a packet wrapper: the header fields
    and the event (None: nothing to hand out, as for a table map)."""

    event: DecodedRows | None
    event_type: int
    log_pos: int
    timestamp: int


# -- column decoders -------------------------------------------------------------------

def _fixed(fmt: str) -> ColumnDecoder:
    unpack = struct.Struct(fmt).unpack_from
    width = struct.calcsize(fmt)

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        return unpack(data, pos)[0], pos + width
    return decode


def _int24(unsigned: bool) -> ColumnDecoder:
    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        return int.from_bytes(data[pos:pos + 3], "little", signed=not unsigned), pos + 3
    return decode


def _ubigint(data: bytes, pos: int) -> tuple[ThlValue, int]:
    value = int.from_bytes(data[pos:pos + 8], "little")
    return (value if value <= _LONG_MAX else str(value)), pos + 8


def _length(size: int) -> Callable[[bytes, int], int]:
    if size == 1:
        return lambda data, pos: data[pos]
    return lambda data, pos: int.from_bytes(data[pos:pos + size], "little")


def _text(size: int, encoding: str | None) -> Column:
    """A length-prefixed string: text in ``encoding``, or bytes (None: binary)."""
    length = _length(size)
    if encoding is None:
        def raw(data: bytes, pos: int) -> tuple[ThlValue, int]:
            n = length(data, pos)
            start = pos + size
            return data[start:start + n], start + n
        return Column(raw, K_BYTES, size)

    def text(data: bytes, pos: int) -> tuple[ThlValue, int]:
        n = length(data, pos)
        start = pos + size
        return data[start:start + n].decode(encoding), start + n
    return Column(text, K_TEXT, size, encoding)


def _encoding(column: Any) -> tuple[bool, str | None]:
    """(decodable exactly as the reference does, Python codec or None for bytes)."""
    name = column.character_set_name
    if name is None:
        return False, None  # the reference guesses UTF-8, then the converter re-encodes
    encoding = RowsEvent.charset_to_encoding(name)
    if encoding is None:
        return False, None  # the reference fails on such a charset: let it say so
    try:
        codecs.lookup(encoding)
    except LookupError:
        return True, None  # the reference keeps the bytes ("binary", or no Python codec)
    return True, encoding


def _fraction(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """(bytes, microseconds reader) of a temporal type's fractional part."""
    width = (fsp + 1) // 2
    if width == 0:
        return 0, lambda data, pos: 0
    scale: int = 10 ** (6 - fsp)

    def micros(data: bytes, pos: int) -> int:
        value = int.from_bytes(data[pos:pos + width], "big", signed=True)
        if fsp % 2:
            value = int(value / 10)
        return value * scale
    return width, micros


def _zero(spec: ColumnSpec) -> str:
    return "0000-00-00 00:00:00" + ("." + "0" * spec.scale if spec.scale else "")


def _datetime2(fsp: int, zero: str) -> ColumnDecoder:
    width, micros = _fraction(fsp)

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        packed = int.from_bytes(data[pos:pos + 5], "big")
        end = pos + 5 + width
        year_month = (packed >> 22) & 0x1FFFF
        parts = (year_month // 13, year_month % 13, (packed >> 17) & 0x1F,
                 (packed >> 12) & 0x1F, (packed >> 6) & 0x3F, packed & 0x3F)
        micro = micros(data, pos + 5)
        if not (parts[0] and parts[1] and parts[2]):
            # A zero date as the server prints it; a partial one ('2024-03-00 10:00:00')
            # exactly, not as the zero date.
            if not any(parts) and micro <= 0:
                return zero, end
            return format_datetime_parts(*parts, max(micro, 0)), end
        value = dt.datetime(*parts)  # noqa: DTZ001 - DATETIME has no zone
        return format_datetime(value.replace(microsecond=micro) if micro > 0 else value), end
    return decode


def _timestamp2(fsp: int, zero: str) -> ColumnDecoder:
    width, micros = _fraction(fsp)

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        seconds = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        micro = micros(data, pos + 4)
        value = _EPOCH + dt.timedelta(seconds=seconds)
        if micro > 0:
            value = value.replace(microsecond=micro)
        # TIMESTAMP's zero value is stored as second 0 of the Unix epoch.
        return (zero if value == _EPOCH else format_datetime(value)), pos + 4 + width
    return decode


def _time2(fsp: int) -> ColumnDecoder:
    size = 3 + (fsp + 1) // 2

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        return format_time(read_time2(data[pos:pos + size], fsp)), pos + size
    return decode


def _date(data: bytes, pos: int) -> tuple[ThlValue, int]:
    packed = int.from_bytes(data[pos:pos + 3], "little")
    year, month, day = packed >> 9, (packed >> 5) & 0xF, packed & 0x1F
    if year and month and day:
        dt.date(year, month, day)  # an impossible date fails here, as in the reference
    # The zero date and partial ones ('2024-00-00') exactly as stored.
    return format_date_parts(year, month, day), pos + 3


def _year(data: bytes, pos: int) -> tuple[ThlValue, int]:
    # The binlog stores YEAR as an offset from 1900; offset 0 is the year 0000.
    offset = data[pos]
    return (offset + 1900 if offset else 0), pos + 1


def _bit(bits: int, nbytes: int) -> ColumnDecoder:
    mask = (1 << bits) - 1  # the reference reads only the column's bits of the first byte

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        return to_thl(int.from_bytes(data[pos:pos + nbytes], "big") & mask), pos + nbytes
    return decode


def _enum(size: int, members: Sequence[str] | None) -> ColumnDecoder:
    if not members:  # no member names in the table map: the reference gives None
        return lambda data, pos: (None, pos + size)

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        return members[int.from_bytes(data[pos:pos + size], "little")], pos + size
    return decode


def _set(size: int, members: Sequence[str] | None, spec: ColumnSpec) -> ColumnDecoder:
    known = tuple(members or ())  # no member names in the table map: every value is ''

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        mask = int.from_bytes(data[pos:pos + size], "little")
        chosen = [m for i, m in enumerate(known) if mask >> i & 1]
        return (set_to_thl(chosen, spec) if chosen else ""), pos + size
    return decode


def _decimal(precision: int, scale: int) -> ColumnDecoder:
    """MySQL's packed DECIMAL: base-10^9 words, big-endian, the sign in the top bit, a
    negative value stored inverted (``decimal2bin`` in strings/decimal.c)."""
    integral = precision - scale
    int_words, int_rest = divmod(integral, _DIGITS_PER_WORD)
    frac_words, frac_rest = divmod(scale, _DIGITS_PER_WORD)
    lead, tail = _DIG2BYTES[int_rest], _DIG2BYTES[frac_rest]
    size = lead + 4 * (int_words + frac_words) + tail

    def decode(data: bytes, pos: int) -> tuple[ThlValue, int]:
        raw = bytearray(data[pos:pos + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(b ^ 0xFF for b in raw)
        at = 0
        text = "-" if negative else ""
        if lead:
            text += str(int.from_bytes(raw[:lead], "big"))
            at = lead
        for _ in range(int_words):
            text += f"{int.from_bytes(raw[at:at + 4], 'big'):09d}"
            at += 4
        text += "."
        for _ in range(frac_words):
            text += f"{int.from_bytes(raw[at:at + 4], 'big'):09d}"
            at += 4
        if tail:
            text += f"{int.from_bytes(raw[at:at + tail], 'big'):0{frac_rest}d}"
        return format(decimal.Decimal(text), "f"), pos + size
    return decode


_INTEGERS = {
    FIELD_TYPE.TINY: ((K_I8, "<b"), (K_U8, "<B")), FIELD_TYPE.SHORT: ((K_I16, "<h"), (K_U16, "<H")),
    FIELD_TYPE.LONG: ((K_I32, "<i"), (K_U32, "<I")), FIELD_TYPE.LONGLONG: ((K_I64, "<q"), None),
}


def _fixed_column(kind: int, fmt: str) -> Column:
    return Column(_fixed(fmt), kind, struct.calcsize(fmt))


def column_decoder(column: Any, spec: ColumnSpec) -> Column | None:
    """How one column's non-NULL values are read (None: only the reference decodes it)."""
    t = column.type
    if t in _INTEGERS:
        signed, unsigned = _INTEGERS[t]
        if column.unsigned:
            return _fixed_column(*unsigned) if unsigned else Column(_ubigint, K_U64, 8)
        return _fixed_column(*signed)
    if t == FIELD_TYPE.INT24:
        return Column(_int24(bool(column.unsigned)), K_U24 if column.unsigned else K_I24, 3)
    if t == FIELD_TYPE.FLOAT:
        return _fixed_column(K_F32, "<f")
    if t == FIELD_TYPE.DOUBLE:
        return _fixed_column(K_F64, "<d")
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        exact, encoding = _encoding(column)
        if not exact:
            return None
        size = column.length_size if t == FIELD_TYPE.BLOB else \
            (2 if column.max_length > 255 else 1)
        return _text(size, encoding)
    decode = _other(column, spec)
    return None if decode is None else Column(decode)


def _other(column: Any, spec: ColumnSpec) -> ColumnDecoder | None:
    """The Python decoder of a column kind the compiled reader leaves to Python."""
    t = column.type
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal(column.precision, column.decimals)
    if t == FIELD_TYPE.DATETIME2:
        return _datetime2(column.fsp, _zero(spec))
    if t == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(column.fsp, _zero(spec))
    if t == FIELD_TYPE.TIME2:
        return _time2(column.fsp)
    if t == FIELD_TYPE.DATE:
        return _date
    if t == FIELD_TYPE.YEAR:
        return _year
    if t == FIELD_TYPE.BIT:
        return _bit(column.bits, column.bytes)
    if t == FIELD_TYPE.ENUM:
        return _enum(column.size, column.enum_values)
    if t == FIELD_TYPE.SET:
        return _set(column.size, column.set_values, spec)
    return None


class TableDecoder:
    """Row images of one table map, FULL image: a NULL bitmap, then each non-NULL value.

    ``reader`` (compiled) reads them on the extractor's path; ``row`` is the same in Python,
    one closure per column, which the unit tests hold the compiled reader to."""

    __slots__ = ("bitmap_len", "decoders", "reader", "shape")

    def __init__(self, shape: TableShape, columns: list[Column]) -> None:
        self.shape = shape
        self.decoders = [c.decode for c in columns]
        self.bitmap_len = (len(columns) + 7) // 8
        self.reader = RowReader([c.kind for c in columns], [c.size for c in columns],
                                [c.encoding or "" for c in columns], self.decoders)

    @classmethod
    def build(cls, columns: Sequence[Any]) -> TableDecoder | None:
        """The decoder of a table, or None if a column is one only the reference decodes."""
        if not columns or not all(c.name for c in columns):
            return None
        shape = shape_of(columns)
        decoders = [column_decoder(c, s) for c, s in zip(columns, shape.specs, strict=True)]
        if any(d is None for d in decoders):
            return None
        return cls(shape, [d for d in decoders if d is not None])

    def row(self, data: bytes, pos: int) -> tuple[list[ThlValue], int]:
        """One row image at ``pos``: its values and where the next image starts."""
        end = pos + self.bitmap_len
        nulls = int.from_bytes(data[pos:end], "little")
        pos = end
        values: list[ThlValue] = []
        append = values.append
        for decode in self.decoders:
            if nulls & 1:
                append(None)
            else:
                value, pos = decode(data, pos)
                append(value)
            nulls >>= 1
        return values, pos


class Stats:
    """Rows events decoded here, and those left to the reference, by schema (tests,
    profiling): a stream reads every schema's events, so a count without the schema would
    mix in whatever else wrote to the server meanwhile."""

    decoded: ClassVar[Counter[str]] = Counter()
    referred: ClassVar[Counter[str]] = Counter()


# One decoder per table object (the table-map cache hands out one per distinct table map).
_decoders: IdentityCache[Any, TableDecoder | None] = IdentityCache(
    lambda table: TableDecoder.build(table.columns))


def _rows_flags(data: bytes) -> int:
    """The rows event's post-header flags (after its 6-byte table id)."""
    return int.from_bytes(data[_HEADER_END + 6:_HEADER_END + 8], "little")


def _all_present(data: bytes, pos: int, ncols: int) -> bool:
    full, rest = divmod(ncols, 8)
    if data[pos:pos + full] != b"\xff" * full:
        return False
    return not rest or data[pos + full] & ((1 << rest) - 1) == (1 << rest) - 1


def _table_of(data: bytes, table_map: dict[int, Any]) -> Any:
    """The table (map) a rows event names by its 6-byte table id, or None."""
    return table_map.get(int.from_bytes(data[_HEADER_END:_HEADER_END + 6], "little"))


def decode_packet(data: bytes, table_map: dict[int, Any], use_checksum: bool,
                  post_header_lengths: Sequence[int] | None) -> _Decoded | None:
    """A rows event of a FULL image of a table this module decodes, else None."""
    timestamp, event_type, _server, event_size, log_pos, _flags = \
        _HEADER.unpack_from(data)
    kind = _ROWS_EVENTS.get(event_type)
    if kind is None:
        return None
    table = _table_of(data, table_map)
    if table is None:
        return None
    decoder = _decoders.get(table)
    if decoder is None:
        return None
    known = 10 if event_type in _V2 else 8
    declared = known
    if post_header_lengths and 0 <= event_type - 1 < len(post_header_lengths):
        declared = post_header_lengths[event_type - 1]
    if declared < known:
        return None  # malformed: the reference says so
    if event_type in _V2 and int.from_bytes(data[28:30], "little") != 2:
        return None  # extra row data (NDB, partitions): the reference reads it
    pos = _HEADER_END + declared
    trailer = _CHECKSUM_LEN if use_checksum else 0
    end = 1 + event_size - trailer
    ncols = data[pos]
    if ncols >= 251 or ncols != len(decoder.decoders):
        return None  # 251+ columns are length-coded wider; a count that differs: reference
    pos += 1
    bitmap = (ncols + 7) // 8
    images = 2 if kind[1] is RowAction.UPDATE else 1
    for i in range(images):
        if not _all_present(data, pos + i * bitmap, ncols):
            return None  # a partial image (binlog_row_image MINIMAL or NOBLOB)
    pos += images * bitmap
    Stats.decoded[table.schema] += 1
    # The reference's event size: without the common header and the checksum.
    size = event_size - _COMMON_HEADER_LEN - trailer
    event = DecodedRows(action=kind[1], decoder=decoder, schema=table.schema,
                        table=table.table, timestamp=timestamp, event_size=size,
                        log_pos=log_pos, data=data, start=pos, end=end,
                        fk_checks=not _rows_flags(data) & NO_FOREIGN_KEY_CHECKS)
    return _Decoded(event, event_type, log_pos, timestamp)


def _wrapper(pkt: Any, table_map: dict[int, Any], ctl_connection: Any, mysql_version: Any,
             use_checksum: bool, allowed_events: Any, only_tables: Any, ignored_tables: Any,
             only_schemas: Any, ignored_schemas: Any, freeze_schema: Any,
             ignore_decode_errors: Any, verify_checksum: Any, *rest: Any,
             **kwargs: Any) -> Any:
    """pymysqlreplication's packet wrapper, or what this module reads itself where that is
    exact: a rows event it decodes, a table map already parsed."""
    data = getattr(pkt, "_data", None)
    if (type(data) is bytes and len(data) > _HEADER_END + 8
            and getattr(pkt, "_position", None) == 0
            and only_tables is None and ignored_tables is None and only_schemas is None
            and ignored_schemas is None and not freeze_schema and not ignore_decode_errors
            and not verify_checksum):
        event_type = data[5]
        if event_type == BINLOG.TABLE_MAP_EVENT:
            known = table_map_cache.known_table(
                data[_HEADER_END:len(data) - (_CHECKSUM_LEN if use_checksum else 0)])
            if known is not None:
                # What pymysqlreplication's loop does with a table map, and nothing else.
                table_map[known[0]] = known[1]
                timestamp, _, _, _, log_pos, _ = _HEADER.unpack_from(data)
                return _Decoded(None, event_type, log_pos, timestamp)
        elif event_type in _ROWS_EVENTS and _ROWS_EVENTS[event_type][0] in allowed_events:
            post_header_lengths = kwargs.get("post_header_lengths",
                                             rest[3] if len(rest) > 3 else None)
            decoded = decode_packet(data, table_map, use_checksum, post_header_lengths)
            if decoded is not None:
                return decoded
            Stats.referred[getattr(_table_of(data, table_map), "schema", "")] += 1
    return BinLogPacketWrapper(pkt, table_map, ctl_connection, mysql_version, use_checksum,
                               allowed_events, only_tables, ignored_tables, only_schemas,
                               ignored_schemas, freeze_schema, ignore_decode_errors,
                               verify_checksum, *rest, **kwargs)


def install() -> None:
    """Decode rows events here from now on, in every stream (idempotent)."""
    binlogstream.BinLogPacketWrapper = _wrapper


def uninstall() -> None:
    """Every event through pymysqlreplication again (the reference of the equality test)."""
    binlogstream.BinLogPacketWrapper = BinLogPacketWrapper
