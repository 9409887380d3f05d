"""One policy for schema changes, every target kind: ``schema_changes`` per consumer group.

The extractor publishes each DDL statement with the typed changes it makes
(``thl_topics.schema_change``); this module decides, for a group's mode, what the group does
with each one, and the appliers carry the decision out:

========================  ==========  ===============================  ================
change                    ``evolve``  ``lenient`` (the default)        ``exception``
========================  ==========  ===============================  ================
create table              apply       apply                            apply
truncate                  apply       apply                            stop
rename table              apply       apply (the target table, index,  stop
                                      collection or Delta table
                                      follows with its rows)
drop column               drop it     keep the target column, NULL     stop
                                      (nullable) from then on
rename column             rename it   keep the old column (NULL from   stop
                                      then on) and add the new one,
                                      filled from the old for the
                                      rows already there
drop table                drop it     keep the target table            stop
every other change        apply       apply                            stop
========================  ==========  ===============================  ================

A renamed key column is renamed in ``lenient`` too: a kept old key column would leave later
rows unaddressable.

A new table changes no table a reader already has: ``exception`` lets it through.

``ignore`` changes nothing on the target. Unlike Flink CDC's lenient mode, ours applies a
TRUNCATE: skipping it would leave the target different from the source. MySQL-family
targets replay the DDL statement itself (their copy is exact) in every mode but
``exception``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from consumers.errors import DataError
from thl_topics.schema_change import ChangeKind, SchemaChange

#: A consumer group's ``schema_changes`` setting.
SchemaChangeMode = Literal["evolve", "lenient", "exception", "ignore"]

#: Changes ``lenient`` keeps on the target rather than following.
_KEPT = frozenset({ChangeKind.DROP_COLUMN, ChangeKind.DROP_TABLE,
                   ChangeKind.RENAME_COLUMN})


class Action(StrEnum):
    """What a group does with one schema change."""

    #: The target follows the source.
    APPLY = "apply"
    #: The target keeps what it has (a dropped column or table stays, with its data).
    KEEP = "keep"
    #: The group stops at the change's seqno.
    STOP = "stop"
    #: Nothing happens on the target.
    IGNORE = "ignore"


def action(mode: SchemaChangeMode, change: SchemaChange) -> Action:
    """What a group in ``mode`` does with ``change``."""
    if mode == "ignore":
        return Action.IGNORE
    if change.kind is ChangeKind.CREATE_TABLE:
        return Action.APPLY
    if mode == "exception":
        return Action.STOP
    if mode == "lenient" and change.kind in _KEPT:
        return Action.KEEP
    return Action.APPLY


def stopped(change: SchemaChange, seqno: int, event_id: str) -> DataError:
    """The error of a group in ``exception`` mode at a schema change."""
    return DataError(
        f"schema change at seqno {seqno}: {change.describe()}; this group stops at every "
        "schema change (schema_changes: exception). Make the same change on the target and "
        "skip the seqno, or set schema_changes: lenient (or evolve) to let the group follow",
        seqno=seqno, event_id=event_id)
