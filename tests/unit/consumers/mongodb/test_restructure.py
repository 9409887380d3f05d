"""The pure parts of following renamed key columns on MongoDB (``restructure``)."""

from __future__ import annotations

from consumers.mongodb.restructure import renamed_document, renamed_id


def test_a_composite_id_keeps_the_renamed_field_in_its_place() -> None:
    assert list(renamed_id({"b": "x", "a": 1, "c": 2}, "a", "n").items()) == [
        ("b", "x"), ("n", 1), ("c", 2)]


def test_an_id_without_the_field_is_unchanged() -> None:
    assert renamed_id(5, "a", "n") == 5
    assert renamed_id({"b": "x"}, "a", "n") == {"b": "x"}


def test_a_document_is_renamed_in_its_id_and_its_fields_in_order() -> None:
    doc = {"_id": {"b": "x", "a": 1}, "_seqno": 3, "b": "x", "a": 1, "v": "one"}
    assert list(renamed_document(doc, "a", "n").items()) == [
        ("_id", {"b": "x", "n": 1}), ("_seqno", 3), ("b", "x"), ("n", 1), ("v", "one")]


def test_a_tombstone_moves_to_the_new_id() -> None:
    tomb = {"_id": {"b": "y", "a": 2}, "_seqno": 2, "_deleted": True}
    assert renamed_document(tomb, "a", "n") == {"_id": {"b": "y", "n": 2}, "_seqno": 2,
                                                "_deleted": True}
