"""A direct Avro writer for THL events, byte for byte what fastavro writes, only faster.

fastavro builds nothing from a schema ahead of time: every event is first turned into nested
dicts (``ThlEvent.to_avro``), then every value of the column-value union is matched against
its branches one by one. On the extractor's hot path (many small row changes of few tables)
that was 17% of all time (PERF.md). This writer knows the one schema it writes
(``thl_event.v2.avsc``; ``ThlCodec`` checks that it is still the newest) and keeps the
encoded column specs of each table shape, which are the same bytes for every row change of
that table; the rows themselves are written by compiled code (``_avro_rows.pyx``).
``tests/unit/thl_topics/test_fast_encoder.py`` proves it equal to fastavro's output on every
kind of value.
"""

from __future__ import annotations

from collections.abc import Sequence

from thl_topics._avro_rows import encode_rows
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.schema_change import ChangeKind, SchemaChange

#: Fingerprint (hex) of the schema this writer produces; the codec uses it only for that one.
SCHEMA_FINGERPRINT_HEX = "6611d37c95009b02"  # thl_event.v2.avsc

_ACTION_INDEX = {RowAction.INSERT: 0, RowAction.UPDATE: 1, RowAction.DELETE: 2}
#: Encoded column-spec arrays by the identity of the spec list (the list is kept alive in
#: the entry, so its id cannot be reused while it is cached).
_SPEC_CACHE: dict[int, tuple[Sequence[ColumnSpec], bytes]] = {}
_SPEC_CACHE_MAX = 4096
#: Varints of small non-negative numbers (zigzag applied): lengths, counts, flags.
_SMALL = [bytes([v * 2]) if v < 64 else b"" for v in range(64)]


def _long(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit value."""
    n = (value << 1) ^ (value >> 63)
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _size(n: int) -> bytes:
    return _SMALL[n] if n < 64 else _long(n)


def _string(text: str) -> bytes:
    raw = text.encode()
    return _size(len(raw)) + raw


def _spec(spec: ColumnSpec) -> bytes:
    parts = [_long(spec.index), _string(spec.name), _string(spec.type), _long(spec.length),
             _long(spec.scale), b"\x01" if spec.unsigned else b"\x00",
             b"\x01" if spec.nullable else b"\x00", b"\x01" if spec.blob else b"\x00",
             b"\x00" if spec.charset is None else b"\x02" + _string(spec.charset),
             b"\x01" if spec.primary_key else b"\x00"]
    if spec.enum_values:
        parts.append(_size(len(spec.enum_values)))
        parts.extend(_string(v) for v in spec.enum_values)
    parts.append(b"\x00")
    return b"".join(parts)


def _specs(specs: Sequence[ColumnSpec]) -> bytes:
    cached = _SPEC_CACHE.get(id(specs))
    if cached is not None and cached[0] is specs:
        return cached[1]
    if not specs:
        return b"\x00"
    encoded = _size(len(specs)) + b"".join(_spec(s) for s in specs) + b"\x00"
    if len(_SPEC_CACHE) >= _SPEC_CACHE_MAX:
        _SPEC_CACHE.clear()
    # Specs are never changed once a table shape made them: caching the bytes is safe.
    _SPEC_CACHE[id(specs)] = (specs, encoded)
    return encoded


def _rows(rows: Sequence[Sequence[ThlValue]], out: list[bytes]) -> None:
    # A typed loop (thl_topics/_avro_rows.pyx): rows are most of an event's values.
    out.append(encode_rows(rows, _long))


_KIND_INDEX = {kind: i for i, kind in enumerate(ChangeKind)}


def _optional(text: str | None) -> bytes:
    return b"\x00" if text is None else b"\x02" + _string(text)


def _schema_change(change: SchemaChange) -> bytes:
    parts = [_long(_KIND_INDEX[change.kind]), _string(change.schema), _string(change.table),
             _optional(change.column), _optional(change.new_name),
             _optional(change.new_schema), _optional(change.column_type),
             b"\x00" if change.nullable is None
             else b"\x02\x01" if change.nullable else b"\x02\x00",
             _optional(change.position), _optional(change.index)]
    if change.columns:
        parts.append(_size(len(change.columns)))
        parts.extend(_string(c) for c in change.columns)
    parts.append(b"\x00")
    parts.append(b"\x01" if change.unique else b"\x00")
    return b"".join(parts)


def _schema_changes(changes: Sequence[SchemaChange] | None) -> bytes:
    if changes is None:
        return b"\x00"
    if not changes:
        return b"\x02\x00"
    return (b"\x02" + _size(len(changes)) + b"".join(_schema_change(c) for c in changes)
            + b"\x00")


def _map(values: dict[str, str], out: list[bytes]) -> None:
    if values:
        out.append(_size(len(values)))
        for key, value in values.items():
            out.append(_string(key))
            out.append(_string(value))
    out.append(b"\x00")


def encode_body(event: ThlEvent, header: bytes = b"") -> bytes:
    """The Avro binary body of ``event``, after ``header`` (the single-object header: one
    join, so a fragment of many MiB is not copied once more to put it in front)."""
    out = [header, _long(event.seqno), _long(event.fragno), b"\x01" if event.last_frag else b"\x00",
           _long(event.epoch), _string(event.source_id), _string(event.event_id),
           _string(event.shard_id), _long(event.tstamp)]
    _map(event.metadata, out)
    if event.data:
        out.append(_size(len(event.data)))
        for item in event.data:
            if isinstance(item, RowChange):
                out.append(b"\x02")
                out.append(_SMALL[_ACTION_INDEX[item.action]])
                out.append(_string(item.schema))
                out.append(_string(item.table))
                out.append(_specs(item.column_specs))
                out.append(_specs(item.key_specs))
                _rows(item.column_values, out)
                _rows(item.key_values, out)
            elif isinstance(item, Statement):
                out.append(b"\x00")
                out.append(_string(item.sql))
                out.append(b"\x00" if item.default_schema is None
                           else b"\x02" + _string(item.default_schema))
                _map(item.options, out)
                out.append(_long(item.error_code))
                out.append(b"\x00" if item.timestamp is None
                           else b"\x02" + _long(item.timestamp))
                out.append(_schema_changes(item.schema_changes))
            else:
                raise TypeError(f"not a THL data item: {type(item).__name__}")
    out.append(b"\x00")
    return b"".join(out)
