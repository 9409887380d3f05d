"""Row changes into files people open without code: Parquet, CSV, JSON lines.

Written in chunks (``chunk`` rows), so an export of any size runs in bounded memory. The
columns are ``thl_topics.row_changes.COLUMNS``; images are JSON text (``Change.record``), so one
file holds every table's changes with one schema.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from thl_topics.row_changes import COLUMNS, Change


class ChangeFileWriter:
    """Writes changes to ``path`` in ``fmt`` (parquet, csv or jsonl)."""

    def __init__(self, path: Path, fmt: str, chunk: int = 50_000) -> None:
        if fmt not in ("parquet", "csv", "jsonl"):
            raise ValueError(f"unknown format {fmt!r}")
        self.path = path
        self.fmt = fmt
        self.chunk = chunk
        self.count = 0
        self._rows: list[dict[str, Any]] = []
        self._tmp = path.with_name(f".{path.name}.partial")
        self._parquet: Any = None
        self._text: IO[str] | None = None
        self._csv: Any = None
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            self._schema = pa.schema([
                ("seqno", pa.int64()), ("epoch", pa.int64()),
                ("commit_time", pa.timestamp("us", tz="UTC")), ("schema", pa.string()),
                ("table", pa.string()), ("op", pa.string()), ("row", pa.int64()),
                ("key", pa.string()), ("before", pa.string()), ("after", pa.string())])
            self._parquet = pq.ParquetWriter(str(self._tmp), self._schema)
        else:
            self._text = self._tmp.open("w", encoding="utf-8", newline="")
            if fmt == "csv":
                self._csv = csv.writer(self._text)
                self._csv.writerow(COLUMNS)

    def add(self, change: Change) -> None:
        """One more change."""
        self._rows.append(change.record())
        self.count += 1
        if len(self._rows) >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        if self._parquet is not None:
            import pyarrow as pa

            columns = {c: [r[c] for r in rows] for c in COLUMNS}
            self._parquet.write_table(pa.table(columns, schema=self._schema))
        elif self._csv is not None:
            for r in rows:
                self._csv.writerow(["" if r[c] is None else _text(r[c]) for c in COLUMNS])
        elif self._text is not None:
            for r in rows:
                self._text.write(json.dumps({c: _text(r[c]) for c in COLUMNS},
                                            ensure_ascii=False) + "\n")

    def close(self, ok: bool = True) -> None:
        """Finish the file (replacing ``path``), or drop it when ``ok`` is False."""
        if ok:
            self._flush()
        if self._parquet is not None:
            self._parquet.close()
        if self._text is not None:
            self._text.close()
        if ok:
            self._tmp.replace(self.path)
        else:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> ChangeFileWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(ok=kind is None)


def _text(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    return value
