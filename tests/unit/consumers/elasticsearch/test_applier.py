"""The Elasticsearch applier's own logic, on a recording stand-in for the client: collapsing a
block, versions, the bulk and the position order, item outcomes, and the row counts of
tables without a key. (The real server: tests/integration/consumers/elasticsearch/.)"""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace
from typing import Any

import pytest

from consumers.elasticsearch import bulk as applier_module
from consumers.elasticsearch.applier import ElasticsearchApplier
from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.elasticsearch.documents import Counted as _Counted
from consumers.elasticsearch.types import (
    APPLIED_FRAGNO,
    APPLIED_SEQNO,
    DELETED,
    ROWS,
)
from consumers.errors import DataError, PositionConflict
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.registry import ApplierContext
from replicator.config import ServiceSettings
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

SPECS = [ColumnSpec(1, "id", "INT", primary_key=True, nullable=False),
         ColumnSpec(2, "name", "VARCHAR", length=40, charset="utf8mb4")]
NOKEY = [ColumnSpec(1, "a", "INT"), ColumnSpec(2, "b", "VARCHAR", charset="utf8mb4")]


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


class _Indices:
    def __init__(self) -> None:
        self.created: dict[str, dict[str, Any]] = {}
        self.mapping_updates: list[tuple[str, Any, Any]] = []

    def create(self, index: str, **kw: Any) -> _Answer:
        self.created[index] = kw
        return _Answer({"acknowledged": True})

    def put_mapping(self, index: str, properties: Any = None, meta: Any = None) -> _Answer:
        self.mapping_updates.append((index, properties, meta))
        return _Answer({"acknowledged": True})


class FakeEs:
    """Records requests; answers each bulk item with ``statuses`` (default 201)."""

    def __init__(self) -> None:
        self.indices = _Indices()
        self.cluster = SimpleNamespace(health=lambda **_k: _Answer({"status": "green"}))
        self.requests: list[tuple[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.docs: dict[str, dict[str, Any]] = {}
        self._seq_no = 0

    def bulk(self, operations: bytes, filter_path: str) -> _Answer:
        lines = [json.loads(line) for line in operations.decode().splitlines()]
        items: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        i = 0
        while i < len(lines):
            action, meta = next(iter(lines[i].items()))
            source = lines[i + 1] if action != "delete" else None
            items.append((action, meta, source))
            i += 1 if action == "delete" else 2
        self.requests.append(("bulk", items))
        answers = []
        for n, (action, _, _) in enumerate(items):
            answers.append({action: self.statuses[n] if n < len(self.statuses)
                            else {"status": 201}})
        self.statuses = self.statuses[len(items):]
        return _Answer({"errors": any(next(iter(a.values()))["status"] >= 300
                                      for a in answers), "items": answers})

    def index(self, index: str, id: str, document: dict[str, Any], **guard: Any) -> _Answer:
        self.requests.append(("position", (document, guard)))
        self._seq_no += 1
        return _Answer({"_seq_no": self._seq_no, "_primary_term": 1})

    def mget(self, index: str, ids: list[str], **kw: Any) -> _Answer:
        self.requests.append(("mget", ids))
        return _Answer({"docs": [self.docs.get(i, {"_id": i, "found": False}) for i in ids]})

    def bulks(self) -> list[list[tuple[str, dict[str, Any], dict[str, Any] | None]]]:
        return [r[1] for r in self.requests if r[0] == "bulk"]


def make(**settings: Any) -> tuple[ElasticsearchApplier, FakeEs]:
    cfg = ElasticsearchTarget(hosts=["http://127.0.0.1:9200"], **settings)
    applier = ElasticsearchApplier(cfg, ApplierContext(ServiceSettings(service="svc"), "g"))
    fake = FakeEs()
    applier._es = fake  # type: ignore[assignment]
    return applier, fake


def event(seqno: int, *changes: RowChange, fragno: int = 0, last: bool = True) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="src", event_id=f"bin.1:{seqno};0",
                    shard_id="s", tstamp=1_700_000_000_000_000, fragno=fragno,
                    last_frag=last, data=list(changes))


def rows(action: RowAction, *values: tuple[ThlValue, ...], before: Any = (),
         specs: list[ColumnSpec] = SPECS, table: str = "items") -> RowChange:
    after = [list(v) for v in values]
    return RowChange(action, "s", table,
                     column_specs=specs if after else [], key_specs=specs if before else [],
                     column_values=after, key_values=[list(b) for b in before])


def position(seqno: int) -> Position:
    return Position(seqno=seqno, epoch=0, event_id=f"bin.1:{seqno};0",
                    tstamp=1_700_000_000_000_000)


def test_a_block_collapses_to_the_last_write_per_document() -> None:
    applier, fake = make()
    applier.begin()
    applier.apply(event(
        5,
        rows(RowAction.INSERT, (1, "a"), (2, "b")),
        rows(RowAction.UPDATE, (1, "a2"), before=[(1, "a")]),
        # The key changes: 2 goes, 3 comes; then 2 is inserted again in the same seqno.
        rows(RowAction.UPDATE, (3, "b"), before=[(2, "b")]),
        rows(RowAction.INSERT, (2, "b2"))))
    applier.apply(event(6, rows(RowAction.DELETE, before=[(3, "b")])))
    assert fake.requests == []  # nothing is sent before the commit
    applier.commit(position(6))
    (bulk,) = fake.bulks()
    assert bulk == [
        ("index", {"_index": "s.items", "_id": "1", "version": 5, "version_type": "external"},
         {"id": 1, "name": "a2"}),
        ("index", {"_index": "s.items", "_id": "2", "version": 5, "version_type": "external"},
         {"id": 2, "name": "b2"}),
        ("delete", {"_index": "s.items", "_id": "3", "version": 6,
                    "version_type": "external"}, None),
    ]
    # Data first, then the position, created (nothing was stored).
    assert [r[0] for r in fake.requests] == ["bulk", "position"]
    doc, guard = fake.requests[-1][1]
    assert guard == {"op_type": "create"}
    assert doc["seqno"] == 6 and doc["eventid"] == "bin.1:6;0" and doc["group"] == "g"
    # The next position replaces exactly the one written.
    applier.begin()
    applier.apply(event(7, rows(RowAction.INSERT, (9, "x"))))
    applier.commit(position(7))
    assert fake.requests[-1][1][1] == {"if_seq_no": 1, "if_primary_term": 1}


def test_tombstones_and_document_fields() -> None:
    applier, fake = make(deletes="tombstone", document_fields=["source_table", "seqno",
                                                               "committime"])
    applier.begin()
    applier.apply(event(8, rows(RowAction.DELETE, before=[(4, "d")])))
    applier.commit(position(8))
    (bulk,) = fake.bulks()
    assert bulk == [("index", {"_index": "s.items.all", "_id": "4", "version": 8,
                               "version_type": "external"},
                     {"id": 4, "source_table": "items", "seqno": 8,
                      "committime": "2023-11-14T22:13:20.000000+00:00", DELETED: True})]
    created = fake.indices.created["s.items.all"]
    assert created["aliases"] == {"s.items": {"filter": {"bool": {"must_not": {
        "term": {DELETED: True}}}}}}
    assert created["mappings"]["dynamic"] == "strict"
    assert created["mappings"]["_meta"]["tungsten"]["table"] == "items"


def test_a_column_named_like_a_document_field_is_refused() -> None:
    applier, _ = make(document_fields=["seqno"])
    specs = [*SPECS, ColumnSpec(3, "seqno", "BIGINT")]
    applier.begin()
    with pytest.raises(DataError, match=r"column seqno of table s\.items") as caught:
        applier.apply(event(3, rows(RowAction.INSERT, (1, "a", 1), specs=specs)))
    assert caught.value.seqno == 3


def test_a_new_column_updates_the_mapping_first() -> None:
    applier, fake = make()
    applier.begin()
    applier.apply(event(1, rows(RowAction.INSERT, (1, "a"))))
    wider = [*SPECS, ColumnSpec(3, "added", "DATE")]
    applier.apply(event(2, rows(RowAction.INSERT, (2, "b", "2024-01-01"), specs=wider)))
    (index, properties, meta) = fake.indices.mapping_updates[-1]
    assert index == "s.items"
    assert properties == {"added": {"type": "date", "format": "yyyy-MM-dd",
                                    "meta": {"source_type": "DATE"}}}
    assert [c["name"] for c in meta["tungsten"]["columns"]] == ["id", "name", "added"]


def test_a_transaction_in_several_fragments_is_written_with_external_gte() -> None:
    applier, fake = make(bulk_max_bytes=64 * 1024)
    applier.begin()
    many = [(i, "x" * 100) for i in range(1000)]
    applier.apply(event(9, rows(RowAction.INSERT, *many), last=False))
    # Sent mid-seqno (the block holds more than bulk_max_bytes), in bulks of at most that.
    sent = fake.bulks()
    assert sum(len(b) for b in sent) == 1000 and len(sent) > 1
    assert {(m["version"], m["version_type"]) for b in sent for _, m, _ in b} == {
        (9, "external_gte")}
    applier.apply(event(9, rows(RowAction.UPDATE, (1, "later"), before=[(1, "x" * 100)]),
                        rows(RowAction.INSERT, (5000, "new")), fragno=1))
    applier.apply(event(10, rows(RowAction.UPDATE, (2, "next"), before=[(2, "x" * 100)])))
    applier.commit(position(10))
    last = fake.bulks()[-1]
    kinds = {meta["_id"]: (meta["version"], meta["version_type"], src)
             for _, meta, src in last}
    # Seqno 9's later fragment replaces what its first one sent (same version); a whole
    # seqno (10) is plain external.
    assert kinds == {"1": (9, "external_gte", {"id": 1, "name": "later"}),
                     "5000": (9, "external_gte", {"id": 5000, "name": "new"}),
                     "2": (10, "external", {"id": 2, "name": "next"})}


def test_item_outcomes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(applier_module, "time", SimpleNamespace(sleep=lambda _s: None))
    applier, fake = make()
    applier.begin()
    applier.apply(event(3, rows(RowAction.INSERT, (1, "a"), (2, "b"), (3, "c"))))
    fake.statuses = [
        {"status": 409, "error": {"type": "version_conflict_engine_exception"}},
        {"status": 429, "error": {"type": "es_rejected_execution_exception"}},
        {"status": 201},
        {"status": 201},  # the retried one
    ]
    applier.commit(position(3))
    first, second = fake.bulks()
    assert [meta["_id"] for _, meta, _ in first] == ["1", "2", "3"]
    assert [meta["_id"] for _, meta, _ in second] == ["2"]
    assert fake.requests[-1][0] == "position"

    applier.begin()
    applier.apply(event(4, rows(RowAction.INSERT, (4, "d"))))
    applier.apply(event(5, rows(RowAction.INSERT, (5, "e"))))
    fake.statuses = [{"status": 201}, {"status": 400, "error": {
        "type": "document_parsing_exception",
        "reason": "[1:6] failed to parse field [name] of type [text]"}}]
    with pytest.raises(DataError, match=r"refused document 5 of seqno 5 \(table s.items, "
                                        r"column name\)") as caught:
        applier.commit(position(5))
    assert caught.value.seqno == 5
    assert fake.requests[-1][0] == "bulk"  # no position after a refused document


def test_a_moved_position_is_a_conflict() -> None:
    applier, fake = make()
    applier._expected = (3, 1)

    def conflict(*_a: Any, **_k: Any) -> _Answer:
        from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
        from elasticsearch import ConflictError
        meta = ApiResponseMeta(409, "1.1", HttpHeaders(), 0.0, NodeConfig("http", "h", 1))
        raise ConflictError("version_conflict_engine_exception", meta, {})
    fake.index = conflict  # type: ignore[method-assign]
    fake.options = lambda **_k: fake  # type: ignore[attr-defined]
    fake.get = lambda **_k: _Answer({  # type: ignore[attr-defined]
        "found": True, "_seq_no": 9, "_primary_term": 1,
        "_source": {"seqno": 40, "epoch_number": 0, "eventid": "bin.1:40;0"}})
    applier.begin()
    with pytest.raises(PositionConflict, match="now at seqno 40"):
        applier.commit(position(12))


def test_heartbeats_go_with_the_data() -> None:
    applier, fake = make()
    applier.begin()
    now = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    applier.heartbeat(Heartbeat(id=1, name="hb", salt=7, seqno=2, event_id="e",
                                source_tstamp=now, target_tstamp=now, lag_millis=12))
    applier.commit(position(2))
    ((action, meta, source),) = fake.bulks()[0]
    assert (action, meta["_id"], meta["_index"]) == ("index", "heartbeat:g:1", "tungsten_svc")
    assert source is not None and source["lag_millis"] == 12 and source["name"] == "hb"


def _found(rows: int, seqno: int, fragno: int, deleted: bool = False) -> dict[str, Any]:
    source: dict[str, Any] = {ROWS: rows, APPLIED_SEQNO: seqno, APPLIED_FRAGNO: fragno}
    if deleted:
        source[DELETED] = True
    return {"found": True, "_seq_no": 17, "_primary_term": 2, "_source": source}


@pytest.mark.parametrize(("deletes", "deltas", "doc", "expected"), [
    # New rows: created with their count.
    ("hard", [(5, 0, 1), (5, 0, 1)], {"found": False}, ("create", 2, (5, 0))),
    # Seen again (a replay): nothing to write.
    ("hard", [(5, 0, 1), (5, 0, 1)], _found(2, 5, 0), None),
    # Part applied (a bulk went out before a crash): only what follows the marker counts.
    ("hard", [(5, 0, 1), (5, 1, 1), (6, 0, -1)], _found(1, 5, 0), ("index", 1, (6, 0))),
    # The last equal row goes.
    ("hard", [(7, 0, -1)], _found(1, 6, 0), ("delete", None, None)),
    ("tombstone", [(7, 0, -1)], _found(1, 6, 0), ("index", 0, (7, 0))),
    # A replay after the document's delete was forgotten: never below zero, nothing to do.
    ("hard", [(9, 0, -1)], {"found": False}, None),
    # A row inserted again after its tombstone.
    ("tombstone", [(8, 0, 1)], _found(0, 7, 0, deleted=True), ("index", 1, (8, 0))),
])
def test_rows_of_tables_without_a_key_are_counted_once(
        deletes: str, deltas: list[tuple[int, int, int]], doc: dict[str, Any],
        expected: tuple[str, int | None, tuple[int, int] | None] | None) -> None:
    applier, _ = make(deletes=deletes)
    table = applier._open_table("s", "nopk", NOKEY, 0)
    write = applier._counted_write(_Counted(table, "~abc", {"a": 1, "b": "x"}, deltas, 0),
                                   {"_id": "~abc", **doc})
    if expected is None:
        assert write is None
        return
    assert write is not None
    lines = [json.loads(line) for line in write.lines.decode().splitlines()]
    action, meta = next(iter(lines[0].items()))
    kind, count, marker = expected
    assert action == kind and write.versioned is False
    if doc.get("found"):
        assert (meta["if_seq_no"], meta["if_primary_term"]) == (17, 2)
    if kind == "delete":
        assert len(lines) == 1
        return
    source = lines[1]
    assert (source[ROWS], (source[APPLIED_SEQNO], source[APPLIED_FRAGNO])) == (count, marker)
    assert source.get(DELETED, False) is (count == 0)
    assert (source["a"], source["b"]) == (1, "x")


def test_equal_rows_share_one_counted_document() -> None:
    applier, fake = make()
    applier.begin()
    applier.apply(event(3, rows(RowAction.INSERT, (1, "x"), (1, "x"), (2, None),
                                specs=NOKEY, table="nopk")))
    applier.apply(event(4, rows(RowAction.UPDATE, (1, "y"), before=[(1, "x")],
                                specs=NOKEY, table="nopk")))
    applier.commit(position(4))
    mget, bulk = fake.requests[0], fake.bulks()[0]
    assert mget[0] == "mget" and len(mget[1]) == 3  # (1,x), (2,None), (1,y)
    counts = {(src["a"], src["b"]): src[ROWS] for _, _, src in bulk if src is not None}
    assert counts == {(1, "x"): 1, (2, None): 1, (1, "y"): 1}
    assert all(action == "create" for action, _, _ in bulk)
