"""Renamed and dropped tables and renamed columns on PostgreSQL (``Restructures``), with the
SQL applier driven directly against the real server: each change in its block's
transaction, harmless when replayed, and later rows bound to the new names."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from consumers.errors import DataError
from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.schema_changes import SchemaChangeMode
from consumers.sql.applier import SqlApplier
from consumers.sql.config import SqlTarget
from replicator.config import ServiceSettings
from stack.services.postgresql import PostgreSQL
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.schema_change import ChangeKind, SchemaChange


def _specs(key: str = "id", value: str = "name") -> list[ColumnSpec]:
    return [ColumnSpec(index=1, name=key, type="INT", nullable=False, primary_key=True),
            ColumnSpec(index=2, name=value, type="VARCHAR", length=16)]


def _event(seqno: int, *rows: RowChange) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="src", event_id=f"bin.000001:{seqno};0",
                    shard_id="db", tstamp=int(time.time() * 1e6), data=list(rows))


class _Target:
    """A schema on PostgreSQL and an applier of a group on it."""

    def __init__(self, url: str, base: str, mode: SchemaChangeMode) -> None:
        self.url, self.schema, self.seqno = url, base, 0
        self.engine = sa.create_engine(url)
        self.applier = self.new_applier(mode)

    def new_applier(self, mode: SchemaChangeMode) -> SqlApplier:
        applier = SqlApplier(SqlTarget(url=self.url), ApplierContext(
            ServiceSettings(service=self.schema), "g", schema_changes=mode))
        applier.connect()
        applier.position()  # what the next commit expects, as the runtime reads it
        return applier

    def rows(self, table: str, *values: tuple[int, str | None], action: RowAction =
             RowAction.INSERT, specs: Sequence[ColumnSpec] | None = None,
             schema: str | None = None) -> None:
        specs = list(specs or _specs())
        images: list[list[ThlValue]] = [list(v) for v in values]
        change = RowChange(action, schema or self.schema, table, column_specs=specs,
                           column_values=images if action is not RowAction.DELETE else [],
                           key_specs=specs if action is not RowAction.INSERT else [],
                           key_values=images if action is not RowAction.INSERT else [])
        self.block(lambda event: self.applier.apply(event), change)

    def block(self, call: Any, *rows: RowChange) -> None:
        """One block of its own, as the runtime runs a DDL event's."""
        self.seqno += 1
        event = _event(self.seqno, *rows)
        self.applier.begin()
        call(event)
        self.applier.commit(Position.of(event, 0))

    def change(self, kind: ChangeKind, table: str, **fields: Any) -> SchemaChange:
        return SchemaChange(kind, self.schema, table, **fields)

    def sql(self, text: str) -> list[tuple[Any, ...]]:
        with self.engine.begin() as conn:
            result = conn.exec_driver_sql(text)
            return [tuple(r) for r in result] if result.returns_rows else []

    def columns(self, table: str, schema: str | None = None) -> dict[str, bool]:
        """Column name -> nullable, of a table (empty: no such table)."""
        return {r[0]: r[1] == "YES" for r in self.sql(
            "SELECT column_name, is_nullable FROM information_schema.columns WHERE "
            f"table_schema = '{schema or self.schema}' AND table_name = '{table}'")}


@pytest.fixture
def pg(postgresql: PostgreSQL) -> Iterator[str]:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{postgresql.port}/postgres"
    base = f"rs{uuid.uuid4().hex[:10]}"
    yield f"{url}#{base}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for schema in (base, f"{base}_moved", f"tungsten_{base}"):
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    engine.dispose()


def _target(pg: str, mode: SchemaChangeMode) -> _Target:
    url, base = pg.split("#")
    return _Target(url, base, mode)


def test_lenient_rename_keeps_rows_and_the_old_column(pg: str) -> None:
    t = _target(pg, "lenient")
    s = t.schema
    try:
        t.rows("items", (1, "a"), (2, "b"))
        t.sql(f'ALTER TABLE "{s}".items ALTER COLUMN name SET NOT NULL')  # by hand
        rename = t.change(ChangeKind.RENAME_TABLE, "items", new_schema=s, new_name="goods")
        for _ in range(2):  # the second time: a replay, left alone
            t.block(lambda e: t.applier.rename_table(rename, e))
        assert t.columns("items") == {} and set(t.columns("goods")) == {"id", "name"}
        relabel = t.change(ChangeKind.RENAME_COLUMN, "goods", column="name", new_name="label")
        for _ in range(2):
            t.block(lambda e: t.applier.rename_column(relabel, True, e))
        assert t.columns("goods") == {"id": False, "name": True, "label": True}
        assert t.sql(f'SELECT col_description(\'"{s}".goods\'::regclass, 3)') == [
            ("tungsten source type: VARCHAR(16 bytes)",)]
        specs = _specs(value="label")
        t.rows("goods", (1, "relabelled"), action=RowAction.UPDATE, specs=specs)
        t.rows("goods", (2, "b"), action=RowAction.DELETE, specs=specs)
        t.rows("goods", (3, "c"), specs=specs)
        assert t.sql(f'SELECT id, name, label FROM "{s}".goods ORDER BY id') == [
            (1, "a", "relabelled"), (3, None, "c")]
        # A key column is renamed, lenient or not.
        rekey = t.change(ChangeKind.RENAME_COLUMN, "goods", column="id", new_name="ident")
        t.block(lambda e: t.applier.rename_column(rekey, True, e))
        assert set(t.columns("goods")) == {"ident", "name", "label"}
        t.rows("goods", (3, "cc"), action=RowAction.UPDATE, specs=_specs("ident", "label"))
        assert t.sql(f'SELECT ident, label FROM "{s}".goods ORDER BY ident') == [
            (1, "relabelled"), (3, "cc")]
        # After a restart the new names are read from the target.
        t.applier.close()
        t.applier = t.new_applier("lenient")
        t.rows("goods", (4, "d"), specs=_specs("ident", "label"))
        assert t.sql(f'SELECT count(*) FROM "{s}".goods') == [(3,)]
    finally:
        t.applier.close()


def test_evolve_renames_moves_and_drops(pg: str) -> None:
    t = _target(pg, "evolve")
    s = t.schema
    try:
        t.rows("items", (1, "a"))
        t.rows("big", (1, "x"))
        relabel = t.change(ChangeKind.RENAME_COLUMN, "items", column="name", new_name="label")
        for _ in range(2):
            t.block(lambda e: t.applier.rename_column(relabel, False, e))
        assert set(t.columns("items")) == {"id", "label"}
        move = t.change(ChangeKind.RENAME_TABLE, "items", new_schema=f"{s}_moved",
                        new_name="goods")
        t.block(lambda e: t.applier.rename_table(move, e))
        assert t.columns("items") == {} and set(t.columns("goods", f"{s}_moved")) == {
            "id", "label"}
        t.rows("goods", (1, "b"), action=RowAction.UPDATE, specs=_specs(value="label"),
               schema=f"{s}_moved")
        assert t.sql(f'SELECT id, label FROM "{s}_moved".goods') == [(1, "b")]
        drop = t.change(ChangeKind.DROP_TABLE, "big")
        for _ in range(2):
            t.block(lambda e: t.applier.drop_table(drop, e))
        assert t.columns("big") == {}
        # Never made here: nothing happens.
        never = t.change(ChangeKind.RENAME_TABLE, "never", new_schema=s, new_name="made")
        t.block(lambda e: t.applier.rename_table(never, e))
        t.block(lambda e: t.applier.drop_table(t.change(ChangeKind.DROP_TABLE, "never"), e))
    finally:
        t.applier.close()


def test_a_rolled_back_rename_is_undone_and_a_clash_is_a_data_error(pg: str) -> None:
    t = _target(pg, "evolve")
    s = t.schema
    try:
        t.rows("items", (1, "a"))
        rename = t.change(ChangeKind.RENAME_TABLE, "items", new_schema=s, new_name="goods")
        t.applier.begin()
        t.applier.rename_table(rename, _event(99))
        t.applier.rollback()
        assert set(t.columns("items")) == {"id", "name"} and t.columns("goods") == {}
        t.rows("items", (2, "b"))  # the applier bound to items again
        t.rows("goods", (1, "g"))
        with pytest.raises(DataError, match="both"):
            t.block(lambda e: t.applier.rename_table(rename, e))
        t.applier.rollback()
    finally:
        t.applier.close()
