"""Row changes as the records of their tables' change topics.

Every row change becomes one record on its table's topic (a key change two: a delete of the
old key and a create of the new one), followed by a tombstone after each delete; a keyless
table provisioned again gets a truncate record in every partition first. Every record
carries its seqno, epoch and place in its transaction as headers (``SEQNO_HEADER`` ...), so
readers drop what a replay sends again (``readback.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaException

from consumers.changes.config import ChangesTarget
from consumers.changes.envelopes import Envelope, Op, Origin, Shape, ShapeError, origin_parts
from consumers.changes.errors import kafka_error
from consumers.changes.layouts import LayoutLog
from consumers.changes.naming import TopicNames
from consumers.changes.serde import Serde, Writer
from consumers.changes.topics import TopicAdmin
from consumers.changes.transaction import BlockTransaction
from consumers.changes.types import Value
from consumers.errors import DataError, TransientError
from consumers.oversize import largest, mib, too_large
from consumers.provisioning import chunk_of
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.schema_change import ChangeKind, SchemaChange

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.changes.applier")

#: Headers of every record: the seqno, epoch and the row's place in its transaction.
SEQNO_HEADER = "tungsten.seqno"
EPOCH_HEADER = "tungsten.epoch"
ROW_HEADER = "tungsten.row"


@dataclass(frozen=True)
class _Table:
    """A table layout ready to write: its shape and the writers of its keys and values."""

    shape: Shape
    key: Writer | None
    value: Writer
    keyed: bool
    specs: tuple[ColumnSpec, ...]


#: The rows a topic's readers hold, read back (``readback.read_range``): topic, specs.
LiveRows = Callable[[str, list[ColumnSpec]], list[list[ThlValue]]]


def _layout(schema: str, table: str, specs: Sequence[ColumnSpec]) -> tuple[Any, ...]:
    return (schema, table, *((s.name, s.type, s.length, s.scale, s.unsigned, s.primary_key,
                              s.blob, s.charset is None, tuple(s.enum_values)) for s in specs))


class RecordWriter:
    """Produces the records of a block's row changes into its transaction, creating their
    topics on first use."""

    def __init__(self, cfg: ChangesTarget, target: str, envelope: Envelope, serde: Serde,
                 names: TopicNames, txn: BlockTransaction, layouts: LayoutLog) -> None:
        self.cfg = cfg
        self.target = target
        self.envelope = envelope
        self.serde = serde
        self.names = names
        self.txn = txn
        #: Creates the topics; set by the applier's ``connect``.
        self.topics: TopicAdmin | None = None
        #: The layouts written before this process.
        self.layouts = layouts
        #: Updates of keyless rows are a delete and a create (Tungsten's envelope).
        self._split = cfg.envelope == "tungsten"
        self._tables: dict[tuple[Any, ...], _Table] = {}
        # Per seqno: the transaction id, the row count so far, per table.
        self._txn_id = ""
        self._total = 0
        self._per_table: dict[tuple[str, str], int] = {}

    def rollback(self) -> None:
        """The open block was aborted: what it recorded about tables (their layouts in the
        layouts topic, a table left) went with it. Forget what this process learned since
        the last commit too, so the block applied again records it again: the tables are
        learned anew from the layouts topic as committed (a layout written twice is
        harmless, one never committed would leave a later session without the table's
        topic)."""
        self._tables.clear()
        self.layouts.forget()

    def _origin(self, event: ThlEvent) -> Origin:
        """Where the records of a fragment come from (a new transaction at fragment 0)."""
        if event.fragno == 0:
            self._txn_id = event.metadata.get("gtid") or event.event_id
            self._total = 0
            self._per_table = {}
        file, pos, thread = origin_parts(event.event_id)
        try:
            server_id = int(event.metadata.get("mysql_server_id", "0"))
        except ValueError:
            server_id = 0
        return Origin(seqno=event.seqno, epoch=event.epoch, event_id=event.event_id,
                      source_id=event.source_id, tstamp=event.tstamp, server_id=server_id,
                      gtid=event.metadata.get("gtid"), file=file, pos=pos, thread=thread,
                      txn_id=self._txn_id)

    def known(self, schema: str, table: str, seqno: int) -> _Table | None:
        """The table as its topic was last written (by this process, else as the layouts
        topic has it); None: this group never wrote it."""
        found = [t for layout, t in self._tables.items() if layout[:2] == (schema, table)]
        if found:
            return found[-1]
        specs = self.layouts.last(schema, table)
        return None if specs is None else self._table(schema, table, specs, seqno,
                                                      recorded=True)

    def truncate(self, event: ThlEvent, schema: str, table: str, live_rows: LiveRows) -> None:
        """A TRUNCATE at the source (or a table dropped under ``schema_changes: evolve``):
        a keyless table's topic gets a truncate record in every partition; a keyed one a
        delete (and tombstone) for every key its readers hold (``live_rows`` reads them
        back), so compaction drops them too."""
        origin, now_us = self._origin(event), time.time_ns() // 1000
        found = self.known(schema, table, event.seqno)
        if found is None:
            log.info("%s: %s.%s emptied at seqno %d: this group never wrote its topic",
                     self.target, schema, table, event.seqno)
            return
        rows = self._forget(found, origin, now_us, live_rows)
        log.info("%s: %s emptied at seqno %d (%d row(s) its readers held)",
                 self.target, found.shape.topic, event.seqno, len(rows))

    def drop(self, event: ThlEvent, schema: str, table: str, live_rows: LiveRows) -> None:
        """A table dropped (``schema_changes: evolve``): its readers forget its rows, and its
        topic's name is free for another table."""
        self.truncate(event, schema, table, live_rows)
        self._leave(schema, table, event.seqno)

    def _leave(self, schema: str, table: str, seqno: int) -> None:
        """The table has no layout any more: a table of that name starts afresh."""
        for layout in [k for k in self._tables if k[:2] == (schema, table)]:
            del self._tables[layout]
        self.layouts.remove(self.txn, schema, table, seqno)
        self.names.release(schema, table)

    def _forget(self, table: _Table, origin: Origin, now_us: int, live_rows: LiveRows
                ) -> list[list[ThlValue]]:
        """Readers of the table's topic forget every row they hold; those rows."""
        rows = live_rows(table.shape.topic, list(table.specs))
        if not table.keyed:
            self._truncate(table, origin, now_us)
        elif rows:
            self._rows(RowChange(RowAction.DELETE, table.shape.schema, table.shape.table, [],
                                 list(table.specs), [], rows), origin, now_us)
        return rows

    def move(self, event: ThlEvent, change: SchemaChange, live_rows: LiveRows) -> None:
        """A renamed table or column, or a dropped column (``evolve``): the rows the old
        topic's readers hold are re-published (as reads, Debezium's op ``r``) under the new
        table name or column name, or without the column, and forgotten in the old topic
        when the table's name changed. Records of later row changes go to the new table's
        topic with the new layout."""
        origin, now_us = self._origin(event), time.time_ns() // 1000
        found = self.known(change.schema, change.table, event.seqno)
        if found is None:
            log.info("%s: %s at seqno %d: this group never wrote the table's topic",
                     self.target, change.describe(), event.seqno)
            return
        specs = list(found.specs)
        schema, table = change.schema, change.table
        if change.kind is ChangeKind.RENAME_TABLE:
            schema, table = change.new_schema or schema, change.new_name or table
            rows = self._forget(found, origin, now_us, live_rows)
            self._leave(change.schema, change.table, event.seqno)
        elif change.kind is ChangeKind.DROP_COLUMN:
            if any(s.primary_key and s.name == change.column for s in specs):
                log.warning("%s: %s at seqno %d: a key column; the records keep it until "
                            "their rows change", self.target, change.describe(), event.seqno)
                return
            keep = [i for i, s in enumerate(specs) if s.name != change.column]
            rows = [[row[i] for i in keep] for row in live_rows(found.shape.topic, specs)]
            specs = [specs[i] for i in keep]
            if not found.keyed:
                self._truncate(found, origin, now_us)
        else:
            rows = live_rows(found.shape.topic, specs)
            specs = [replace(s, name=change.new_name or s.name) if s.name == change.column
                     else s for s in specs]
            if not found.keyed:
                self._truncate(found, origin, now_us)  # its rows come back renamed
        moved = self._table(schema, table, specs, event.seqno)
        if rows:
            self._rows(RowChange(RowAction.INSERT, schema, table, specs, [], rows, []),
                       origin, now_us, "r")
        log.info("%s: %s at seqno %d: %d row(s) re-published to %s", self.target,
                 change.describe(), event.seqno, len(rows), moved.shape.topic)

    def add(self, event: ThlEvent, live_rows: LiveRows) -> None:
        """The records of one event's row changes, produced into the open transaction
        (``live_rows``: where a table's primary key changed, ``_follow_key``)."""
        origin = self._origin(event)
        now_us = time.time_ns() // 1000
        # A provisioned chunk's rows are reads of existing rows: Debezium's snapshot op.
        chunk = chunk_of(event)
        create: Op = "r" if chunk is not None else "c"
        # A keyless table provisioned again: its topic cannot replace rows by key, so its
        # first chunk starts with a truncate record that tells readers to forget the rest.
        truncate = (chunk.schema, chunk.table) if chunk is not None and chunk.first else None
        for item in event.data:
            if isinstance(item, RowChange):
                if truncate == (item.schema, item.table):
                    table = self._table(item.schema, item.table,
                                        item.column_specs or item.key_specs, event.seqno)
                    if not table.keyed:
                        self._truncate(table, origin, now_us)
                    truncate = None
                self._rows(item, origin, now_us, create, live_rows)
        if truncate is not None:
            # An empty table: the layout its topic was last written with, if any.
            known = self.known(*truncate, event.seqno)
            if known is not None and not known.keyed:
                self._truncate(known, origin, now_us)

    def _follow_key(self, change: RowChange, origin: Origin, now_us: int,
                    live_rows: LiveRows) -> None:
        """A primary key changed on the source (``ALTER TABLE ... DROP PRIMARY KEY, ADD
        PRIMARY KEY``) shows first in a row change's key flags. The topic's readers hold
        rows by the old key, which records by the new key would never replace: they forget
        them (a delete, and tombstone, per old key) and get them again by the new key
        (reads, op ``r``), before the change's own records. Asked by ``_table`` for a
        layout this process has not written yet."""
        specs = change.column_specs or change.key_specs
        new_key = {s.name for s in specs if s.primary_key}
        schema, name, seqno = change.schema, change.table, origin.seqno
        old = self.known(schema, name, seqno)
        if old is None:
            return
        old_key = [s.name for s in old.specs if s.primary_key]
        if set(old_key) == new_key:
            return
        if not old.keyed or not new_key:
            # A compacted topic keyed by the rows' keys cannot take keyless records (the
            # broker refuses them), and a keyless topic's records have no key to replace.
            raise DataError(
                f"{self.target}: the table {schema}.{name} "
                + (f"lost its primary key ({', '.join(old_key)})" if old.keyed
                   else f"gained a primary key ({', '.join(sorted(new_key))})")
                + f" on the source at seqno {seqno}; the records of {old.shape.topic} are "
                "not made for that, and this group does not follow such a change yet (see "
                "docs/schema-changes.md, primary key gained or lost)", seqno=seqno)
        lacking = sorted(new_key - {s.name for s in old.specs})
        if lacking:
            raise DataError(
                f"{self.target}: the primary key of {schema}.{name} changed from "
                f"({', '.join(old_key)}) to columns the rows of {old.shape.topic} lack "
                f"({', '.join(lacking)}) at seqno {seqno}: their values were set on the "
                "source without row events. Delete the topic, request the table again "
                f"(`trepctl provision -table {schema}.{name}`), then `trepctl online` this "
                "group", seqno=seqno)
        rekeyed = [replace(s, primary_key=s.name in new_key) for s in old.specs]
        moved = self._table(schema, name, rekeyed, seqno)
        rows = self._forget(old, origin, now_us, live_rows)
        if rows:
            self._rows(RowChange(RowAction.INSERT, schema, name, rekeyed, [], rows, []),
                       origin, now_us, "r")
        log.info("%s: the primary key of %s.%s changed from (%s) to (%s) at seqno %d: %d "
                 "row(s) re-published by the new key to %s", self.target, schema, name,
                 ", ".join(old_key), ", ".join(s.name for s in rekeyed if s.primary_key),
                 seqno, len(rows), moved.shape.topic)

    def _truncate(self, table: _Table, origin: Origin, now_us: int) -> None:
        """A truncate record (Debezium op ``t``, Tungsten ``_optype: TRUNCATE``) in every
        partition of a keyless table's topic."""
        shape = table.shape
        try:
            meta = self.txn.producer.list_topics(shape.topic, timeout=30)
        except KafkaException as exc:
            raise kafka_error(exc.args[0], self.target, f"describing {shape.topic}",
                              origin.seqno) from exc
        partitions = sorted(meta.topics[shape.topic].partitions)
        datum = self.envelope.value(shape, "t", None, None, origin, 0, self._total, 0, now_us)
        value = table.value(datum)
        headers = self._headers(origin)
        for partition in partitions:
            self.txn.produce(shape.topic, None, value, headers, origin.seqno, partition)
        self._total += 1
        log.info("%s: %s emptied (provisioned again, or truncated): truncate record in %d "
                 "partition(s) at seqno %d", self.target, shape.topic, len(partitions),
                 origin.seqno)

    def _table(self, schema: str, name: str, specs: Sequence[ColumnSpec], seqno: int,
               recorded: bool = False, first: Callable[[], None] | None = None) -> _Table:
        """The table's writers for this layout (``recorded``: the layouts topic has it
        already, else it is written there in the open transaction; ``first``: called before
        a layout this process has not met is made)."""
        layout = _layout(schema, name, specs)
        found = self._tables.get(layout)
        if found is not None:
            # A cheap set lookup, except after a reconnect: a topic may have been deleted.
            self._ensure(found.shape.topic, found.keyed, seqno)
            return found
        if first is not None:
            first()
            found = self._tables.get(layout)  # made by it (a key followed): as above
            if found is not None:
                return found
        topic = self.names.topic(schema, name, seqno)
        try:
            shape = Shape.of(topic, schema, name, specs, self.serde.avro)
        except ShapeError as exc:
            raise DataError(f"{self.target}: {exc} (seqno {seqno}); rename a column on the "
                            "source or use format: json", seqno=seqno) from exc
        key, value = self.serde.writers(shape, seqno)
        self._ensure(topic, bool(shape.key), seqno)
        found = _Table(shape, key, value, bool(shape.key), tuple(specs))
        self._tables[layout] = found
        if not recorded:
            self.layouts.write(self.txn, schema, name, found.specs, seqno)
        return found

    def _ensure(self, topic: str, keyed: bool, seqno: int) -> None:
        if self.topics is None:
            raise TransientError(f"{self.target}: not connected")
        self.topics.ensure(topic, keyed=keyed, seqno=seqno)

    def _rows(self, change: RowChange, origin: Origin, now_us: int, create: Op = "c",
              live_rows: LiveRows | None = None) -> None:
        """The records of a row change (``live_rows``: a source row change, whose new layout
        may show a changed primary key, ``_follow_key``)."""
        specs = change.column_specs or change.key_specs
        first = None if live_rows is None else \
            (lambda: self._follow_key(change, origin, now_us, live_rows))
        table = self._table(change.schema, change.table, specs, origin.seqno, first=first)
        shape = table.shape
        converts = [t.convert for t in shape.types]
        before_index = _remap(specs, change.key_specs) if change.key_values else None
        name = (change.schema, change.table)
        order = self._per_table.get(name, 0)
        for r in range(change.row_count):
            after = _values(converts, change.column_values[r]) if change.column_values \
                else None
            before = _values(converts, change.key_values[r], before_index) \
                if change.key_values else None
            if change.action is RowAction.INSERT:
                steps: list[tuple[Op, list[Value] | None, list[Value] | None]] = \
                    [(create, None, after)]
            elif change.action is RowAction.DELETE:
                steps = [("d", before, None)]
            elif before is not None and after is not None and (any(
                    before[i] != after[i] for i in shape.key) if shape.key else self._split):
                # The key changed; or a keyless row in Tungsten's envelope, which carries no
                # before image: a delete of the old row tells readers which one went.
                steps = [("d", before, None), ("c", None, after)]
            else:
                steps = [("u", before, after)]
            for op, old, new in steps:
                key_data = shape.key_of(new if new is not None else old or [])
                key = table.key(key_data) if table.key is not None else None
                datum = self.envelope.value(
                    shape, op, shape.row(old) if old is not None else None,
                    shape.row(new) if new is not None else None, origin, r, self._total,
                    order, now_us)
                try:
                    value = table.value(datum)
                except (ValueError, TypeError, OverflowError) as exc:
                    raise DataError(f"{self.target}: a row of {shape.schema}.{shape.table} "
                                    f"(seqno {origin.seqno}) does not fit its schema: {exc}",
                                    seqno=origin.seqno) from exc
                if len(value) + len(key or b"") > self._record_limit:
                    raise self._too_large(shape, origin.seqno, len(value), specs, new or old)
                headers = self._headers(origin)
                self.txn.produce(shape.topic, key, value, headers, origin.seqno)
                if op == "d" and self.cfg.tombstones and key is not None:
                    self.txn.produce(shape.topic, key, None, headers, origin.seqno)
                self._total += 1
                order += 1
        self._per_table[name] = order

    @property
    def _record_limit(self) -> int:
        """A record's key and value at most: the limit less room for headers and batch."""
        return self.cfg.max_message_bytes - 16 * 1024

    def _too_large(self, shape: Shape, seqno: int, size: int, specs: Sequence[ColumnSpec],
                   row: Sequence[Value] | None) -> DataError:
        names = [s.name for s in specs]
        why = too_large("the change record", f"{shape.schema}.{shape.table}", seqno, size,
                        largest(zip(names, row or [], strict=False)),
                        f"this group's max_message_bytes ({mib(self.cfg.max_message_bytes)})",
                        "raise max_message_bytes (a topic keeps the max.message.bytes it was "
                        f"created with: raise {shape.topic}'s too), within the broker's "
                        "socket.request.max.bytes")
        return DataError(f"{self.target}: {why}", seqno=seqno)

    def _headers(self, origin: Origin) -> list[tuple[str, bytes]]:
        """A record's headers: its seqno, epoch and place in the transaction."""
        return [(SEQNO_HEADER, str(origin.seqno).encode()),
                (EPOCH_HEADER, str(origin.epoch).encode()),
                (ROW_HEADER, str(self._total).encode())]


def _remap(specs: Sequence[ColumnSpec], before: Sequence[ColumnSpec]) -> list[int] | None:
    """Where each column of ``specs`` is in a before image laid out as ``before`` (None: the
    same layout, the usual case with binlog_row_image=FULL)."""
    if [s.name for s in before] == [s.name for s in specs]:
        return None
    where = {s.name: i for i, s in enumerate(before)}
    return [where.get(s.name, -1) for s in specs]


def _values(converts: list[Any], raw: Sequence[ThlValue],
            index: list[int] | None = None) -> list[Value]:
    if index is None:
        return [c(v) for c, v in zip(converts, raw, strict=True)]
    return [c(raw[i]) if i >= 0 else None for c, i in zip(converts, index, strict=True)]
