"""Index names (lower-case, valid, collisions refused) and document ids (one per key)."""

from __future__ import annotations

import itertools

import pytest

from consumers.elasticsearch.naming import (
    MAX_ID_BYTES,
    MAX_INDEX_BYTES,
    IndexNameError,
    document_id,
    index_name,
    index_owners,
    row_id,
)
from consumers.naming import NameCollision, UnfitName

T = "{schema}.{table}"


def test_index_names_are_lower_case_and_valid() -> None:
    assert index_name(T, "svc", "Shop", "Items") == "shop.items"
    assert index_name(T, "svc", "s", 'sel`ect "tbl" ü') == "s.sel`ect__tbl__ü"
    assert index_name(T, "svc", "s", "a\\b/c*d?e<f>g|h,i#j:k") == "s.a_b_c_d_e_f_g_h_i_j_k"
    assert index_name("cdc-{service}-{schema}-{table}", "Svc", "s", "t") == "cdc-svc-s-t"


def test_explicit_names_win_over_the_template() -> None:
    overrides = {"s.Items": "My Items"}
    assert index_name(T, "svc", "s", "Items", overrides) == "my_items"
    assert index_name(T, "svc", "s", "other", overrides) == "s.other"


@pytest.mark.parametrize("template", ["_{schema}.{table}", "-{table}", "+{table}"])
def test_names_elasticsearch_refuses_are_refused(template: str) -> None:
    with pytest.raises(IndexNameError, match="`indices`"):
        index_name(template, "svc", "s", "t")
    with pytest.raises(IndexNameError):
        index_name(T, "svc", "s", "t", {"s.t": ""})


def test_long_names_are_cut_with_a_hash() -> None:
    long_a = index_name(T, "svc", "s", "ü" * 200)
    long_b = index_name(T, "svc", "s", "ü" * 199 + "x")
    assert len(long_a.encode()) <= MAX_INDEX_BYTES and len(long_b.encode()) <= MAX_INDEX_BYTES
    assert long_a != long_b
    assert long_a == index_name(T, "svc", "s", "ü" * 200)  # deterministic
    reserved = index_name(T, "svc", "s", "ü" * 200, reserve=4)
    assert len((reserved + ".all").encode()) <= MAX_INDEX_BYTES


def test_a_second_table_on_one_index_is_refused() -> None:
    owners = index_owners()
    owners.claim("shop.items", "Shop.Items")
    owners.claim("shop.items", "Shop.Items")  # the same table again: fine
    with pytest.raises(NameCollision, match=r"Shop\.Items and shop\.items both map to "
                       r"index shop\.items.*`indices`") as caught:
        owners.claim(index_name(T, "svc", "shop", "items"), "shop.items")
    assert caught.value.owner == "Shop.Items"
    assert caught.value.other == "shop.items"
    owners.release("shop.items")
    owners.claim("shop.items", "shop.items")


def test_wildcard_overrides_and_strict_names() -> None:
    overrides = {"s.audit_*": "audit-{table}", "s.audit_x": "x-only"}
    assert index_name(T, "svc", "s", "audit_log", overrides) == "audit-audit_log"
    assert index_name(T, "svc", "s", "audit_x", overrides) == "x-only"  # exact key first
    assert index_name(T, "svc", "s", "items", policy="strict") == "s.items"
    with pytest.raises(UnfitName, match=r"lower-case.*names: strict"):
        index_name(T, "svc", "Shop", "items", policy="strict")


def test_document_ids() -> None:
    assert document_id([42]) == "42"
    assert document_id([-7]) == "-7"
    assert document_id([1.5]) == "1.5"
    assert document_id(["abc"]) == "abc"
    assert document_id(["ünï é"]) == "ünï é"
    assert document_id(["12.50"]) == "12.50"  # a DECIMAL key keeps its scale
    assert document_id([""]) == '[""]'
    assert document_id(["[1]"]) == '["[1]"]'
    assert document_id(["~x"]) == '["~x"]'
    assert document_id([None]) == "[null]"
    assert document_id([3, "x"]) == '[3,"x"]'
    assert document_id(["x", 3]) == '["x",3]'
    long = "é" * 300  # 600 bytes
    assert document_id([long]) == "~sha256:" + document_id([long])[8:]
    assert len(document_id([long]).encode()) <= MAX_ID_BYTES
    assert document_id(["x" * 512]) == "x" * 512


def test_document_ids_of_different_keys_differ() -> None:
    singles = [[v] for v in (0, 1, -1, 10, 1.0, 0.5, "", "0", "1", "[0]", '["0"]', "[]",
                             "~", "~sha256:", "a b", None, "null", "x" * 600, "x" * 601)]
    composites = [[a, b] for a, b in itertools.product((0, 1, "0", "", None), repeat=2)]
    ids = [document_id(k) for k in singles + composites]
    # Within one table a key column has one type: 1 and 1.0 never meet, nor 1 and "1".
    same_type_clash = {("1", "1"), ("0", "0")}
    clashes = {(a, b) for a, b in itertools.combinations(ids, 2) if a == b}
    assert clashes <= same_type_clash


def test_row_ids_hash_the_whole_row() -> None:
    a = row_id(["a", "b"], [1, None])
    assert a == row_id(["a", "b"], [1, None])
    assert a.startswith("~") and len(a) == 65
    assert a != row_id(["a", "b"], [1, ""])
    assert a != row_id(["a", "c"], [1, None])
    assert a != row_id(["a", "b"], [None, 1])
    assert row_id(["c"], [-0.0]) != row_id(["c"], [0.0])
