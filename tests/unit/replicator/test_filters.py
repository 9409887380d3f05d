"""replicate/ignore by schema.table with wildcards."""

from __future__ import annotations

from replicator.filters import ReplicateFilter
from thl_topics.event import RowAction, RowChange, Statement, ThlEvent


def _rows(schema: str, table: str) -> RowChange:
    return RowChange(RowAction.INSERT, schema, table, column_values=[[1]])


def test_empty_filter_keeps_everything() -> None:
    f = ReplicateFilter()
    assert f.keeps("any", "thing")
    assert f.keeps_item(Statement("CREATE DATABASE x"))


def test_replicate_then_ignore_with_wildcards() -> None:
    f = ReplicateFilter(replicate=["shop.*", "crm.customers"], ignore=["shop.tmp_*"])
    assert f.keeps("shop", "orders")
    assert f.keeps("crm", "customers")
    assert not f.keeps("crm", "leads")
    assert not f.keeps("shop", "tmp_import")
    assert not f.keeps("other", "orders")


def test_bare_schema_means_every_table() -> None:
    f = ReplicateFilter(ignore=["audit"])
    assert not f.keeps("audit", "log")
    assert f.keeps("shop", "log")


def test_statements_match_by_default_schema() -> None:
    f = ReplicateFilter(replicate=["shop.orders"], ignore=["junk.*"])
    assert f.keeps_item(Statement("ALTER TABLE orders ADD c INT", default_schema="shop"))
    assert not f.keeps_item(Statement("ALTER TABLE t ADD c INT", default_schema="crm"))
    assert not f.keeps_item(Statement("CREATE DATABASE x"))  # no schema, restricted filter
    assert not ReplicateFilter(ignore=["junk.*"]).keeps_item(
        Statement("DROP TABLE t", default_schema="junk"))


def test_event_filtered_to_nothing_is_dropped() -> None:
    f = ReplicateFilter(ignore=["shop.tmp"])
    event = ThlEvent(0, 0, "s", "f:1;0", "shop", 0,
                     data=[_rows("shop", "tmp"), _rows("shop", "orders")])
    kept = f(event)
    assert kept is not None
    assert [item.table for item in kept.data if isinstance(item, RowChange)] == ["orders"]
    only_tmp = ThlEvent(1, 0, "s", "f:2;0", "shop", 0, data=[_rows("shop", "tmp")])
    assert f(only_tmp) is None
