"""CSV staging files in Tungsten's batch-apply layout (seeds/002).

Each line is one row operation::

    OPTYPE <sep> SEQNO <sep> ROW <sep> COMMIT TIME <sep> column 1 <sep> ... column n

- OPTYPE: ``I`` insert, ``D`` delete, ``UD`` / ``UI`` the delete and insert halves of an
  update (before image, then after image: a key change moves the row).
- SEQNO: the THL seqno; ROW: the row's ordinal inside its seqno (across fragments), so
  (SEQNO, ROW) orders every operation of the THL and names it uniquely.
- COMMIT TIME: the source commit time, UTC, ``YYYY-MM-DD HH:MM:SS.ffffff``.
- The columns in source order, as ``types.staged_text`` writes them: numbers in plain text,
  binary values in base64.

The separator is 0x01 (Hive's, Tungsten's default) or a comma. A field that holds the
separator, a quote, a line break, or nothing at all is quoted with ``"`` (quotes doubled), so
NULL (an empty unquoted field) differs from the empty string (``""``). ``quote_all`` quotes
every non-NULL field (Redshift-style). One file holds one table's rows of one block with one
column layout: a source ALTER inside a block starts a new file, and so does a table's first
provisioned chunk (``consumers.provisioning``): that file's segment is marked ``truncate``,
so its MERGE also deletes every row of the table it does not bring.

Collapsed (``collapse``: merge mode without ``keep_staging``): a keyed table's segment keeps
only the last operation per primary key, the one its MERGE would keep: a key's earlier lines
are dropped as a later one comes (an update's ``UD`` half by its ``UI``; a moved row's old
key keeps its ``UD``), so Spark neither reads them nor ranks them (``Segment.collapsed``).
Files left for an external loader, or kept as a change history, keep every operation.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from consumers.provisioning import chunk_of
from consumers.warehouse import storage
from consumers.warehouse._stage_lines import stage_rows
from consumers.warehouse.naming import path_safe
from consumers.warehouse.types import (
    BINARY_TYPES,
    ZeroDate,
    commit_time_text,
    staged_text,
)
from consumers.zero_dates import ZeroDateTally, date_column, note_zero_dates
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: A text that marks NULL to Spark's CSV reader: an empty unquoted field reads as this.
#: No THL value may equal it (refused at staging), so it never hides real data.
NULL_MARK = "\U0010fffd\U0010fffdNULL\U0010fffd"


class StagingError(ValueError):
    """A value that cannot be staged; the message names the column."""


Layout = tuple[tuple[str, str, int, int, bool, bool], ...]
#: Spec lists whose shapes are kept (the THL's compiled reader hands out one list per
#: table shape; fastavro's path for older THL versions makes new ones per event).
_SHAPES = 256


def layout_of(specs: list[ColumnSpec]) -> Layout:
    """What makes two row changes of a table share a staging file."""
    return tuple((c.name, c.type.upper(), c.length, c.scale, c.unsigned, c.primary_key)
                 for c in specs)


@dataclass(frozen=True)
class _Shape:
    """What staging needs of one spec list, worked out once."""

    specs: list[ColumnSpec]
    layout: Layout
    #: Positions of the primary key's columns.
    key: tuple[int, ...]
    #: Positions of DATE, DATETIME and TIMESTAMP columns (zero dates go field by field).
    dates: tuple[int, ...]
    #: A binary column: every value goes field by field (base64).
    binary: bool

    @classmethod
    def of(cls, specs: list[ColumnSpec]) -> _Shape:
        return cls(specs, layout_of(specs),
                   tuple(i for i, c in enumerate(specs) if c.primary_key),
                   tuple(i for i, c in enumerate(specs) if date_column(c)),
                   any(c.type.upper() in BINARY_TYPES for c in specs))


@dataclass
class Segment:
    """Rows of one table in one column layout, in THL order: one staging file."""

    schema: str
    table: str
    columns: list[ColumnSpec]
    lines: list[str] = field(default_factory=list)
    low: int = -1
    high: int = -1
    #: Seqnos whose rows are in this segment (the first one raises data errors).
    seqnos: list[int] = field(default_factory=list)
    #: Where it was written (set by ``StagingArea.write``).
    uri: str = ""
    #: Every file the segment's rows are in (set with ``uri``): ``[uri]``, or more for a run of
    #: segments staged in several flushes of one block (``coalesced``).
    files: list[str] = field(default_factory=list)
    #: Lines staged (``lines`` is emptied once they are written out).
    count: int = 0
    #: A field holds a line break: Spark must read the file whole (multiLine), not split.
    multiline: bool = False
    #: Starts with the table's first provisioned chunk: the table's rows that this segment
    #: does not bring go (re-provisioning repairs a drifted table).
    truncate: bool = False
    #: Each key's line (index into ``lines``) while the segment is collapsed; None: it
    #: holds every operation (not collapsed, or a key that could not be hashed).
    last: dict[tuple[Any, ...], int] | None = None
    #: The lowest and highest key of a collapsed segment whose key is one integer column
    #: (its MERGE touches only the Delta files whose statistics overlap it).
    key_range: tuple[int, int] | None = None
    #: False once a key value is not an integer: no range.
    ranged: bool = True
    #: ``layout_of(columns)``, worked out once.
    layout: Layout = ()

    def __post_init__(self) -> None:
        if not self.layout:
            self.layout = layout_of(self.columns)

    @property
    def keys_between(self) -> tuple[int, int] | None:
        """The segment's integer key range, where it has one."""
        return self.key_range if self.ranged and self.last is not None else None

    @property
    def collapsed(self) -> bool:
        """At most one line per key: the last operation per key is already chosen."""
        return self.last is not None

    @property
    def key(self) -> list[str]:
        """Primary key column names, in source order (empty: no key)."""
        return [c.name for c in self.columns if c.primary_key]

    @property
    def rows(self) -> int:
        return self.count

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"


class BatchStager:
    """Turns a block's THL events into staging segments (one per table and layout)."""

    def __init__(self, separator: str = "\x01", quote_all: bool = False,
                 zero_dates: str = "null", collapse: bool = False,
                 zeros: ZeroDateTally | None = None) -> None:
        self.separator = separator
        self.quote_all = quote_all
        self.zero_dates = zero_dates
        #: Keep only the last operation per key of a keyed segment.
        self.collapse = collapse
        #: Where the zero dates of after images (stored as NULL) are noted.
        self.zeros = zeros
        self.segments: list[Segment] = []
        self._open: dict[tuple[str, str], Segment] = {}
        self._row = 0
        self._seqno = -1
        self.rows = 0
        #: Shapes by the identity of their spec list (the entry holds the list, so its id
        #: is not reused while the entry lives).
        self._shapes: dict[int, _Shape] = {}

    def _shape(self, specs: list[ColumnSpec]) -> _Shape:
        shape = self._shapes.get(id(specs))
        if shape is None or shape.specs is not specs:
            if len(self._shapes) >= _SHAPES:
                self._shapes.clear()
            shape = self._shapes[id(specs)] = _Shape.of(specs)
        return shape

    def clear(self) -> None:
        """Forget every segment (after they were written, or on rollback)."""
        self.segments = []
        self._open = {}
        self.rows = 0

    def add(self, event: ThlEvent) -> None:
        """Stage every row change of one fragment (statements are not staged).

        Consecutive row changes of one table with the same action and column specs (an OLTP
        transaction's single-row statements, one row change each) are staged as one: the
        same lines in the same order, one pass of the line writer instead of one per row."""
        if event.seqno != self._seqno or event.fragno == 0:
            self._seqno, self._row = event.seqno, 0
        commit = commit_time_text(event.tstamp)
        chunk = chunk_of(event)
        first = (chunk.schema, chunk.table) if chunk is not None and chunk.first and \
            event.fragno == 0 else None
        run: list[RowChange] = []
        run_fresh = False
        for item in event.data:
            if not isinstance(item, RowChange):
                continue
            fresh = first == (item.schema, item.table)
            # Only the chunk's first row change opens the truncating segment.
            first = None if fresh else first
            if run and not fresh and _continues(run[-1], item):
                run.append(item)
                continue
            if run:
                self._change(_joined(run), event.seqno, commit, run_fresh)
            run, run_fresh = [item], fresh
        if run:
            self._change(_joined(run), event.seqno, commit, run_fresh)

    def _segment(self, change: RowChange, seqno: int, fresh: bool = False) -> Segment:
        specs = change.column_specs or change.key_specs
        name = (change.schema, change.table)
        seg = self._open.get(name)
        layout = self._shape(specs).layout
        if fresh or seg is None or seg.layout != layout:
            seg = Segment(change.schema, change.table, list(specs), low=seqno, truncate=fresh,
                          layout=layout)
            if self.collapse and seg.key:
                seg.last = {}
            self._open[name] = seg
            self.segments.append(seg)
        if not seg.seqnos or seg.seqnos[-1] != seqno:
            seg.seqnos.append(seqno)
        seg.high = seqno
        return seg

    def _change(self, change: RowChange, seqno: int, commit: str, fresh: bool = False) -> None:
        seg = self._segment(change, seqno, fresh)
        action = change.action
        if action is RowAction.UPDATE and change.key_specs and change.column_specs and \
                change.key_specs is not change.column_specs and \
                self._shape(change.key_specs).layout != self._shape(change.column_specs).layout:
            raise StagingError(f"{seg.qualified}: an UPDATE whose before and after images "
                               "have different columns (binlog_row_image must be FULL)")
        sep, q = self.separator, '"' if self.quote_all else ""
        prefix = f"{q}{sep}{q}{seqno}{q}{sep}{q}"
        tail = f"{q}{sep}{q}{commit}{q}{sep}"
        if action is RowAction.INSERT:
            images = [("I", change.column_values, self._shape(change.column_specs))]
        elif action is RowAction.DELETE:
            images = [("D", change.key_values, self._shape(change.key_specs))]
        else:
            images = [("UD", change.key_values, self._shape(change.key_specs)),
                      ("UI", change.column_values, self._shape(change.column_specs))]

        def fields(number: int, values: list[Any]) -> str:
            """The field-by-field text of a row the compiled shortcut leaves."""
            op, _, shape = images[number]
            if self.zeros is not None and op in ("I", "UI"):
                # An after image's zero date is stored as NULL.
                note_zero_dates(self.zeros, seg.qualified, shape.specs, shape.dates, values)
            return sep.join([self._field(spec, value, seg, seqno)
                             for spec, value in zip(shape.specs, values, strict=True)])

        compiled = [(q + op + prefix, rows, len(shape.specs), shape.dates, shape.key,
                     shape.binary, n) for n, (op, rows, shape) in enumerate(images)]
        self._row, added, emptied, seg.last, seg.key_range, seg.ranged = stage_rows(
            seg.lines, compiled, change.row_count, self._row, tail, sep, not self.quote_all,
            seg.last, seg.key_range, seg.ranged, fields)
        seg.count += added - emptied
        self.rows += added

    def _field(self, spec: ColumnSpec, value: Any, seg: Segment, seqno: int) -> str:
        try:
            text = staged_text(spec, value, self.zero_dates)
        except ZeroDate as exc:
            raise StagingError(f"{seg.qualified} column {spec.name} (seqno {seqno}): {exc}; "
                               "Spark has no zero date (zero_dates: null stores NULL)") from exc
        if text is None:
            return ""
        if text == NULL_MARK:
            raise StagingError(f"{seg.qualified} column {spec.name} (seqno {seqno}): the "
                               "value equals the staging NULL marker")
        if "\n" in text or "\r" in text:
            seg.multiline = True
            return '"' + text.replace('"', '""') + '"'
        if self.quote_all or not text or '"' in text or self.separator in text:
            return '"' + text.replace('"', '""') + '"'
        return text


def _continues(run: RowChange, item: RowChange) -> bool:
    """Whether ``item``'s rows can be staged as more rows of ``run``: the same table, action
    and column specs (the decoder hands one table's repeated specs as the same list)."""
    return item.action is run.action and item.table == run.table \
        and item.schema == run.schema \
        and (item.column_specs is run.column_specs
             or not (item.column_specs or run.column_specs)) \
        and (item.key_specs is run.key_specs or not (item.key_specs or run.key_specs))


def _joined(run: list[RowChange]) -> RowChange:
    """One row change holding the rows of ``run`` in order (a new one: the event's own row
    changes stay as they are)."""
    if len(run) == 1:
        return run[0]
    head = run[0]
    joined = RowChange(head.action, head.schema, head.table, head.column_specs,
                       head.key_specs, [], [])
    for change in run:
        joined.column_values += change.column_values
        joined.key_values += change.key_values
    return joined


def coalesced(segments: list[Segment]) -> list[Segment]:
    """The written segments of a block with each table's run of one layout joined into one
    segment of several files, so that a table gets one MERGE a block whatever the number of
    flushes (``staging_flush_rows``) its rows were written in: a MERGE scans and rewrites
    the table's files, which costs far more than reading a second staging file.

    A run ends where the table's layout changes (a source ALTER) or a provisioning chunk
    starts over (``truncate``). The joined segment stays collapsed while the files' keys are
    disjoint; where a key is in two files, Spark ranks its operations (not collapsed)."""
    joined: list[Segment] = []
    runs: dict[tuple[str, str], int] = {}
    for seg in segments:
        name = (seg.schema, seg.table)
        at = runs.get(name)
        if at is None or seg.truncate or joined[at].layout != seg.layout:
            runs[name] = len(joined)
            joined.append(seg)
        else:
            joined[at] = _join(joined[at], seg)
    return joined


def _join(run: Segment, seg: Segment) -> Segment:
    """One segment reading both files (``run``'s rows come first in THL order)."""
    last = None
    if run.last is not None and seg.last is not None and run.last.keys().isdisjoint(seg.last):
        last = {**run.last, **seg.last}
    key_range = None
    if run.key_range is not None and seg.key_range is not None:
        key_range = (min(run.key_range[0], seg.key_range[0]),
                     max(run.key_range[1], seg.key_range[1]))
    return Segment(run.schema, run.table, run.columns, low=run.low, high=seg.high,
                   seqnos=[*run.seqnos, *seg.seqnos], uri=run.uri,
                   files=[*run.files, *seg.files],
                   count=run.count + seg.count, multiline=run.multiline or seg.multiline,
                   truncate=run.truncate, last=last, key_range=key_range,
                   ranged=run.ranged and seg.ranged and key_range is not None,
                   layout=run.layout)


def read_options(separator: str, multiline: bool = True) -> dict[str, str]:
    """Spark CSV reader options that read staging files back exactly (``FAILFAST``: a
    malformed file fails the batch rather than dropping or nulling lines). A file without
    line breaks inside fields is read in parallel splits."""
    return {"sep": separator, "quote": '"', "escape": '"',
            "multiLine": "true" if multiline else "false",
            "mode": "FAILFAST", "header": "false", "nullValue": NULL_MARK, "emptyValue": "",
            "ignoreLeadingWhiteSpace": "false", "ignoreTrailingWhiteSpace": "false",
            "encoding": "UTF-8", "enforceSchema": "true"}


def staging_schema(segment: Segment) -> str:
    """The all-text schema a staging file is read with (columns by position)."""
    cols = ", ".join(f"c{i} STRING" for i in range(len(segment.columns)))
    return "_op STRING, _seqno STRING, _row STRING, _committime STRING" + (
        f", {cols}" if cols else "")


class StagingArea:
    """Where one consumer group's staging files go: ``<staging>/<service>/<group>/``.

    ``file://`` is written directly by Python; any other scheme (``s3a://``, ``hdfs://``,
    ``abfss://``) through Spark's Hadoop FileSystem, with Spark's Hadoop configuration.
    """

    def __init__(self, base_uri: str, service: str, group: str) -> None:
        self.root = f"{base_uri.rstrip('/')}/{path_safe(service)}/{path_safe(group)}"
        self.local = urlparse(self.root).scheme == "file"

    def uri_of(self, segment: Segment, index: int) -> str:
        return (f"{self.root}/{path_safe(segment.schema)}/{path_safe(segment.table)}/"
                f"{segment.low:020d}-{segment.high:020d}-{index:04d}.csv")

    def write(self, segment: Segment, index: int, spark: SparkSession | None) -> str:
        """Write one segment (replacing a file of the same name); its URI. OSError if the
        location cannot be written."""
        target = self.uri_of(segment, index)
        # Superseded lines are empty (a line of a row change never is).
        lines = [line for line in segment.lines if line] if segment.count < len(segment.lines) \
            else segment.lines
        data = ("\n".join(lines) + "\n").encode("utf-8")
        if self.local:
            path = Path(urlparse(target).path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
            with tmp.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        else:
            if spark is None:
                raise OSError(f"{target}: a remote staging location needs Spark")
            fs, hpath = storage.hadoop(spark, target)
            out = fs.create(hpath, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
        segment.uri = target
        segment.files = [target]
        return target

    def remove(self, uris: list[str], spark: SparkSession | None) -> None:
        """Delete staging files (missing ones are fine)."""
        for target in uris:
            if self.local:
                Path(urlparse(target).path).unlink(missing_ok=True)
            elif spark is not None:
                fs, hpath = storage.hadoop(spark, target)
                fs.delete(hpath, False)

    def clear(self, spark: SparkSession | None) -> None:
        """Delete everything this group staged (merge mode: a restart stages again)."""
        if self.local:
            root = Path(urlparse(self.root).path)
            for path in sorted(_files(root), reverse=True):
                path.unlink(missing_ok=True)
        elif spark is not None:
            fs, hpath = storage.hadoop(spark, self.root)
            fs.delete(hpath, True)


def _files(root: Path) -> Iterator[Path]:
    if root.is_dir():
        yield from (p for p in root.rglob("*") if p.is_file())
