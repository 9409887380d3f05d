"""Comparing the demo tables on the source and on every target: row count and checksum."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def canonical(value: object) -> object:
    """A value as the same text on every server (PostgreSQL's boolean is MariaDB's 0/1)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")
    return str(value)


@dataclass(frozen=True)
class Digest:
    """Row count and checksum of one table on one server."""

    rows: int
    sha256: str


def digest(rows: Sequence[Sequence[object]]) -> Digest:
    """Count and SHA-256 of rows normalised to JSON text, sorted (order is not data)."""
    lines = sorted(json.dumps([canonical(v) for v in row], ensure_ascii=False) for row in rows)
    return Digest(len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest())


def report(tables: Sequence[str], source: Mapping[str, Digest],
           targets: Mapping[str, Mapping[str, Digest]]) -> bool:
    """Print one line per table (source, then each target); True if every target matches."""
    header = ["table", "source rows"]
    for group in targets:
        header += [f"{group} rows", f"{group}"]
    lines: list[list[str]] = [header]
    equal = True
    for table in tables:
        src = source[table]
        row = [table, str(src.rows)]
        for found in targets.values():
            other = found.get(table)
            same = other == src
            equal &= same
            row += [str(other.rows) if other else "-", "match" if same else "DIFFERS"]
        lines.append(row)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    for table in tables:
        print(f"source sha256 {table}: {source[table].sha256}")
    return equal
