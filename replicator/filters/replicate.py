"""replicate/ignore by ``schema.table`` with shell wildcards (Tungsten's ``replicate`` filter).

The extractor applies it to every statement and row change before a seqno is assigned, so a
transaction that filters to nothing never takes a seqno.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Protocol

from replicator.sql_names import statement_target
from thl_topics.event import RowChange, Statement, ThlEvent


class Filter(Protocol):
    """One filter stage."""

    def __call__(self, event: ThlEvent) -> ThlEvent | None: ...


class ItemFilter(Protocol):
    """Decides per statement or row change (what the extractor applies before seqnos)."""

    def keeps(self, schema: str, table: str) -> bool: ...

    def keeps_item(self, item: Statement | RowChange) -> bool: ...


class ReplicateFilter:
    """Keep ``replicate`` patterns (all when empty), then drop ``ignore`` patterns.

    Patterns are ``schema.table`` (``shop.*``, ``*.tmp_*``); a bare ``schema`` means
    ``schema.*``. A statement matches by the table its SQL names
    (``replicator.sql_names``), else by its default schema.
    """

    def __init__(self, replicate: Iterable[str] = (), ignore: Iterable[str] = ()) -> None:
        self.replicate = [self._normalise(p) for p in replicate]
        self.ignore = [self._normalise(p) for p in ignore]
        self._cache: dict[tuple[str, str], bool] = {}
        #: No pattern: every table passes.
        self.everything = not self.replicate and not self.ignore

    @staticmethod
    def _normalise(pattern: str) -> str:
        return pattern if "." in pattern else f"{pattern}.*"

    def keeps(self, schema: str, table: str) -> bool:
        """True if changes to ``schema.table`` pass the filter."""
        if self.everything:
            return True
        key = (schema, table)
        kept = self._cache.get(key)
        if kept is None:
            name = f"{schema}.{table}"
            kept = (not self.replicate or any(fnmatchcase(name, p) for p in self.replicate)) \
                and not any(fnmatchcase(name, p) for p in self.ignore)
            self._cache[key] = kept
        return kept

    def keeps_schema(self, schema: str) -> bool:
        """True if statements whose default schema is ``schema`` pass the filter.

        A statement may touch any table of its schema, so it is kept if some replicate
        pattern names its schema, and dropped only if an ignore pattern names the whole schema.
        """
        kept = not self.replicate or any(
            fnmatchcase(schema, p.split(".", 1)[0]) for p in self.replicate)
        return kept and not any(
            fnmatchcase(schema, s) and t == "*" for s, t in (p.split(".", 1) for p in self.ignore))

    def keeps_item(self, item: Statement | RowChange) -> bool:
        """True if one statement or row change passes the filter."""
        if isinstance(item, RowChange):
            return self.keeps(item.schema, item.table)
        if not self.replicate and not self.ignore:
            return True
        target = statement_target(item.sql, item.default_schema)
        if target.schema is None:
            return not self.replicate  # no schema to match: only an unrestricted filter keeps it
        if target.table is None:
            return self.keeps_schema(target.schema)
        return self.keeps(target.schema, target.table)

    def __call__(self, event: ThlEvent) -> ThlEvent | None:
        event.data = [item for item in event.data if self.keeps_item(item)]
        return event if event.data else None


class TrackingSchemaFilter:
    """The extractor's own filter around the user's: the tracking schema is not data.

    Our position writes (``trep_commit_seqno``) and the tracking DDL that every extractor
    start and ``trepctl heartbeat`` run (``CREATE SCHEMA IF NOT EXISTS ...``) never enter
    the THL; heartbeat rows always do, whatever the user's filter says, so every target can
    measure its lag.
    """

    def __init__(self, inner: ReplicateFilter, tracking_schema: str) -> None:
        self.inner = inner
        self.schema = tracking_schema

    def keeps(self, schema: str, table: str) -> bool:
        if schema == self.schema:
            return table == "heartbeat"
        return self.inner.keeps(schema, table)

    def keeps_item(self, item: Statement | RowChange) -> bool:
        if isinstance(item, RowChange):
            return self.keeps(item.schema, item.table)
        if statement_target(item.sql, item.default_schema).schema == self.schema:
            return False
        return self.inner.keeps_item(item)
