"""Bad input: documents the server refuses, and two tables on one index name."""

from __future__ import annotations

from typing import Any

from .conftest import EsService


def _refused(svc: EsService, bad: int, *words: str) -> None:
    """The group stopped at ``bad`` with a message naming it and ``words``."""
    status = svc.wait_state("g", "OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == bad, status
    assert status["pendingErrorCode"] == "DATA", status
    assert status["appliedLastSeqno"] == bad - 1, status
    message = status["pendingExceptionMessage"]
    for word in (f"seqno {bad}", *words):
        assert word in message, (word, message)


def test_refused_documents_stop_at_their_seqno_and_skip_moves_past(make_service: Any) -> None:
    svc: EsService = make_service({"g": {}})
    svc.start()
    svc.create()
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.dates (id INT PRIMARY KEY, d DATE, qty INT, note VARCHAR(20))")
    svc.src(f"INSERT INTO {s}.dates VALUES (1, '2024-01-01', 1, 'one'), "
            f"(2, '2024-01-02', 2, 'two')")
    svc.wait_source_applied()

    # A zero date has no Elasticsearch date: with zero_dates: null (the default) the
    # document holds null there and the group goes on (it used to be refused and stop).
    svc.committed("SET SESSION sql_mode = ''",
                  f"INSERT INTO {s}.dates VALUES (3, '0000-00-00', 3, 'zero')",
                  f"UPDATE {s}.dates SET note = 'same seqno' WHERE id = 1")
    after = svc.committed(f"INSERT INTO {s}.dates VALUES (4, '2024-01-04', 4, 'four')")
    svc.wait_applied(after)

    # A column whose type changed so that its values no longer fit the mapping (an index
    # mapping cannot change a field's type): refused the same way, naming the column.
    svc.src(f"ALTER TABLE {s}.dates MODIFY qty VARCHAR(20)")
    fits = svc.committed(f"INSERT INTO {s}.dates VALUES (5, '2024-01-05', '5', 'five')")
    bad2 = svc.committed(f"INSERT INTO {s}.dates VALUES (6, '2024-01-06', 'many', 'six')")
    last = svc.committed(f"INSERT INTO {s}.dates VALUES (7, '2024-01-07', '7', 'seven')",
                         f"DELETE FROM {s}.dates WHERE id = 2")
    _refused(svc, bad2, f"table {s}.dates", "column qty", "document 6", "[long]")
    assert bad2 == fits + 1
    svc.trepctl("online", "--skip-seqno", str(bad2))
    svc.wait_applied(last)

    # Everything but the refused row is there, exactly.
    svc.es.indices.refresh(index=svc.index("g", "dates"))
    hits = svc.es.search(index=svc.index("g", "dates"), size=100)["hits"]["hits"]
    docs = {h["_id"]: h["_source"] for h in hits}
    assert docs == {
        "1": {"id": 1, "d": "2024-01-01", "qty": 1, "note": "same seqno"},
        "3": {"id": 3, "d": None, "qty": 3, "note": "zero"},
        "4": {"id": 4, "d": "2024-01-04", "qty": 4, "note": "four"},
        "5": {"id": 5, "d": "2024-01-05", "qty": "5", "note": "five"},
        "7": {"id": 7, "d": "2024-01-07", "qty": "7", "note": "seven"},
    }
    assert svc.status("g")["state"] == "ONLINE"


def test_two_tables_on_one_index_name_are_refused_until_named(make_service: Any) -> None:
    svc: EsService = make_service({"g": {}})
    svc.start()
    svc.create()
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.Items (id INT PRIMARY KEY, v INT)")
    svc.src(f"CREATE TABLE {s}.items (id INT PRIMARY KEY, v INT)")
    svc.src(f"INSERT INTO {s}.Items VALUES (1, 1)")
    svc.wait_source_applied()
    bad = svc.committed(f"INSERT INTO {s}.items VALUES (2, 2)")
    index = svc.index("g", "items")
    _refused(svc, bad, f"{s}.Items and {s}.items", f"index {index}", "`indices`")
    # The operator names the second table's index; a new process picks the change up.
    svc.stop()
    svc.groups["g"]["indices"] = {f"{s}.items": f"{s}.g.items_lower"}
    svc.configure()
    svc.start()
    svc.trepctl("online")
    svc.wait_source_applied()
    assert svc.ids("g", "Items") == {"1"}
    assert svc.ids("g", "items_lower") == {"2"}
