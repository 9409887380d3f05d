"""Foreign-key cascades carried out by targets that do not keep the source's foreign keys.

InnoDB deletes (ON DELETE CASCADE) or re-points (SET NULL, ON UPDATE CASCADE) child rows
inside the engine, and the binlog holds only the parent's change. The extractor attaches
the cascading rules to the fragments that may set them off (``thl_topics.foreign_keys``);
here each such parent change is followed, in the fragment, by the child row changes InnoDB
made: the child rows are looked up on the target (``FindsRows``), with the open block's
own changes laid over them (they may not be readable yet), and become ordinary DELETE or
UPDATE row changes, which in turn may cascade further. Every kind then applies, counts and
publishes them as it does the source's own (a change topic gets a delete record for each
cascaded child row).

The block's changes are kept (as references) only for tables known to be child tables. A
cascade that reaches a child table this process did not know about when its block began,
and that the block already wrote to, cannot trust the target's read: it asks for the block
to be applied again (``Relearn``), and the second time round its changes are kept.

Values are matched exactly, as the THL carries them: a case-insensitive collation's other
spellings of a string key do not match.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

from consumers.errors import DataError, TransientError
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.foreign_keys import CascadeRules, ForeignKey, Referential, TableName
from thl_topics.records import META_FOREIGN_KEYS

log = logging.getLogger(__name__)

ForeignKeyMode = Literal["follow", "ignore"]

#: InnoDB refuses a cascade deeper than 15 (the source statement fails), so a deeper one
#: here is a loop of rules the catalog should not allow.
MAX_DEPTH = 15

Row = list[ThlValue]
Values = tuple[ThlValue, ...]


@runtime_checkable
class FindsRows(Protocol):
    """An applier that can look rows up by column values (the child rows of a cascade)."""

    def rows_matching(self, schema: str, table: str, specs: list[ColumnSpec],
                      columns: Sequence[str], values: Sequence[Values]) -> Iterable[Row]:
        """Rows of the target's table for the source table ``schema.table`` whose
        ``columns`` hold one of ``values`` (THL values), as THL rows in ``specs`` order.

        Rows written by the open block may or may not be among them (the caller lays the
        block's own changes over what it gets); extra rows are harmless (the caller keeps
        only exact matches); a table the target never had has none. Nothing is written."""


#: Column types whose THL value (an int) every store keeps as the same number, so a
#: lookup may be pushed into the store's query.
INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "YEAR"})
_INT64 = 1 << 63


def integer_lookup(specs: Sequence[ColumnSpec], columns: Sequence[str],
                   values: Sequence[Values]) -> bool:
    """The lookup's columns are integers and its values fit a signed 64-bit integer: a
    store can match them in its own query. Otherwise the store reads the whole table and
    the caller keeps the exact matches."""
    types = {s.name: s.type.upper() for s in specs}
    return all(types.get(c) in INTEGER_TYPES for c in columns) and all(
        isinstance(v, int) and -_INT64 <= v < _INT64 for row in values for v in row)


def chunks(values: Sequence[Values], size: int = 1000) -> Iterable[Sequence[Values]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


class Relearn(TransientError):
    """A cascade reached a child table the open block wrote before it was known to be
    one: apply the block again, keeping that table's changes this time."""


@dataclass
class Followed:
    """What the cascades of one fragment did (metrics)."""

    rows: int = 0
    depth: int = 0


@dataclass
class BlockChanges:
    """The open block's row changes of child tables (references), and which tables the
    block wrote at all."""

    children: set[TableName] = field(default_factory=set)
    items: dict[TableName, list[RowChange]] = field(default_factory=dict)
    written: set[TableName] = field(default_factory=set)
    #: Child tables learnt while the open block was under way (their earlier changes in
    #: the block were not kept).
    late: set[TableName] = field(default_factory=set)

    def begin(self) -> None:
        self.items.clear()
        self.written.clear()
        self.late.clear()

    def add(self, item: RowChange) -> None:
        table = (item.schema, item.table)
        self.written.add(table)
        if table in self.children:
            self.items.setdefault(table, []).append(item)

    def learn(self, rules: CascadeRules) -> None:
        for fk in rules.rules:
            if fk.child not in self.children:
                self.children.add(fk.child)
                if fk.child in self.written:
                    self.late.add(fk.child)

    def overlay(self, table: TableName, specs: list[ColumnSpec]
                ) -> tuple[dict[Values, Row | None], Counter[Values]]:
        """The block's last image per key of ``table`` (None: deleted), in ``specs`` order;
        for a table without a key, rows added (positive) and removed (negative)."""
        names = [s.name for s in specs]
        key = [i for i, s in enumerate(specs) if s.primary_key]
        images: dict[Values, Row | None] = {}
        counts: Counter[Values] = Counter()
        for item in self.items.get(table, ()):
            before = [_project(item.key_specs, r, names) for r in item.key_values]
            after = [_project(item.column_specs, r, names) for r in item.column_values]
            for row in before:
                if key:
                    images[tuple(row[i] for i in key)] = None
                else:
                    counts[tuple(row)] -= 1
            for row in after:
                if key:
                    images[tuple(row[i] for i in key)] = row
                else:
                    counts[tuple(row)] += 1
        return images, counts


def _project(specs: list[ColumnSpec], row: Sequence[ThlValue], names: list[str]) -> Row:
    by_name = {s.name: v for s, v in zip(specs, row, strict=False)}
    return [by_name.get(n) for n in names]


class Cascades:
    """Follows the cascades of one group's fragments (``follow``), keeping one
    ``BlockChanges`` per applier (channel)."""

    def __init__(self, keeps: KeepsTable) -> None:
        self._keeps = keeps
        self._blocks: dict[int, BlockChanges] = {}
        #: Child rows changed by cascades, and the deepest chain, since the process started.
        self.rows = 0
        self.deepest = 0

    def block(self, applier: object) -> BlockChanges:
        found = self._blocks.get(id(applier))
        if found is None:
            found = self._blocks[id(applier)] = BlockChanges()
        return found

    def begun(self, applier: object) -> None:
        """``applier`` opened a block."""
        self.block(applier).begin()

    def follow(self, event: ThlEvent, applier: object) -> tuple[ThlEvent, Followed]:
        """``event`` with the child row changes its parent changes set off, each right after
        its parent's row change; the block's changes recorded either way."""
        block = self.block(applier)
        raw = event.metadata.get(META_FOREIGN_KEYS)
        rules = CascadeRules.decode(raw) if raw else None
        if rules is not None:
            block.learn(rules)
        done = Followed()
        finds = finder(applier, event) if rules is not None else None
        data = []
        for item in event.data:
            data.append(item)
            if not isinstance(item, RowChange):
                continue
            block.add(item)
            if rules is not None and finds is not None:
                data.extend(self._cascade(item, rules, block, finds, event, 1, done))
        if done.rows:
            self.rows += done.rows
            self.deepest = max(self.deepest, done.depth)
            event = replace(event, data=data)
        return event, done

    def _cascade(self, parent: RowChange, rules: CascadeRules, block: BlockChanges,
                 finds: FindsRows, event: ThlEvent, depth: int, done: Followed
                 ) -> list[RowChange]:
        made: list[RowChange] = []
        for fk in rules.of_parent((parent.schema, parent.table)):
            moves = _moves(parent, fk)
            if not moves or not self._keeps(*fk.child):
                continue
            if depth > MAX_DEPTH:
                raise DataError(f"cascade from {parent.schema}.{parent.table} deeper than "
                                f"{MAX_DEPTH} at foreign key {fk.name}: the rules loop",
                                seqno=event.seqno, event_id=event.event_id)
            if fk.child in block.late:
                raise Relearn(f"foreign key {fk.name}: {'.'.join(fk.child)} is a child table "
                              "this block wrote before it was known to be one; applying "
                              "the block again", seqno=event.seqno, event_id=event.event_id)
            specs = rules.tables[fk.child]
            found = _children(finds, block, fk, specs, list(moves))
            if not found:
                continue
            child = _child_change(fk, parent.action, specs, found, moves)
            block.add(child)
            made.append(child)
            done.rows += len(found)
            done.depth = max(done.depth, depth)
            made.extend(self._cascade(child, rules, block, finds, event, depth + 1, done))
        return made


class KeepsTable(Protocol):
    def __call__(self, schema: str, table: str) -> bool: ...


def finder(applier: object, event: ThlEvent) -> FindsRows:
    if not isinstance(applier, FindsRows):
        raise DataError(f"seqno {event.seqno} deletes or updates rows that foreign keys "
                        "cascade from, and this target cannot look child rows up; set the "
                        "group's `foreign_keys: ignore` to leave cascades out",
                        seqno=event.seqno, event_id=event.event_id)
    return applier


def _moves(parent: RowChange, fk: ForeignKey) -> dict[Values, Values | None]:
    """The parent key values a change takes away, each with what its children get: None
    for a delete (or SET NULL), the new values for ON UPDATE CASCADE."""
    action = fk.on_delete if parent.action is RowAction.DELETE else fk.on_update
    if parent.action is RowAction.INSERT or not action.acts:
        return {}
    before = _column_values(parent.key_specs, parent.key_values, fk.parent_columns)
    if parent.action is RowAction.DELETE:
        return {old: None for old in before if None not in old}
    after = _column_values(parent.column_specs, parent.column_values, fk.parent_columns)
    return {old: (new if action is Referential.CASCADE else None)
            for old, new in zip(before, after, strict=True) if None not in old and old != new}


def _column_values(specs: list[ColumnSpec], rows: list[Row], columns: Sequence[str]
                   ) -> list[Values]:
    names = [s.name for s in specs]
    try:
        at = [names.index(c) for c in columns]
    except ValueError:
        return []  # the parent's image lacks a referenced column: nothing to follow
    return [tuple(r[i] for i in at) for r in rows]


def _children(finds: FindsRows, block: BlockChanges, fk: ForeignKey,
              specs: list[ColumnSpec], keys: list[Values]) -> list[Row]:
    """The child rows whose foreign key holds one of ``keys``: the target's, under the
    block's own changes."""
    names = [s.name for s in specs]
    at = [names.index(c) for c in fk.child_columns]
    wanted = set(keys)
    key = [i for i, s in enumerate(specs) if s.primary_key]
    images, counts = block.overlay(fk.child, specs)
    rows: list[Row] = []
    for row in finds.rows_matching(fk.child[0], fk.child[1], specs, fk.child_columns, keys):
        row = list(row)
        if tuple(row[i] for i in at) not in wanted:
            continue
        if key:
            if tuple(row[i] for i in key) in images:
                continue  # the block changed it: its image below counts
        elif counts[tuple(row)] < 0:
            counts[tuple(row)] += 1  # the block removed one of these
            continue
        rows.append(row)
    if key:
        rows.extend(r for r in images.values() if r is not None
                    and tuple(r[i] for i in at) in wanted)
    else:
        for values, n in counts.items():
            if n > 0 and tuple(values[i] for i in at) in wanted:
                rows.extend([list(values)] * n)
    return rows


def _child_change(fk: ForeignKey, action: RowAction, specs: list[ColumnSpec],
                  found: list[Row], moves: dict[Values, Values | None]) -> RowChange:
    schema, table = fk.child
    deletes = (fk.on_delete if action is RowAction.DELETE else fk.on_update) \
        is Referential.CASCADE and action is RowAction.DELETE
    if deletes:
        return RowChange(action=RowAction.DELETE, schema=schema, table=table,
                         key_specs=specs, key_values=found)
    names = [s.name for s in specs]
    at = [names.index(c) for c in fk.child_columns]
    after = []
    for row in found:
        new = moves[tuple(row[i] for i in at)]
        image = list(row)
        for n, i in enumerate(at):
            image[i] = None if new is None else new[n]
        after.append(image)
    return RowChange(action=RowAction.UPDATE, schema=schema, table=table,
                     column_specs=specs, key_specs=specs, column_values=after,
                     key_values=found)
