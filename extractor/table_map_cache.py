"""Parse each distinct Table_map event once, not before every statement.

With ``binlog_row_metadata=FULL`` a Table_map event carries the column names, charsets,
keys and ENUM/SET members of its table, and MariaDB writes one before every row event.
pymysqlreplication 1.0.17 parses it from scratch every time (38.5% of the extractor's time
in PERF.md's profile). A table map's body (everything after the common header, without the
checksum) fully determines what the parser builds, so the parsed ``Table`` is kept per body
and reused: a repeated body gives the very same ``Table`` object, which also lets the
assembler's column shapes (keyed by that object) be reused.

A changed table (ALTER TABLE) gets a new body (different columns or metadata) and is parsed
again; table ids recycled after a server restart are part of the body too. The cache is
bounded: past ``MAX_ENTRIES`` it starts over, which only costs a re-parse.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

#: Distinct table-map bodies kept (each holds one parsed table: a few KiB at most).
MAX_ENTRIES = 4096

_original_init = TableMapEvent.__init__
_cache: dict[bytes, tuple[int, str, str, int, Any]] = {}
_CHECKSUM_LEN = 4


class Stats:
    """How often a table map was served from the cache (for tests and profiling)."""

    hits = 0
    parsed = 0


def _body(from_packet: Any, use_checksum: bool) -> bytes | None:
    """The event body still unread in the packet (None: not a plain pymysql packet)."""
    packet = getattr(from_packet, "packet", None)
    data = getattr(packet, "_data", None)
    position = getattr(packet, "_position", None)
    if not isinstance(data, (bytes, bytearray)) or not isinstance(position, int):
        return None
    end = len(data) - (_CHECKSUM_LEN if use_checksum else 0)
    return bytes(data[position:end])


def _cached_init(self: Any, from_packet: Any, event_size: int, table_map: dict[int, Any],
                 ctl_connection: Any, **kwargs: Any) -> None:
    filtered = any(kwargs.get(k) is not None for k in
                   ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas"))
    key = None if filtered or kwargs.get("freeze_schema") else \
        _body(from_packet, bool(kwargs.get("use_checksum")))
    hit = _cache.get(key) if key is not None else None
    if hit is None:
        Stats.parsed += 1
        _original_init(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        # Without column names in the event (binlog_row_metadata below FULL) the parser
        # looks them up and patches the table later: such a table is never shared.
        if key is not None and self._processed and all(c.name for c in self.columns):
            if len(_cache) >= MAX_ENTRIES:
                _cache.clear()
            _cache[key] = (self.table_id, self.schema, self.table, self.column_count,
                           self.table_obj)
        return
    Stats.hits += 1
    # The common part (header fields, checksum check) as the parser does it, then the
    # parsed table as it was the first time this exact body was seen.
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    self.table_id, self.schema, self.table, self.column_count, self.table_obj = hit
    self.columns = self.table_obj.columns
    table_map[self.table_id] = self.table_obj


def known_table(body: bytes) -> tuple[int, Any] | None:
    """(table id, parsed table) of a table-map body seen before, while the cache is in use.

    The rows decoder's packet loop uses it to skip pymysqlreplication's event objects for
    a repeated table map altogether (see ``row_decoder``).
    """
    if TableMapEvent.__init__ is not _cached_init:
        return None
    hit = _cache.get(body)
    if hit is None:
        return None
    Stats.hits += 1
    return hit[0], hit[4]


def install() -> None:
    """Use the cache for every Table_map event from now on (idempotent)."""
    TableMapEvent.__init__ = _cached_init


def uninstall() -> None:
    """Parse every Table_map event again (the reference path of the equality test)."""
    TableMapEvent.__init__ = _original_init


def clear() -> None:
    """Forget every parsed table map (tests; a new stream does not need it)."""
    _cache.clear()
