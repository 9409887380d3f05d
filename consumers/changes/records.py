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
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from consumers.changes.config import ChangesTarget
from consumers.changes.envelopes import Envelope, Op, Origin, Shape, ShapeError, origin_parts
from consumers.changes.errors import kafka_error
from consumers.changes.naming import TopicNames
from consumers.changes.serde import Serde, Writer
from consumers.changes.topics import TopicAdmin
from consumers.changes.transaction import BlockTransaction
from consumers.changes.types import Value
from consumers.errors import DataError, TransientError
from consumers.oversize import largest, mib, too_large
from consumers.provisioning import chunk_of
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

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


def _layout(schema: str, table: str, specs: Sequence[ColumnSpec]) -> tuple[Any, ...]:
    return (schema, table, *((s.name, s.type, s.length, s.scale, s.unsigned, s.primary_key,
                              s.blob, s.charset is None, tuple(s.enum_values)) for s in specs))


class RecordWriter:
    """Produces the records of a block's row changes into its transaction, creating their
    topics on first use."""

    def __init__(self, cfg: ChangesTarget, target: str, envelope: Envelope, serde: Serde,
                 names: TopicNames, txn: BlockTransaction) -> None:
        self.cfg = cfg
        self.target = target
        self.envelope = envelope
        self.serde = serde
        self.names = names
        self.txn = txn
        #: Creates the topics; set by the applier's ``connect``.
        self.topics: TopicAdmin | None = None
        #: Updates of keyless rows are a delete and a create (Tungsten's envelope).
        self._split = cfg.envelope == "tungsten"
        self._tables: dict[tuple[Any, ...], _Table] = {}
        # Per seqno: the transaction id, the row count so far, per table.
        self._txn_id = ""
        self._total = 0
        self._per_table: dict[tuple[str, str], int] = {}

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

    def truncate(self, event: ThlEvent, schema: str, table: str,
                 live_rows: Callable[[list[ColumnSpec]], list[list[ThlValue]]]) -> None:
        """A TRUNCATE at the source: a keyless table's topic gets a truncate record in every
        partition; a keyed one a delete (and tombstone) for every key its readers hold
        (``live_rows`` reads them back), so compaction drops them too."""
        origin, now_us = self._origin(event), time.time_ns() // 1000
        known = [t for layout, t in self._tables.items() if layout[:2] == (schema, table)]
        if not known:
            log.warning("%s: %s.%s was truncated at the source (seqno %d) and no layout of its "
                        "topic is known to this process: no record was sent, its readers "
                        "keep its rows", self.target, schema, table, event.seqno)
            return
        found = known[-1]
        self._ensure(found.shape.topic, found.keyed, event.seqno)
        if not found.keyed:
            self._truncate(found, origin, now_us)
            return
        rows = live_rows(list(found.specs))
        if rows:
            self._rows(RowChange(RowAction.DELETE, schema, table, [], list(found.specs), [],
                                 rows), origin, now_us)
        log.info("%s: %s truncated at seqno %d: a delete for each of its %d key(s)",
                 self.target, found.shape.topic, event.seqno, len(rows))

    def add(self, event: ThlEvent) -> None:
        """The records of one event's row changes, produced into the open transaction."""
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
                    table = self._table(item, item.column_specs or item.key_specs,
                                        event.seqno)
                    if not table.keyed:
                        self._truncate(table, origin, now_us)
                    truncate = None
                self._rows(item, origin, now_us, create)
        if truncate is not None:
            # An empty table: the last layout this process wrote it with, if any.
            known = [t for layout, t in self._tables.items() if layout[:2] == truncate]
            if known and not known[-1].keyed:
                self._truncate(known[-1], origin, now_us)
            elif not known:
                log.warning("%s: %s.%s is provisioned empty and no layout of its topic is "
                            "known to this process: no truncate record was sent (a keyless "
                            "topic's readers keep its earlier rows)", self.target, *truncate)

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

    def _table(self, change: RowChange, specs: Sequence[ColumnSpec], seqno: int) -> _Table:
        layout = _layout(change.schema, change.table, specs)
        found = self._tables.get(layout)
        if found is not None:
            # A cheap set lookup, except after a reconnect: a topic may have been deleted.
            self._ensure(found.shape.topic, found.keyed, seqno)
            return found
        topic = self.names.topic(change.schema, change.table, seqno)
        try:
            shape = Shape.of(topic, change.schema, change.table, specs, self.serde.avro)
        except ShapeError as exc:
            raise DataError(f"{self.target}: {exc} (seqno {seqno}); rename a column on the "
                            "source or use format: json", seqno=seqno) from exc
        key, value = self.serde.writers(shape, seqno)
        self._ensure(topic, bool(shape.key), seqno)
        found = _Table(shape, key, value, bool(shape.key), tuple(specs))
        self._tables[layout] = found
        return found

    def _ensure(self, topic: str, keyed: bool, seqno: int) -> None:
        if self.topics is None:
            raise TransientError(f"{self.target}: not connected")
        self.topics.ensure(topic, keyed=keyed, seqno=seqno)

    def _rows(self, change: RowChange, origin: Origin, now_us: int, create: Op = "c"
              ) -> None:
        specs = change.column_specs or change.key_specs
        table = self._table(change, specs, origin.seqno)
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
