"""Each fragment as the group's target gets it: the group's filters run, heartbeat rows
become ``Heartbeat`` records, statements follow the applier's policy (a ``TRUNCATE`` on a
target that does not replay statements empties the table: ``Truncates``), keyless tables are
refused where the applier cannot address their rows, and a check event is checked rather
than applied (``checks``).

Both the single stream and every channel apply fragments through ``Preparation.apply``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from consumers.applier import Applier, DropsColumns, Restructures, StatementPolicy, Truncates
from consumers.cascades import Cascades, ForeignKeyMode
from consumers.check import check_of
from consumers.errors import ConsumerError, DataError
from consumers.heartbeat import HEARTBEAT_TABLE, Heartbeat, heartbeats
from consumers.metrics import ConsumerMetrics
from consumers.provisioning import PendingProvisioning
from consumers.runtime.checks import RangeChecks
from consumers.schema_changes import Action, SchemaChangeMode, action, stopped
from replicator.filters import FilterChain, FilterError, ReplicateFilter
from replicator.sql_names import is_transactional
from thl_topics.event import ColumnSpec, DataItem, RowChange, Statement, ThlEvent
from thl_topics.records import META_CHECK
from thl_topics.schema_change import ChangeKind, SchemaChange


class Preparation:
    """What of each event one group's target gets, and how a fragment reaches its block.

    ``applier``: the group's (channel 0's), whose capabilities and name every channel
    shares; ``tracking_schema``: ``tungsten_<service>``, whose rows are the replicator's.
    """

    def __init__(self, replicate: ReplicateFilter, chain: FilterChain, tracking_schema: str,
                 applier: Applier, checks: RangeChecks,
                 pending: PendingProvisioning | None = None,
                 schema_changes: SchemaChangeMode = "lenient",
                 foreign_keys: ForeignKeyMode = "follow",
                 metrics: ConsumerMetrics | None = None) -> None:
        self.filter = replicate
        self.chain = chain
        self.tracking_schema = tracking_schema
        self.applier = applier
        self.capabilities = applier.capabilities
        self.checks = checks
        self.pending = pending
        self.schema_changes = schema_changes
        replays = self.capabilities.statements is StatementPolicy.APPLY
        #: Cascades carried out here: not where the target replays the source's DDL, and
        #: with it keeps the same foreign keys, which cascade by themselves.
        self.cascades = Cascades(replicate.keeps) \
            if foreign_keys == "follow" and not replays else None
        self.metrics = metrics
        #: The last column specs found to hold a primary key: an event's row changes of one
        #: table share their specs (the decoder hands the same list), checked once.
        self._keyed: list[ColumnSpec] | None = None
        #: The change kinds the applier carries out itself, since it does not replay the
        #: statement (``Truncates``, ``Restructures``).
        self.carried: frozenset[ChangeKind] = frozenset() if replays else frozenset(
            ({ChangeKind.TRUNCATE} if isinstance(applier, Truncates) else set())
            | (_RESTRUCTURES if isinstance(applier, Restructures) else set())
            | ({ChangeKind.DROP_COLUMN} if isinstance(applier, DropsColumns) else set()))

    def start_session(self) -> None:
        """Before a session streams: what it must know afresh."""
        if self.pending is not None:
            self.pending.read_now()

    def block_begun(self, applier: Applier) -> None:
        """``applier`` (the group's, or a channel's) opened a block."""
        if self.cascades is not None:
            self.cascades.begun(applier)

    def apply(self, applier: Applier, event: ThlEvent) -> None:
        """One fragment into the open block of ``applier`` (the group's; with channels, the
        channel's), with the seqno on any error it raises."""
        check = check_of(event)
        if check is not None:
            self.checks.check(check, event, applier)
            return
        try:
            carried = self.carried_out(event)
            prepared, beats = self.prepare(event, applier)
            if prepared.data:
                applier.apply(prepared)
            for change, done in carried:
                _carry_out(applier, change, done, event)
            for beat in beats:
                applier.heartbeat(beat)
        except ConsumerError as exc:
            if exc.seqno < 0:
                exc.seqno, exc.event_id = event.seqno, event.event_id
            raise

    def prepare(self, event: ThlEvent, applier: Applier | None = None
                ) -> tuple[ThlEvent, list[Heartbeat]]:
        """What of ``event`` this target gets, and the heartbeats it carries.

        In order: the replicator's own rows come out (heartbeats are kept aside), the
        group's replicate/ignore filter, the child row changes of foreign-key cascades
        (``consumers.cascades``, looked up on ``applier``: the group's when None), its
        filter chain, then what the applier declared:
        its statement policy and whether it takes tables without a key (a pkey filter in
        the chain may have given them one); last, changes to tables a provisioning empties
        and reloads further on are marked to be applied leniently (``consumers.provisioning``).
        """
        kept: list[DataItem] = []
        beats: list[Heartbeat] = []
        for item in event.data:
            if isinstance(item, RowChange):
                if item.schema == self.tracking_schema:
                    if item.table == HEARTBEAT_TABLE:
                        beats.extend(heartbeats(item, event.seqno, event.event_id))
                    continue  # the replicator's own bookkeeping, never data
                if self.filter.keeps(item.schema, item.table):
                    kept.append(item)
            elif self.filter.keeps_item(item):
                kept.append(item)
        if len(kept) != len(event.data):
            event = replace(event, data=kept)
        if self.cascades is not None and event.data:
            event, done = self.cascades.follow(event, applier or self.applier)
            if done.rows and self.metrics is not None:
                self.metrics.cascaded(done.rows, done.depth)
        if self.chain.filters and event.data:  # no __bool__ call: once an event
            try:
                filtered = self.chain(event)
            except FilterError as exc:
                raise DataError(str(exc), seqno=event.seqno, event_id=event.event_id) from exc
            event = filtered if filtered is not None else replace(event, data=[])
        if self.capabilities.keyless_tables and all(type(i) is RowChange for i in event.data):
            pass  # row changes only, and the applier takes every one: nothing to look at
        elif any(not self._admits(item, event) for item in event.data):
            event = replace(event, data=[i for i in event.data if self._admits(i, event)])
        if self.pending is not None and event.data:
            event = self.pending.mark(event)
        return event, beats

    def _kept_changes(self, event: ThlEvent) -> list[SchemaChange]:
        return [c for item in event.data if isinstance(item, Statement)
                for c in item.schema_changes or () if self.filter.keeps(c.schema, c.table)]

    def carried_out(self, event: ThlEvent) -> list[tuple[SchemaChange, Action]]:
        """The event's schema changes the applier carries out itself (where the target does
        not replay the statement; the statement is then left out like any other), each with
        what the group's mode makes of it; a DataError at the event's first schema change
        in ``exception`` mode."""
        carried: list[tuple[SchemaChange, Action]] = []
        for change in self._kept_changes(event):
            done = action(self.schema_changes, change)
            if done is Action.STOP:
                raise stopped(change, event.seqno, event.event_id)
            if change.kind in self.carried and (done is Action.APPLY or (
                    done is Action.KEEP and change.kind is ChangeKind.RENAME_COLUMN)):
                carried.append((change, done))
        return carried

    def _admits(self, item: DataItem, event: ThlEvent) -> bool:
        """Whether the applier gets ``item`` (DataError where it declared it cannot take it)."""
        if isinstance(item, RowChange):
            specs = item.column_specs or item.key_specs
            if specs is self._keyed or self.capabilities.keyless_tables:
                return True
            if any(c.primary_key for c in specs):
                self._keyed = specs
            else:
                raise DataError(
                    f"table {item.schema}.{item.table} has no primary key and "
                    f"{self.applier.target} cannot address its rows (seqno {event.seqno}); "
                    "add a key on the source or with a pkey filter, filter the table out of "
                    "this group, or skip the seqno", seqno=event.seqno,
                    event_id=event.event_id)
            return True
        policy = self.capabilities.statements
        if policy is StatementPolicy.APPLY:
            return True
        if item.schema_changes and all(c.kind in self.carried for c in item.schema_changes):
            return False  # carried out by the applier itself
        if policy is StatementPolicy.ERROR:
            raise DataError(
                f"seqno {event.seqno} holds a statement event, which {self.applier.target} "
                f"does not run: {item.sql[:200]!r}. Set this target's `statements: skip` to "
                "leave statements out, or skip the seqno.", seqno=event.seqno,
                event_id=event.event_id)
        return False

    def isolates(self, event: ThlEvent) -> bool:
        """A statement the target commits by itself (DDL) is applied in a block of its own,
        and so is a check: it must see every earlier seqno committed."""
        if META_CHECK in event.metadata:
            return True
        statements = [item for item in event.data if isinstance(item, Statement)]
        if not statements:
            return False  # most events: one look at each item
        if any(c.kind in self.carried for c in self._kept_changes(event)):
            return True
        return self.capabilities.statements is StatementPolicy.APPLY and any(
            not is_transactional(item.sql) for item in statements)


#: What a ``Restructures`` applier carries out.
_RESTRUCTURES = frozenset({ChangeKind.RENAME_TABLE, ChangeKind.RENAME_COLUMN,
                           ChangeKind.DROP_TABLE})


def _carry_out(applier: Applier, change: SchemaChange, done: Action, event: ThlEvent) -> None:
    if change.kind is ChangeKind.TRUNCATE:
        cast(Truncates, applier).truncate(change.schema, change.table, event)
        return
    if change.kind is ChangeKind.DROP_COLUMN:
        cast(DropsColumns, applier).drop_column(change, event)
        return
    follower = cast(Restructures, applier)
    if change.kind is ChangeKind.RENAME_TABLE:
        follower.rename_table(change, event)
    elif change.kind is ChangeKind.RENAME_COLUMN:
        follower.rename_column(change, done is Action.KEEP, event)
    elif change.kind is ChangeKind.DROP_TABLE:
        follower.drop_table(change, event)
