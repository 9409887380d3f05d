"""The filter chain: each built-in filter on the type matrix and hostile names, users' filters,
errors naming the filter and the seqno, and events never changed in place."""

from __future__ import annotations

import copy
import hashlib
import hmac
from typing import Any

import pytest
from pydantic import TypeAdapter

from replicator.filters import FilterError, build_chain
from replicator.filters.specs import FilterSpec
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent, ThlValue

_SPECS = TypeAdapter(list[FilterSpec])

#: One column of every kind the THL carries, with an edge value each.
MATRIX: list[tuple[ColumnSpec, ThlValue]] = [
    (ColumnSpec(1, "id", "INT", primary_key=True), 1),
    (ColumnSpec(2, "u_big", "BIGINT", unsigned=True), "18446744073709551615"),
    (ColumnSpec(3, "dec65", "DECIMAL", length=65, scale=30),
     "99999999999999999999999999999999999.999999999999999999999999999999"),
    (ColumnSpec(4, "d", "DOUBLE"), 1.7976931348623157e308),
    (ColumnSpec(5, "b64", "BIT", length=64), "18446744073709551615"),
    (ColumnSpec(6, "t6", "TIME", scale=6), "-838:59:59.000000"),
    (ColumnSpec(7, "dt6", "DATETIME", scale=6), "0000-00-00 00:00:00.000000"),
    (ColumnSpec(8, "e", "ENUM", enum_values=["a", "b", "ç😀"]), "ç😀"),
    (ColumnSpec(9, "st", "SET", enum_values=["x", "y", "z"]), "x,z"),
    (ColumnSpec(10, "j", "JSON"), '{"k": [1, "é", null]}'),
    (ColumnSpec(11, "vb", "VARBINARY", length=20, blob=True), b"\x00\x01\x00\xff"),
    (ColumnSpec(12, "txt", "TEXT", charset="utf8mb4"), "héllo 😀 'q' \\ end"),
    (ColumnSpec(13, 'we"ird `col` ü', "VARCHAR", length=20), None),
]
SPECS = [s for s, _ in MATRIX]
ROW = [v for _, v in MATRIX]
HOSTILE_SCHEMA, HOSTILE_TABLE = "sch`ema ü", 'sel`ect "tbl"'


def _event(action: RowAction = RowAction.UPDATE, schema: str = "shop", table: str = "types",
           seqno: int = 7) -> ThlEvent:
    after = [list(ROW)] if action is not RowAction.DELETE else []
    before = [list(ROW)] if action is not RowAction.INSERT else []
    change = RowChange(action, schema, table, column_specs=SPECS if after else [],
                       key_specs=SPECS if before else [], column_values=after,
                       key_values=before)
    return ThlEvent(seqno=seqno, epoch=0, source_id="s", event_id=f"bin.1:{seqno};0",
                    shard_id=schema, tstamp=0, metadata={"shard": schema},
                    data=[Statement("ALTER TABLE t ADD c INT", default_schema=schema), change])


def _chain(*specs: dict[str, Any]) -> Any:
    return build_chain(_SPECS.validate_python(list(specs)))


def _rows(event: ThlEvent) -> RowChange:
    change = event.data[1]
    assert isinstance(change, RowChange)
    return change


@pytest.mark.parametrize("action", list(RowAction))
def test_dropcolumn_removes_values_and_specs_of_both_images(action: RowAction) -> None:
    event = _event(action)
    original = copy.deepcopy(event)
    out = _chain({"type": "dropcolumn", "tables": ["shop.*"], "columns": ["vb", "we*"]})(event)
    assert out is not None
    change = _rows(out)
    images = [(specs, rows) for specs, rows in ((change.column_specs, change.column_values),
                                                (change.key_specs, change.key_values)) if rows]
    assert len(images) == (2 if action is RowAction.UPDATE else 1)
    for specs, rows in images:
        assert [c.name for c in specs] == [c.name for c in SPECS[:10]] + ["txt"]
        for row in rows:
            assert row == [*ROW[:10], ROW[11]]
    assert event == original  # never in place: the extractor shares specs between events


def test_dropcolumn_refuses_a_key_column_naming_the_filter_and_seqno() -> None:
    chain = _chain({"type": "dropcolumn", "name": "no-ids", "columns": ["id"]})
    with pytest.raises(FilterError, match=r"filter no-ids failed at seqno 7 .*key column"):
        chain(_event())


def test_rename_schema_table_and_columns_with_hostile_names() -> None:
    chain = _chain({"type": "rename", "schemas": {HOSTILE_SCHEMA: "clean"},
                    "tables": {f"{HOSTILE_SCHEMA}.{HOSTILE_TABLE}": "renamed `t`"},
                    "columns": {f"{HOSTILE_SCHEMA}.*": {'we"ird `col` ü': "plain", "id": "pk"}}})
    out = chain(_event(schema=HOSTILE_SCHEMA, table=HOSTILE_TABLE))
    assert out is not None
    change = _rows(out)
    assert (change.schema, change.table) == ("clean", "renamed `t`")
    names = [c.name for c in change.column_specs]
    assert (names[0], names[-1]) == ("pk", "plain")
    assert change.column_values == [ROW] and change.key_values == [ROW]
    assert change.column_specs[0].primary_key
    stmt = out.data[0]
    assert isinstance(stmt, Statement) and stmt.default_schema == "clean"
    assert (out.shard_id, out.metadata["shard"]) == ("clean", "clean")


def test_rename_table_to_another_schema() -> None:
    out = _chain({"type": "rename", "tables": {"shop.types": "archive.types_old"}})(_event())
    assert out is not None
    assert (_rows(out).schema, _rows(out).table) == ("archive", "types_old")


def test_enumtostring_turns_enum_and_set_specs_into_varchar() -> None:
    out = _chain({"type": "enumtostring"})(_event())
    assert out is not None
    specs = {c.name: c for c in _rows(out).column_specs}
    # Lengths in characters, as VARCHAR counts them.
    assert (specs["e"].type, specs["e"].length, specs["e"].enum_values) == ("VARCHAR", 2, [])
    assert (specs["st"].type, specs["st"].length) == ("VARCHAR", 5)
    assert _rows(out).column_values == [ROW]  # values already travel as names


def test_pkey_declares_a_key_for_a_table_without_one() -> None:
    event = _event(RowAction.DELETE)
    loose = [ColumnSpec(c.index, c.name, c.type, primary_key=False) for c in SPECS]
    _rows(event).key_specs = loose
    out = _chain({"type": "pkey", "tables": {"shop.types": ["dt6", "u_big"]}})(event)
    assert out is not None
    keys = [c.name for c in _rows(out).key_specs if c.primary_key]
    assert keys == ["u_big", "dt6"]  # table order
    with pytest.raises(FilterError, match=r"has no column.*nope"):
        _chain({"type": "pkey", "tables": {"shop.*": ["nope"]}})(_event())


def test_mask_and_hash_keep_null_and_hash_deterministically() -> None:
    masked = _chain({"type": "mask", "columns": ["txt", "vb", "we*"]})(_event())
    assert masked is not None
    row = _rows(masked).column_values[0]
    assert (row[10], row[11], row[12]) == ("****", "****", None)
    assert _rows(masked).column_specs[10].type == "VARCHAR"
    hashed = _chain({"type": "mask", "method": "hash", "salt": "pepper",
                     "columns": ["id", "vb", "u_big"]})(_event())
    assert hashed is not None
    row = _rows(hashed).key_values[0]
    expect = hmac.new(b"pepper", b"\x00\x01\x00\xff", hashlib.sha256).hexdigest()
    assert row[10] == expect and row[0] == hmac.new(b"pepper", b"1", hashlib.sha256).hexdigest()
    assert _rows(hashed).key_values == _rows(hashed).column_values
    with pytest.raises(FilterError, match="key column"):
        _chain({"type": "mask", "columns": ["id"]})(_event())


def test_salt_is_never_shown() -> None:
    specs = _SPECS.validate_python([{"type": "mask", "method": "hash", "salt": "s3cret",
                                     "columns": ["x"]}])
    assert "s3cret" not in repr(specs)


def drop_everything(**options: Any) -> Any:
    """A user's filter factory for the tests: drops rows of tables named in ``tables``."""
    def run(event: ThlEvent) -> ThlEvent | None:
        return None if options.get("all") else event
    return run


def boom(**_: Any) -> Any:
    def run(event: ThlEvent) -> ThlEvent:
        raise ZeroDivisionError("user bug")
    return run


def test_custom_filters_by_dotted_path_run_in_order_and_errors_name_them() -> None:
    here = __name__
    chain = _chain({"type": "rename", "schemas": {"shop": "s2"}},
                   {"type": "custom", "path": f"{here}:drop_everything",
                    "options": {"all": True}})
    assert chain.names == ["rename#1", "custom#2"]
    assert chain(_event()) is None
    with pytest.raises(FilterError, match=r"filter custom#1 failed at seqno 7 .*user bug"):
        _chain({"type": "custom", "path": f"{here}:boom"})(_event())
    with pytest.raises(ValueError, match="no_such"):
        _chain({"type": "custom", "path": f"{here}:no_such"})


def test_around_keeps_the_tracking_schema_out_of_reach() -> None:
    beat = RowChange(RowAction.INSERT, "tungsten_svc", "heartbeat",
                     column_specs=[ColumnSpec(1, "name", "VARCHAR")], column_values=[["M"]])
    event = _event()
    event.data.append(beat)
    out = _chain({"type": "mask", "columns": ["*"], "tables": ["*.*"],
                  "method": "hash"}).around("tungsten_svc")(event)
    assert out is not None
    assert out.data[-1] == beat
    assert _rows(out).column_values[0][1] != ROW[1]
