"""Pure logic of the warehouse applier: type map, staged text, staging lines, schema
compatibility, path-safe names, time travel by seqno, block limits."""

from __future__ import annotations

import copy
import csv
import io
import json
import logging
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from consumers.metrics import ConsumerMetrics
from consumers.warehouse.history import CommitRange, version_for_seqno
from consumers.warehouse.naming import path_safe
from consumers.warehouse.staging import (
    NULL_MARK,
    BatchStager,
    Segment,
    StagingArea,
    StagingError,
    coalesced,
)
from consumers.warehouse.types import (
    cast_expression,
    commit_time_text,
    holds,
    spark_type,
    staged_text,
    widens,
)
from consumers.zero_dates import ZeroDateTally
from thl_topics.event import (
    ColumnSpec,
    DataItem,
    RowAction,
    RowChange,
    Statement,
    ThlEvent,
    ThlValue,
)
from thl_topics.records import META_PROVISION
from thl_topics.values import incomplete_date


def _spec(kind: str, length: int = 0, scale: int = 0, unsigned: bool = False,
          key: bool = False) -> ColumnSpec:
    return ColumnSpec(1, "c", kind, length=length, scale=scale, unsigned=unsigned,
                      primary_key=key)


@pytest.mark.parametrize(("spec", "expected"), [
    (_spec("TINYINT"), "tinyint"), (_spec("TINYINT", unsigned=True), "smallint"),
    (_spec("INT", unsigned=True), "bigint"), (_spec("BIGINT", unsigned=True), "decimal(20,0)"),
    (_spec("BIT", 64), "decimal(20,0)"), (_spec("BIT", 9), "bigint"),
    (_spec("DECIMAL", 38, 10), "decimal(38,10)"), (_spec("DECIMAL", 65, 30), "string"),
    (_spec("DATETIME", scale=6), "timestamp_ntz"), (_spec("TIMESTAMP"), "timestamp"),
    (_spec("TIME"), "string"), (_spec("JSON"), "string"), (_spec("BLOB"), "binary"),
    (_spec("FLOAT"), "float"), (_spec("YEAR"), "smallint"), (_spec("SET"), "string"),
])
def test_type_map(spec: ColumnSpec, expected: str) -> None:
    assert spark_type(spec) == expected


def test_staged_text_keeps_values_exact() -> None:
    assert staged_text(_spec("BIGINT", unsigned=True), "18446744073709551615") == \
        "18446744073709551615"
    assert staged_text(_spec("BINARY", 4), b"\x00\x01") == "AAEAAA=="  # padded back to 4
    assert staged_text(_spec("VARBINARY"), b"") == ""
    assert staged_text(_spec("DOUBLE"), 0.1) == "0.1"
    assert staged_text(_spec("DATE"), "0000-00-00") is None
    assert staged_text(_spec("DATE"), "2024-00-00") is None  # partial: the same policy
    assert staged_text(_spec("DATETIME"), "2024-03-00 10:00:00") is None
    with pytest.raises(ValueError, match="zero date"):
        staged_text(_spec("DATE"), "2024-05-00", "error")
    with pytest.raises(ValueError, match="zero date"):
        staged_text(_spec("DATETIME"), "0000-00-00 00:00:00", "error")
    assert staged_text(_spec("VARCHAR"), None) is None
    assert cast_expression("c0", "timestamp") == "CAST(concat(c0, 'Z') AS TIMESTAMP)"
    assert cast_expression("c0", "binary") == "unbase64(c0)"


def test_staging_lines_follow_the_seeds_layout() -> None:
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "s", "VARCHAR")]
    stager = BatchStager(separator=",")
    stager.add(ThlEvent(7, 0, "src", "e", "sh", 1_700_000_000_000_000, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], [[1, 'a"b,c\nd'], [2, ""]]),
        RowChange(RowAction.UPDATE, "d", "t", specs, specs, [[3, None]], [[2, ""]])]))
    (seg,) = stager.segments
    assert (seg.low, seg.high, seg.key, seg.rows) == (7, 7, ["id"], 4)
    parsed = list(csv.reader(io.StringIO("\n".join(seg.lines) + "\n")))
    t = "2023-11-14 22:13:20.000000"
    assert parsed == [["I", "7", "0", t, "1", 'a"b,c\nd'], ["I", "7", "1", t, "2", ""],
                      ["UD", "7", "2", t, "2", ""], ["UI", "7", "3", t, "3", ""]]
    # NULL is an empty unquoted field, the empty string a quoted one.
    assert seg.lines[1].endswith(',""') and seg.lines[3].endswith(",")


@pytest.mark.parametrize(("separator", "quote_all"), [("\x01", False), (",", False),
                                                     (",", True)])
def test_staged_rows_equal_their_fields_one_by_one(separator: str, quote_all: bool) -> None:
    # Rows of only ints, floats, strings and NULLs take a shortcut (one join per row): each
    # line must be what the fields written one by one give.
    specs = [ColumnSpec(1, "id", "BIGINT", primary_key=True), ColumnSpec(2, "s", "VARCHAR"),
             ColumnSpec(3, "d", "DATETIME"), ColumnSpec(4, "f", "DOUBLE"),
             ColumnSpec(5, "t", "TIME")]
    rows: list[list[ThlValue]] = [
        [1, "plain ü", "2024-01-02 03:04:05.000006", 0.1, "-838:59:59"],
        [2, None, None, None, None], [3, "", "2024-01-02", 1e300, ""],
        [4, "a,b", "0000-00-00 00:00:00", float("nan"), "x\x01y"],
        [5, 'say "hi"', "2024-03-00 10:00:00", -0.0, "line\nbreak"],
        [6, "cr\r", 7, True, b"\x00"], [7, "\U0010fffd", "2024-05-06", 2, "\\"],
        [2**64 - 1, "x" * 1000, "9999-12-31 23:59:59.999999", float("inf"), "00:00:00"]]
    stager = BatchStager(separator=separator, quote_all=quote_all)
    stager.add(ThlEvent(3, 0, "src", "e", "sh", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], rows)]))
    (seg,) = stager.segments
    q = '"' if quote_all else ""
    head = f"{q}{separator}{q}3{q}{separator}{q}"
    tail = f"{q}{separator}{q}1970-01-01 00:00:00.000000{q}{separator}"
    expected = [f"{q}I{head}{i}{tail}" + separator.join(
        stager._field(spec, value, seg, 3) for spec, value in zip(specs, row, strict=True))
        for i, row in enumerate(rows)]
    assert seg.lines == expected
    assert seg.multiline  # a line break in a field: Spark reads the file whole


def test_a_binary_column_is_staged_field_by_field() -> None:
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "b", "BINARY",
                                                                      length=3)]
    stager = BatchStager(separator=",")
    stager.add(ThlEvent(1, 0, "s", "e", "", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], [[1, b"ab"], [2, b"\x01"]])]))
    assert [line.rsplit(",", 1)[1] for line in stager.segments[0].lines] == ["YWIA", "AQAA"]


def test_a_collapsed_segment_keeps_each_keys_last_operation_and_its_key_range(
        tmp_path: Path) -> None:
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "s", "VARCHAR")]
    stager = BatchStager(separator=",", collapse=True)
    stager.add(ThlEvent(7, 0, "src", "e", "sh", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], [[1, "a"], [2, "b"], [9, "x"]]),
        RowChange(RowAction.UPDATE, "d", "t", specs, specs, [[1, "a2"]], [[1, "a"]]),
        RowChange(RowAction.UPDATE, "d", "t", specs, specs, [[5, "moved"]], [[2, "b"]]),
        RowChange(RowAction.DELETE, "d", "t", [], specs, [], [[9, "x"]])]))
    stager.add(ThlEvent(8, 0, "src", "e", "sh", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], [[9, "back"]])]))
    (seg,) = stager.segments
    area = StagingArea(f"file://{tmp_path}", "svc", "g")
    lines = Path(area.write(seg, 0, None)[len("file://"):]).read_text().splitlines()
    kept = [(r[0], r[1], r[2], r[4], r[5]) for r in csv.reader(lines)]
    # What the MERGE's "last operation per key by (seqno, row)" keeps, in THL order; a
    # moved row's old key keeps its delete half.
    assert kept == [("UI", "7", "4", "1", "a2"), ("UD", "7", "5", "2", "b"),
                    ("UI", "7", "6", "5", "moved"), ("I", "8", "0", "9", "back")]
    assert seg.collapsed and seg.rows == 4 and seg.keys_between == (1, 9)
    # Staging files for an external loader keep every operation, and have no range.
    every = BatchStager(separator=",")
    every.add(ThlEvent(7, 0, "src", "e", "sh", 0, data=[
        RowChange(RowAction.UPDATE, "d", "t", specs, specs, [[1, "a2"]], [[1, "a"]])]))
    assert every.segments[0].rows == 2 and every.segments[0].keys_between is None


def test_a_collapsed_segment_with_a_text_key_has_no_range() -> None:
    specs = [ColumnSpec(1, "k", "VARCHAR", primary_key=True)]
    stager = BatchStager(collapse=True)
    stager.add(ThlEvent(1, 0, "s", "e", "", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], [["a"], ["b"]]),
        RowChange(RowAction.DELETE, "d", "t", [], specs, [], [["a"]])]))
    (seg,) = stager.segments
    assert seg.rows == 2 and seg.collapsed and seg.keys_between is None


def test_a_first_provisioned_chunk_starts_a_truncating_segment() -> None:
    specs = [ColumnSpec(1, "id", "INT", primary_key=True)]
    stager = BatchStager()
    stager.add(ThlEvent(4, 0, "s", "e", "", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", specs, [], [[1]])]))

    def chunk(seqno: int, number: int, rows: list[list[ThlValue]]) -> ThlEvent:
        marks = {"id": "r1", "table": ["d", "t"], "chunk": number, "first": number == 0,
                 "end": False, "rows": len(rows)}
        return ThlEvent(seqno, 0, "s", "e", "", 0, metadata={META_PROVISION: json.dumps(marks)},
                        data=[RowChange(RowAction.INSERT, "d", "t", specs, [], rows)])

    stager.add(chunk(5, 0, []))  # an empty source table still empties the target's
    stager.add(chunk(6, 1, [[2], [3]]))
    before, first = stager.segments
    assert (before.low, before.high, before.truncate) == (4, 4, False)
    assert (first.low, first.high, first.rows, first.truncate) == (5, 6, 2, True)
    # A later chunk of the same table is not a first one: it joins the open segment.
    assert len(stager.segments) == 2


def test_a_new_layout_starts_a_new_staging_file_and_rows_number_across_fragments() -> None:
    a = [ColumnSpec(1, "id", "INT", primary_key=True)]
    b = [*a, ColumnSpec(2, "x", "INT")]
    stager = BatchStager()
    stager.add(ThlEvent(1, 0, "s", "e", "", 0, fragno=0, last_frag=False, data=[
        RowChange(RowAction.INSERT, "d", "t", a, [], [[1], [2]])]))
    stager.add(ThlEvent(1, 0, "s", "e", "", 0, fragno=1, data=[
        RowChange(RowAction.INSERT, "d", "t", a, [], [[3]])]))
    stager.add(ThlEvent(2, 0, "s", "e", "", 0, data=[
        RowChange(RowAction.INSERT, "d", "t", b, [], [[4, 4]])]))
    first, second = stager.segments
    assert [line.split("\x01")[2] for line in first.lines] == ["0", "1", "2"]
    assert (first.low, first.high, second.low, second.high) == (1, 1, 2, 2)


def test_a_tables_flushes_in_one_block_are_one_segment_while_the_layout_holds(
        tmp_path: Path) -> None:
    a = [ColumnSpec(1, "id", "INT", primary_key=True)]
    b = [*a, ColumnSpec(2, "x", "INT")]
    area = StagingArea(f"file://{tmp_path}", "svc", "g")
    written: list[Segment] = []

    def flush(stager: BatchStager, *events: ThlEvent) -> None:
        for event in events:
            stager.add(event)
        for seg in stager.segments:
            area.write(seg, len(written), None)
            written.append(seg)
        stager.clear()

    def ins(seqno: int, table: str, specs: list[ColumnSpec], rows: list[list[ThlValue]]
            ) -> ThlEvent:
        return ThlEvent(seqno, 0, "s", "e", "", 0, data=[
            RowChange(RowAction.INSERT, "d", table, specs, [], rows)])

    stager = BatchStager(collapse=True)
    flush(stager, ins(1, "t", a, [[1], [2]]), ins(2, "u", a, [[1]]))
    flush(stager, ins(3, "t", a, [[3], [9]]), ins(4, "u", a, [[1]]))
    flush(stager, ins(5, "t", b, [[4, 4]]), ins(6, "t", a, [[5]]))
    t, u, t_b, t_a = coalesced(written)
    # t's first two flushes: one segment, both files, keys disjoint (still collapsed).
    assert (t.low, t.high, t.seqnos, t.rows) == (1, 3, [1, 3], 4)
    assert t.files == [written[0].uri, written[2].uri] and t.uri == written[0].uri
    assert t.collapsed and t.keys_between == (1, 9)
    # u's key 1 is in both files: Spark must rank its operations.
    assert u.files == [written[1].uri, written[3].uri] and not u.collapsed
    assert u.keys_between is None
    # A new layout starts a run, and the old layout after it another.
    assert (t_b.files, t_a.files) == ([written[4].uri], [written[5].uri])
    # The written segments themselves are left as they were (their files are removed
    # one by one once the block commits).
    assert written[0].files == [written[0].uri] and written[0].high == 1


def test_consecutive_row_changes_of_a_table_are_staged_as_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An OLTP transaction's single-row statements are a row change each: a run of them
    # (same table, action and specs) goes through the line writer once, with the lines
    # staging them one by one gives, and the event itself is left as it was.
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "s", "VARCHAR")]
    items: list[DataItem] = [
        *(RowChange(RowAction.INSERT, "d", "t", specs, [], [[i, f"v{i}"]]) for i in range(3)),
        Statement("SET @x = 1"),  # not staged: the run goes on
        RowChange(RowAction.INSERT, "d", "t", specs, [], [[3, "w"], [4, "x"]]),
        RowChange(RowAction.UPDATE, "d", "t", specs, specs, [[1, "v1b"]], [[1, "v1"]]),
        RowChange(RowAction.UPDATE, "d", "t", specs, specs, [[2, "v2b"]], [[2, "v2"]]),
        RowChange(RowAction.INSERT, "d", "u", specs, [], [[1, "u"]]),
        RowChange(RowAction.DELETE, "d", "t", [], specs, [], [[0, "v0"]]),
        RowChange(RowAction.DELETE, "d", "t", [], specs, [], [[4, "x"]])]
    event = ThlEvent(9, 0, "s", "e", "", 1_700_000_000_000_000, data=items)
    before = copy.deepcopy(event)
    runs: list[int] = []
    joined = BatchStager(collapse=True)
    change = BatchStager._change

    def counted(self: BatchStager, item: RowChange, *args: Any) -> None:
        runs.append(item.row_count)
        change(self, item, *args)

    monkeypatch.setattr(BatchStager, "_change", counted)
    joined.add(event)
    monkeypatch.undo()
    one_by_one = BatchStager(collapse=True)
    for item in items:
        if isinstance(item, RowChange):
            one_by_one._change(item, 9, commit_time_text(event.tstamp))
    assert runs == [5, 2, 1, 2]
    assert [(s.table, s.lines, s.rows, s.keys_between) for s in joined.segments] == \
        [(s.table, s.lines, s.rows, s.keys_between) for s in one_by_one.segments]
    assert joined.rows == one_by_one.rows == 12
    assert event == before


def test_a_value_equal_to_the_null_marker_is_refused() -> None:
    specs = [ColumnSpec(1, "s", "VARCHAR", primary_key=True)]
    with pytest.raises(StagingError, match="NULL marker"):
        BatchStager().add(ThlEvent(1, 0, "s", "e", "", 0, data=[
            RowChange(RowAction.INSERT, "d", "t", specs, [], [[NULL_MARK]])]))


@pytest.mark.parametrize(("existing", "incoming", "ok"), [
    ("bigint", "int", True), ("int", "bigint", False), ("decimal(12,2)", "decimal(10,2)", True),
    ("decimal(10,2)", "decimal(10,3)", False), ("decimal(20,0)", "bigint", True),
    ("double", "float", True), ("string", "int", True), ("string", "binary", False),
    ("timestamp_ntz", "date", True), ("date", "timestamp_ntz", False),
])
def test_which_delta_column_holds_a_changed_type(existing: str, incoming: str,
                                                 ok: bool) -> None:
    assert holds(existing, incoming) is ok


@pytest.mark.parametrize(("existing", "incoming", "ok"), [
    ("int", "bigint", True), ("tinyint", "int", True), ("bigint", "int", False),
    ("float", "double", True), ("int", "double", True), ("bigint", "double", False),
    ("int", "decimal(12,0)", True), ("int", "decimal(9,0)", False),
    ("decimal(10,2)", "decimal(12,2)", True), ("decimal(10,2)", "decimal(10,3)", False),
    ("date", "timestamp_ntz", True), ("int", "string", False), ("int", "int", False),
])
def test_which_source_widening_delta_can_follow(existing: str, incoming: str,
                                                ok: bool) -> None:
    assert widens(existing, incoming) is ok


def test_path_safe_names_are_injective() -> None:
    assert path_safe("src_c12") == "src_c12"
    names = ['sel`ect "tbl" ü', "a-b", "a/b", "a b", "a_2db", "-"]
    assert len({path_safe(n) for n in names}) == len(names)
    assert all("/" not in path_safe(n) and " " not in path_safe(n) for n in names)


def test_version_for_seqno() -> None:
    commits = [CommitRange(1, 0, 0, 9, "MERGE"), CommitRange(2, 0, 10, 20, "MERGE"),
               CommitRange(3, 0, 30, 40, "MERGE")]
    assert version_for_seqno(commits, 25) is not None
    found = version_for_seqno(commits, 25)
    assert found is not None and found.commit.version == 2 and found.exact
    inside = version_for_seqno(commits, 15)
    assert inside is not None and inside.commit.version == 2 and not inside.exact
    assert "version 1 is the table as of seqno 9" in inside.describe()
    assert version_for_seqno([CommitRange(1, 0, 5, 9, "MERGE")], 3) is None
    # After a replay (generation 1) the newest generation covering the seqno wins.
    replayed = [*commits, CommitRange(4, 1, 0, 40, "MERGE")]
    again = version_for_seqno(replayed, 25)
    assert again is not None and again.commit.version == 4 and not again.exact


def _random_value(rng: random.Random, kind: str) -> ThlValue:
    """A value of a column of ``kind``, often one that needs the field-by-field path."""
    roll = rng.random()
    if roll < 0.15:
        return None
    if kind == "BIGINT":
        ints: list[ThlValue] = [0, -1, 2**63 - 1, 2**64 - 1, rng.randint(-10**6, 10**6),
                                True, "7"]
        return rng.choice(ints)
    if kind == "DOUBLE":
        return rng.choice([0.1, -0.0, 1e300, float("inf"), float("nan"), 2, rng.random()])
    if kind == "DATETIME":
        dates: list[ThlValue] = ["2024-01-02 03:04:05.000006", "0000-00-00 00:00:00",
                                 "2024-03-00 10:00:00", "2024-00-01", "9999-12-31", "", 7,
                                 "2024-01-02"]
        return rng.choice(dates)
    if kind == "BINARY":
        return rng.choice([b"\x00\x01", b"", b"\xff,\n"])
    alphabet = 'ab,;\x01"\n\r ü€\U0001f600\U0010fffd\\'
    return "".join(rng.choice(alphabet) if rng.random() < 0.2 else rng.choice("xyz")
                   for _ in range(rng.randint(0, 6)))


@pytest.mark.parametrize(("separator", "quote_all", "collapse"),
                         [("\x01", False, True), (",", False, True), (",", True, False),
                          ("\x01", False, False)])
def test_random_row_changes_stage_as_their_fields_one_by_one(
        separator: str, quote_all: bool, collapse: bool) -> None:
    # The compiled line writer (consumers/warehouse/_stage_lines.pyx) against the field-by-
    # field path, and collapsing against a model: each key keeps its last line only.
    rng = random.Random(f"{separator}{quote_all}{collapse}")
    kinds = ["BIGINT", "VARCHAR", "DATETIME", "DOUBLE"]
    for binary in (False, True):
        specs = [ColumnSpec(i + 1, f"c{i}", kind, primary_key=i == 0)
                 for i, kind in enumerate(kinds + (["BINARY"] if binary else []))]
        tally = ZeroDateTally("wh", ConsumerMetrics(CollectorRegistry(), "s", "g"),
                              logging.getLogger("test.stage"))
        stager = BatchStager(separator=separator, quote_all=quote_all, collapse=collapse,
                             zeros=tally)
        expected: list[tuple[tuple[ThlValue, ...], str]] = []
        zeros: Counter[tuple[str, str]] = Counter()
        for seqno in range(40):
            changes: list[DataItem] = []
            row = 0  # rows are numbered within their seqno
            for _ in range(rng.randint(1, 4)):
                action = rng.choice(list(RowAction))
                count = rng.randint(1, 3)
                rows = [[rng.randint(0, 12), *(_random_value(rng, s.type) for s in specs[1:])]
                        for _ in range(count * (2 if action is RowAction.UPDATE else 1))]
                before, after = rows[:count], rows[count:] or rows
                if action is RowAction.INSERT:
                    change = RowChange(action, "d", "t", specs, [], after)
                    images = [("I", r) for r in after]
                elif action is RowAction.DELETE:
                    change = RowChange(action, "d", "t", [], specs, [], before)
                    images = [("D", r) for r in before]
                else:
                    change = RowChange(action, "d", "t", specs, specs, after, before)
                    images = [i for b, a in zip(before, after, strict=True)
                              for i in (("UD", b), ("UI", a))]
                changes.append(change)
                for op, values in images:
                    expected.append(((values[0],), _reference_line(
                        stager, specs, op, seqno, row, values, separator, quote_all)))
                    if op in ("I", "UI") and isinstance(values[2], str) \
                            and incomplete_date(values[2]):
                        zeros["d.t", "c2"] += 1
                    row += 1
            try:
                stager.add(ThlEvent(seqno, 0, "src", "e", "sh", 0, data=changes))
            except StagingError:
                pytest.fail("no value of these rows is refused")
        (seg,) = stager.segments
        if collapse:
            last = {key: i for i, (key, _) in enumerate(expected)}
            lines = [line for i, (key, line) in enumerate(expected) if last[key] == i]
            keys = [int(str(k)) for (k,) in last]
            assert seg.keys_between == (min(keys), max(keys))
        else:
            lines = [line for _, line in expected]
        assert [line for line in seg.lines if line] == lines
        assert seg.rows == len(lines) and stager.rows == len(expected)
        assert tally.take() == zeros


def _reference_line(stager: BatchStager, specs: list[ColumnSpec], op: str, seqno: int,
                    row: int, values: list[ThlValue], sep: str, quote_all: bool) -> str:
    q = '"' if quote_all else ""
    seg = Segment("d", "t", specs)
    fields = sep.join(stager._field(spec, value, seg, seqno)
                      for spec, value in zip(specs, values, strict=True))
    return f"{q}{op}{q}{sep}{q}{seqno}{q}{sep}{q}{row}{q}{sep}{q}1970-01-01 00:00:00.000000" \
           f"{q}{sep}{fields}"
