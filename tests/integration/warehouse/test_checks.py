"""Consistency checks on the warehouse: crafted check events (the source's digest of a key
range, as the extractor emits them) against what the Delta tables hold; the results land in
the Delta ``consistency`` table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from thl_topics.checksum import METHOD, range_digest
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.records import META_CHECK, encode_key

from ..sparks import connect_session
from .conftest import CraftedThl, delete, insert, spec, update
from .test_apply import TYPE_ROWS, TYPES

ITEM = [spec(1, "id", "INT", key=True), spec(2, "name", "VARCHAR", length=40)]
NAMED = [spec(1, "code", "VARCHAR", key=True, length=20), spec(2, "n", "BIGINT")]


def _check(crafted: CraftedThl, table: str, specs: list[ColumnSpec], rng: int,
           rows: Sequence[Sequence[ThlValue]], lo: list[ThlValue] | None = None,
           hi: list[ThlValue] | None = None) -> int:
    """Publish the check event of one range whose source rows are ``rows``."""
    count, digest = range_digest(specs, rows)
    marks = {"id": "req1", "table": ["shop", table], "range": rng, "limit": 5,
             "lo": encode_key(lo) if lo is not None else None,
             "hi": encode_key(hi) if hi is not None else None,
             "key": [c.name for c in specs if c.primary_key],
             "columns": [c.to_avro() for c in specs], "count": count, "digest": digest,
             "method": METHOD, "end": hi is None}
    return crafted.publish_event(metadata={META_CHECK: json.dumps(marks)})


def _results(crafted: CraftedThl) -> dict[tuple[str, int], dict[str, Any]]:
    rows = connect_session().read.format("delta").load(
        f"file://{crafted.location}/tungsten_{crafted.name}/consistency").collect()
    return {(r["tbl"], r["id"]): r.asDict() for r in rows}


def test_checked_ranges_are_equal_where_delta_holds_the_source_rows(
        crafted: CraftedThl) -> None:
    s = "shop"
    items: list[list[ThlValue]] = [[i, f"item {i} ü"] for i in range(1, 11)]
    named: list[list[ThlValue]] = [["a", 1], ["b é", 2], ["c", 9223372036854775807],
                                   ["d", -1], ["é", 5]]
    crafted.publish(insert(s, "items", ITEM, *items), insert(s, "types", TYPES, *TYPE_ROWS),
                    insert(s, "named", NAMED, *named))
    crafted.publish(update(s, "items", ITEM, [4, "item 4 ü"], [4, "four"]),
                    delete(s, "items", ITEM, [6, "item 6 ü"]))
    live = {r[0]: r for r in items if r[0] != 6} | {4: [4, "four"]}
    # An integer key range (pushed into Spark), the whole type matrix, a text key range
    # (compared in Python in the source's order) and a range changed on purpose.
    _check(crafted, "items", ITEM, 0, [live[i] for i in (4, 5, 7)], lo=[3], hi=[7])
    _check(crafted, "items", ITEM, 1, [live[i] for i in (8, 9, 10)], lo=[7])
    _check(crafted, "types", TYPES, 0, TYPE_ROWS)
    _check(crafted, "named", NAMED, 0, named[1:3], lo=["a"], hi=["c"])
    last = _check(crafted, "items", ITEM, 2, [[1, "item 1 ü"], [2, "not what delta has"]],
                  hi=[2])
    crafted.start()
    crafted.wait_applied(last)
    found = _results(crafted)
    for key in (("items", 0), ("items", 1), ("types", 0), ("named", 0)):
        row = found[key]
        assert (row["this_cnt"], row["this_crc"]) == (row["master_cnt"], row["master_crc"]), \
            (key, row)
        assert json.loads(row["result"])["equal"] is True and row["group_name"] == "w"
    different = found[("items", 2)]
    assert different["this_cnt"] == different["master_cnt"] == 2
    assert different["this_crc"] != different["master_crc"]
    assert found[("items", 0)]["this_cnt"] == 3 and found[("types", 0)]["this_cnt"] == 3
    assert found[("named", 0)]["row_offset"] == 0 and found[("items", 1)]["row_offset"] == 5
    assert found[("items", 2)]["seqno"] == last


def test_a_history_table_is_checked_as_its_live_rows(crafted: CraftedThl) -> None:
    crafted.configure(keyless="history")
    nokey = [spec(1, "a", "INT"), spec(2, "b", "VARCHAR", length=20)]
    s = "shop"
    crafted.publish(insert(s, "log", nokey, [1, "dup"], [1, "dup"], [2, None], [3, ""]))
    crafted.publish(update(s, "log", nokey, [1, "dup"], [1, "one"]))
    crafted.publish(delete(s, "log", nokey, [2, None]))
    live: list[list[ThlValue]] = [[1, "dup"], [1, "one"], [3, ""]]
    _check(crafted, "log", nokey, 0, live)
    # One duplicate too many on the source side: the multiset differs.
    last = _check(crafted, "log", nokey, 1, [*live, [1, "dup"]])
    crafted.start()
    crafted.wait_applied(last)
    found = _results(crafted)
    assert (found[("log", 0)]["this_cnt"], found[("log", 0)]["this_crc"]) == (
        3, found[("log", 0)]["master_crc"])
    assert found[("log", 1)]["this_cnt"] == 3 and found[("log", 1)]["master_cnt"] == 4


def test_a_table_the_warehouse_never_saw_is_empty_not_an_error(crafted: CraftedThl) -> None:
    crafted.publish(insert("shop", "items", ITEM, [1, "one"]))
    last = _check(crafted, "ghost", ITEM, 0, [[1, "x"]])
    crafted.start()
    crafted.wait_applied(last)
    row = _results(crafted)[("ghost", 0)]
    assert row["this_cnt"] == 0 and row["master_cnt"] == 1
