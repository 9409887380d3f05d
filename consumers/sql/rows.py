"""Row changes into the batches of their target tables, their values adapted.

Each row's values are adapted to the target columns' reflected types (``types.rows_adapter``,
made once per table and column layout) under the target's value policy (zero dates, U+0000
characters): what the policy changed is counted per table and column and, once the block
commits, counted in ``trep_values_changed_total`` and logged (at most once a minute per
column). A table being provisioned gets changes that cannot fail (``_idempotent``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import DataError
from consumers.metrics import ConsumerMetrics
from consumers.sql.batches import Batch, BatchWriter, CollapsePlan
from consumers.sql.context import TargetContext
from consumers.sql.statements import Binder, TargetTable, bind_rows, binder
from consumers.sql.tables import TargetTables
from consumers.sql.types import RowsAdapter, ValuePolicy, ValueRefused, rows_adapter
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.sql.applier")

#: A value policy's warning for one table column is logged at most this often.
_WARN_EVERY_S = 60.0
#: Row change layouts kept at most (a reader that builds new spec lists per event, as
#: fastavro's does for older THL versions, would otherwise grow them without end).
_LAYOUTS = 256
#: A layout whose collapse plan was not asked for yet.
_UNKNOWN = object()


@dataclass(slots=True)
class _Layout:
    """What the row changes of one table and spec layout need, worked out once."""

    columns: list[ColumnSpec]
    keys: list[ColumnSpec]
    #: Every column of the images (``_image_specs``).
    images: list[ColumnSpec]
    target: TargetTable
    after: RowsAdapter
    before: RowsAdapter
    bind: Binder
    #: The images have a primary key.
    keyed: bool
    #: ``TargetTables.generation`` when ``target`` was last found to be the bound table.
    generation: int
    action: RowAction
    schema: str
    table: str
    #: How the changes collapse (None: they do not; ``_UNKNOWN``: not asked yet).
    collapse: object = _UNKNOWN

    def holds(self, change: RowChange) -> bool:
        """``change`` is of this layout: the same spec lists, action and table."""
        return self.columns is change.column_specs and self.keys is change.key_specs \
            and self.action is change.action and self.table == change.table \
            and self.schema == change.schema


def _layout_key(change: RowChange) -> tuple[object, ...]:
    return (id(change.column_specs), id(change.key_specs), change.action, change.schema,
            change.table)


class RowWriter:
    """Adapts the rows of a block's row changes and hands them to its batches."""

    def __init__(self, ctx: TargetContext, policy: ValuePolicy | None,
                 metrics: ConsumerMetrics, tables: TargetTables, batches: BatchWriter) -> None:
        self.ctx = ctx
        self.policy = policy
        self.metrics = metrics
        self._tables = tables
        self._batches = batches
        self._adapters: dict[tuple[object, ...], RowsAdapter] = {}
        self._layouts: dict[tuple[object, ...], _Layout] = {}
        #: The layout of the last row change (most follow one of the same layout).
        self._last: _Layout | None = None
        #: Values the policy changed in the open block, by (kind, table, column).
        self._changed: Counter[tuple[str, str, str]] = Counter()
        self._warned: dict[tuple[str, str, str], float] = {}
        if self.policy is not None:
            # Zero-valued series from the start, so a dashboard sees them before any change.
            self.metrics.values_changed("zero_date", 0)
            if self.policy.checks_nul:
                self.metrics.values_changed("nul_character", 0)

    def forget(self) -> None:
        """The value adapters go with the tables they were made for."""
        self._adapters.clear()
        self._layouts.clear()
        self._last = None

    def new_block(self) -> None:
        """A block begins: nothing changed by the policy yet."""
        self._changed.clear()

    def drop_changes(self) -> None:
        """The block is rolled back: what the policy changed in it never happened."""
        self._changed.clear()
        if self._batches.refused:
            self.metrics.set_refused(self._batches.refused)
            self._batches.refused = 0
        if self.policy is not None:
            self.policy.collect()

    def empty(self, change: RowChange, event: ThlEvent) -> None:
        """A table's first provisioned chunk: the target's rows go, the source's come."""
        target = self._tables.get(change, _image_specs(change), event.seqno)
        self._batches.flush()
        try:
            self.ctx.db.execute(sa.delete(target.table))
        except sa_exc.DBAPIError as exc:
            raise self.ctx.classify(exc, f"emptying {target.qualified} for provisioning") from exc

    def add(self, change: RowChange, event: ThlEvent, idempotent: bool = False) -> None:
        """A row change's rows into the batches (``idempotent``: its table is being
        provisioned)."""
        layout = self._layout(change, event.seqno)
        target = layout.target
        try:
            after = layout.after(change.column_values)
            before = layout.before(change.key_values)
        except ValueRefused as exc:
            raise DataError(f"{self.ctx.target}: {target.qualified}, column {exc.column}, seqno "
                            f"{event.seqno}: {exc}", seqno=event.seqno) from exc
        except (ValueError, TypeError) as exc:
            raise DataError(f"{target.qualified}: a value of seqno {event.seqno} cannot be "
                            f"converted: {exc}", seqno=event.seqno) from exc
        if self.policy is not None and self.policy.changed:
            for (kind, column), count in self.policy.collect().items():
                self._changed[kind, target.qualified, column] += count
        if idempotent and layout.keyed:
            self._idempotent(target, change, after, before)
            return
        if not idempotent and self._batches.collapsing():
            if layout.collapse is _UNKNOWN:
                key = self._tables.collapsible(target, change.column_specs, change.key_specs)
                layout.collapse = None if key is None else self._batches.collapse_plan(
                    key, change.column_specs, change.key_specs)
            if isinstance(layout.collapse, CollapsePlan):
                taken = self._batches.collapse(target, layout.collapse, change.action,
                                               change.column_specs, after, before)
                if taken == max(len(after), len(before)):
                    return
                # From a key move on, in order.
                after, before = after[taken:], before[taken:]
        params = layout.bind(after, before)
        if idempotent:
            # No key: the row may not be there yet; the table's chunk will set it right.
            self._batches.flush()
            self._batches.execute(Batch(target, change.action, change.column_specs,
                                        change.key_specs, params), check=False)
            return
        self._batches.add(Batch(target, change.action, change.column_specs, change.key_specs,
                                params))

    def _layout(self, change: RowChange, seqno: int) -> _Layout:
        """What this row change's table and spec layout need (worked out once per layout:
        the THL reader hands out one list of specs per table shape, so the lists' identity
        names the layout; the entry holds them, so no other list can take their ids)."""
        found = self._last  # most row changes follow one of the same table and layout
        if found is None or not found.holds(change):
            found = self._layouts.get(_layout_key(change))
            if found is not None and not found.holds(change):
                found = None  # a guard: the entry holds its lists, so their ids stay theirs
        if found is not None:
            # Unless some table was bound anew since (a DDL, an evolved table), and this one
            # is no longer the same.
            if found.generation == self._tables.generation \
                    or self._tables.get(change, found.images, seqno) is found.target:
                found.generation = self._tables.generation
                self._last = found
                return found
        images = _image_specs(change)
        target = self._tables.get(change, images, seqno)
        missing = [c.name for c in images if c.name not in target.types]
        if missing:
            raise DataError(f"{target.qualified} on {self.ctx.target} has no column(s) "
                            f"{', '.join(missing)} (seqno {seqno})", seqno=seqno)
        if len(self._layouts) >= _LAYOUTS:
            self._layouts.clear()
        found = self._layouts[_layout_key(change)] = _Layout(
            change.column_specs, change.key_specs, images, target,
            self._adapter(target, change.column_specs), self._adapter(target, change.key_specs),
            binder(change.action, change.key_specs, len(change.column_specs)),
            any(c.primary_key for c in images),
            self._tables.generation, change.action, change.schema, change.table)
        self._last = found
        return found

    def _adapter(self, target: TargetTable, specs: Sequence[ColumnSpec]
                 ) -> RowsAdapter:
        """The value adapter of one table and column layout (made once per layout)."""
        key = (target.qualified, id(target), tuple((c.name, c.type, c.length) for c in specs))
        found = self._adapters.get(key)
        if found is None:
            found = self._adapters[key] = rows_adapter(
                specs, [target.types[c.name] for c in specs], self.ctx.dialect, self.policy)
        return found

    def _idempotent(self, target: TargetTable, change: RowChange, after: list[list[object]],
                    before: list[list[object]]) -> None:
        """Apply a row change of a table being provisioned so that it cannot fail: delete
        the rows its keys name (if there), then insert the after images. Works the same on
        every dialect, and for key changes inside one statement."""
        self._batches.flush()
        steps: list[tuple[RowAction, list[ColumnSpec], list[dict[str, object]]]] = []
        if before:
            steps.append((RowAction.DELETE, change.key_specs,
                          bind_rows(RowAction.DELETE, [], before, change.key_specs)))
        if after:
            steps.append((RowAction.DELETE, change.column_specs,
                          bind_rows(RowAction.DELETE, [], after, change.column_specs)))
            steps.append((RowAction.INSERT, change.column_specs,
                          bind_rows(RowAction.INSERT, after, [], change.column_specs)))
        for action, specs, params in steps:
            # Queued like any batch on MySQL-family targets (PyMySQL's executemany would
            # send a DELETE per row, a round trip each); unchecked: the rows may be absent.
            self._batches.execute(Batch(target, action, specs, specs, params), check=False)

    def take_changes(self) -> BlockChanges:
        """The block's counts, taken out (``count_changes`` once it is committed): the next
        block may begin before this one's commit is finished."""
        taken = BlockChanges(self._changed, self._batches.collapsed_rows)
        self._changed, self._batches.collapsed_rows = Counter(), 0
        return taken

    def count_changes(self, seqno: int, taken: BlockChanges) -> None:
        """The block up to ``seqno`` committed: count what the value policy changed in it
        (``take_changes``), warn (at most once a minute per column)."""
        changed = taken.changed
        if taken.collapsed_rows:
            self.metrics.collapsed(taken.collapsed_rows)
        now = time.monotonic()
        for (kind, table, column), count in sorted(changed.items()):
            self.metrics.values_changed(kind, count)
            key = (kind, table, column)
            if key not in self._warned or now - self._warned[key] >= _WARN_EVERY_S:
                self._warned[key] = now
                what = "zero date(s) stored as NULL" if kind == "zero_date" else \
                    "value(s) stored without their U+0000 characters"
                log.warning("%s: %s.%s: %d %s in the block up to seqno %d (policy of this "
                            "target; counted in trep_values_changed_total{kind=\"%s\"})",
                            self.ctx.target, table, column, count, what, seqno, kind)


@dataclass(frozen=True)
class BlockChanges:
    """What a block's rows counted until its commit: values the policy changed, by (kind,
    table, column), and row changes collapsed away."""

    changed: Counter[tuple[str, str, str]]
    collapsed_rows: int


def _image_specs(change: RowChange) -> list[ColumnSpec]:
    """Every column of a row change's images, after image first."""
    if not change.key_specs or change.key_specs is change.column_specs:
        return list(change.column_specs)
    seen = {c.name for c in change.column_specs}
    return [*change.column_specs, *(c for c in change.key_specs if c.name not in seen)]
