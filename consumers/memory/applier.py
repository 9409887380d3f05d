"""The in-memory applier: a transactional target in a dict, with faults on demand.

It keeps every table as rows by primary key (keyless tables as lists), the position, the
heartbeats, and how many times each seqno was committed, so runtime tests can assert
exactly-once apply. Faults: a transient failure rate at commit, refused seqnos, a position
moved behind the applier's back (``MemoryStore.position`` set by a test).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumers.applier import Atomicity, BlockLimits, Capabilities, StatementPolicy
from consumers.errors import DataError, PositionConflict, TransientError
from consumers.heartbeat import Heartbeat
from consumers.memory.config import MemoryTarget
from consumers.position import Position
from consumers.registry import ApplierContext
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.schema_change import SchemaChange

Key = tuple[ThlValue, ...]


@dataclass
class MemoryStore:
    """What the target holds; shared by the appliers of one test, as a database would be."""

    tables: dict[tuple[str, str], dict[Key, dict[str, ThlValue]]] = field(default_factory=dict)
    keyless: dict[tuple[str, str], list[dict[str, ThlValue]]] = field(default_factory=dict)
    position: Position | None = None
    heartbeats: dict[int, Heartbeat] = field(default_factory=dict)
    #: seqno -> how many committed blocks applied it (exactly once: always 1).
    applied: dict[int, int] = field(default_factory=dict)
    #: Every committed block, as the (seqno, fragno) pairs it applied.
    blocks: list[list[tuple[int, int]]] = field(default_factory=list)


class MemoryApplier:
    """A transactional target in memory: a block's changes land only at commit."""

    target = "memory"

    def __init__(self, cfg: MemoryTarget, ctx: ApplierContext | None = None,
                 store: MemoryStore | None = None) -> None:
        self.cfg = cfg
        self.store = store or MemoryStore()
        self.capabilities = Capabilities(
            atomicity=Atomicity.TRANSACTIONAL, statements=StatementPolicy.SKIP,
            keyless_tables=cfg.keyless_tables, block=BlockLimits(events=10, ms=50))
        self._random = random.Random(cfg.seed)  # noqa: S311 - faults, not secrets
        self._open: list[ThlEvent] | None = None
        self._beats: list[Heartbeat] = []
        #: What the open block's TRUNCATEs, renames and drops do (after its events, at
        #: commit).
        self._restructures: list[Callable[[], None]] = []
        self._expected: int | None = None
        self.connected = False

    def connect(self) -> None:
        self.connected = True

    def position(self) -> Position | None:
        pos = self.store.position
        self._expected = pos.seqno if pos else None
        return pos

    def begin(self) -> None:
        self._open, self._beats, self._restructures = [], [], []

    def apply(self, event: ThlEvent) -> None:
        if self._open is None:
            raise RuntimeError("no open block: begin() first")
        if event.seqno in self.cfg.refuse_seqnos:
            raise DataError(f"memory: seqno {event.seqno} refused on purpose",
                            seqno=event.seqno, event_id=event.event_id)
        self._open.append(event)

    def heartbeat(self, beat: Heartbeat) -> None:
        self._beats.append(beat)

    def truncate(self, schema: str, table: str, event: ThlEvent) -> None:
        self._restructures.append(lambda: self._drop((schema, table)))

    def rename_table(self, change: SchemaChange, event: ThlEvent) -> None:
        old, new = (change.schema, change.table), (change.new_schema or change.schema,
                                                   change.new_name or change.table)

        def rename() -> None:
            if old in self.store.tables and new not in self.store.tables:
                self.store.tables[new] = self.store.tables.pop(old)
            if old in self.store.keyless and new not in self.store.keyless:
                self.store.keyless[new] = self.store.keyless.pop(old)
        self._restructures.append(rename)

    def rename_column(self, change: SchemaChange, keep_old: bool, event: ThlEvent) -> None:
        old, new = change.column or "", change.new_name or ""

        def rename() -> None:
            for row in self._stored(change.schema, change.table):
                if old in row and new not in row:
                    row[new] = row[old] if keep_old else row.pop(old)
        self._restructures.append(rename)

    def drop_column(self, change: SchemaChange, event: ThlEvent) -> None:
        def drop() -> None:
            for row in self._stored(change.schema, change.table):
                row.pop(change.column or "", None)
        self._restructures.append(drop)

    def drop_table(self, change: SchemaChange, event: ThlEvent) -> None:
        self._restructures.append(lambda: self._drop((change.schema, change.table)))

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[tuple[ThlValue, ...]]
                      ) -> list[list[ThlValue]]:
        """Committed rows whose ``columns`` hold one of ``values`` (``consumers.cascades``)."""
        wanted = set(values)
        return [[row.get(s.name) for s in specs] for row in self._stored(schema, table)
                if tuple(row.get(c) for c in columns) in wanted]

    def _stored(self, schema: str, table: str) -> list[dict[str, ThlValue]]:
        """Every committed row of a table, keyed and keyless."""
        name = (schema, table)
        return [*self.store.tables.get(name, {}).values(), *self.store.keyless.get(name, [])]

    def _drop(self, name: tuple[str, str]) -> None:
        self.store.tables.pop(name, None)
        self.store.keyless.pop(name, None)

    def commit(self, position: Position) -> None:
        events, self._open = self._open, None
        if events is None:
            raise RuntimeError("no open block: begin() first")
        if self._random.random() < self.cfg.transient_failure_rate:
            raise TransientError("memory: commit failed on purpose (transient)")
        stored = self.store.position.seqno if self.store.position else None
        if stored != self._expected:
            raise PositionConflict(f"memory: position moved from {self._expected} to {stored}",
                                   seqno=position.seqno)
        for event in events:
            for item in event.data:
                if isinstance(item, RowChange):
                    try:
                        self._rows(item)
                    except (KeyError, ValueError) as exc:
                        raise DataError(f"memory: {item.action.value} of {item.schema}."
                                        f"{item.table} finds no row ({exc}): diverged",
                                        seqno=event.seqno) from exc
            if event.last_frag:
                self.store.applied[event.seqno] = self.store.applied.get(event.seqno, 0) + 1
        for restructure in self._restructures:
            restructure()
        for beat in self._beats:
            self.store.heartbeats[beat.id] = beat
        self.store.blocks.append([(e.seqno, e.fragno) for e in events])
        self.store.position = position
        self._expected = position.seqno

    def _rows(self, change: RowChange) -> None:
        name = (change.schema, change.table)
        specs = change.column_specs or change.key_specs
        keyed = [i for i, c in enumerate(specs) if c.primary_key]
        table = self.store.tables.setdefault(name, {})
        loose = self.store.keyless.setdefault(name, [])
        for r in range(change.row_count):
            after = dict(zip((c.name for c in change.column_specs),
                             change.column_values[r], strict=True)) \
                if change.column_values else None
            before = dict(zip((c.name for c in change.key_specs),
                              change.key_values[r], strict=True)) \
                if change.key_values else None
            if keyed:
                if before is not None:
                    del table[tuple(before[specs[i].name] for i in keyed)]
                if after is not None:
                    table[tuple(after[specs[i].name] for i in keyed)] = after
            else:
                if before is not None:
                    loose.remove(before)
                if after is not None:
                    loose.append(after)
            if change.action is RowAction.INSERT and before is not None:
                raise DataError("memory: an INSERT with a before image")

    def rows(self, schema: str, table: str) -> list[dict[str, Any]]:
        """Every row of a table (keyed tables in key order)."""
        name = (schema, table)
        keyed = [self.store.tables.get(name, {})[k] for k in sorted(
            self.store.tables.get(name, {}), key=repr)]
        return keyed + list(self.store.keyless.get(name, []))

    def rollback(self) -> None:
        self._open, self._beats = None, []

    def reset(self) -> None:
        self.store.position = None
        self._expected = None

    def close(self) -> None:
        self.rollback()
        self.connected = False
