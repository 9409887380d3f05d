"""What a data error says when a row is larger than a target can hold.

The THL carries rows of any size the source allows (``thl_topics.chunks``); a store may cap
one document or one request (MongoDB's 16 MiB document, Elasticsearch's request limits, a
Kafka topic's ``max.message.bytes``). Such a row stops only its own group, at its seqno, with
one message that names the table, the column that makes the row large, the sizes, the limit
and the setting behind it, and what the operator can do.
"""

from __future__ import annotations

from collections.abc import Iterable

MIB = 1 << 20


def mib(size: int) -> str:
    """A size in MiB, one decimal: ``64.0 MiB``."""
    return f"{size / MIB:.1f} MiB"


def value_size(value: object) -> int:
    """Bytes a value takes as text or bytes (0 for numbers and other small values)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return 0


def largest(fields: Iterable[tuple[str, object]]) -> tuple[str, int] | None:
    """The column with the largest value, and its size (None if no value has a size)."""
    best: tuple[str, int] | None = None
    for name, value in fields:
        size = value_size(value)
        if size and (best is None or size > best[1]):
            best = (name, size)
    return best


def too_large(what: str, table: str, seqno: int, size: int,
              column: tuple[str, int] | None, limit: str, helps: str) -> str:
    """The message: ``<what> of <table> at seqno N is X MiB (column c holds Y MiB), above
    <limit>: <helps>; or drop the column ...; or skip the seqno``."""
    held = f" (column {column[0]} holds {mib(column[1])})" if column else ""
    drop = ""
    if column:
        drop = (f"; or drop the column for this group with a filter (filters: chain: "
                f'[{{type: dropcolumn, tables: ["{table}"], columns: ["{column[0]}"]}}])')
    return (f"{what} of {table} at seqno {seqno} is {mib(size)}{held}, above {limit}: "
            f"{helps}{drop}; or skip the seqno (trepctl online --skip-seqno {seqno})")
