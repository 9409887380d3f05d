"""The one naming rule: overrides, store rules, hash shortening, strict names, collisions."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from consumers.changes.naming import TOPIC
from consumers.mongodb.naming import DATABASE, FERRETDB_DATABASE
from consumers.naming import (
    NameCollision,
    NameOwners,
    Overrides,
    StoreRule,
    UnfitName,
    check_template,
    shorten,
)
from consumers.sql.naming import SqlNames
from thl_topics.event import ColumnSpec

PG = sa.make_url("postgresql+psycopg://u@h/db").get_dialect()()
ORACLE = sa.make_url("oracle+oracledb://u@h/db").get_dialect()()
MARIADB = sa.make_url("mariadb+pymysql://u@h/").get_dialect()()


def test_an_exact_override_wins_then_the_first_pattern() -> None:
    overrides = Overrides({"shop.*": "a", "shop.items": "b", "*.items": "c"})
    assert overrides.match("shop", "items") == "b"
    assert overrides.match("shop", "orders") == "a"
    assert overrides.match("hr", "items") == "c"
    assert overrides.match("hr", "people") is None
    assert Overrides({"Shop.*": "x"}).match("shop", "t") is None  # case matters


def test_templates_are_checked_once_for_every_kind() -> None:
    assert check_template("{schema}.{table}", ("schema", "table"), "index") == "{schema}.{table}"
    with pytest.raises(ValueError, match=r"may use only \{schema\}, \{table\}"):
        check_template("{schema}.{tabel}", ("schema", "table"), "index")
    with pytest.raises(ValueError, match=r"needs \{table\}"):
        check_template("{schema}", ("schema", "table"), "index", required=("table",))
    with pytest.raises(ValueError, match="topic template"):
        check_template("{schema", ("schema",), "topic")
    with pytest.raises(ValueError, match="may use only"):
        check_template("{}", ("schema",), "topic")


def test_refused_characters_become_underscores() -> None:
    assert TOPIC.fit("svc.hold out.ü t") == "svc.hold_out.__t"
    assert TOPIC.problem("svc.hold out.t") is not None
    assert TOPIC.problem("svc.hold_out.t") is None
    assert DATABASE.fit("hold out") == "hold_out"
    assert DATABASE.fit("shopü") == "shopü"
    assert FERRETDB_DATABASE.fit("shopü") == "shop_"


def test_long_names_are_cut_at_a_character_with_a_hash_of_the_whole() -> None:
    long_a, long_b = "é" * 40, "é" * 39 + "x"
    a, b = shorten(long_a, 63), shorten(long_b, 63)
    assert a != b and len(a.encode()) <= 63 and len(b.encode()) <= 63
    assert a.startswith("é" * 26) and a[-9] == "_" and int(a[-8:], 16) >= 0
    assert shorten(long_a, 63) == a  # deterministic
    assert shorten("short", 63) == "short"
    assert len(TOPIC.fit("t" * 300).encode()) == 249
    assert len(TOPIC.fit("t" * 300, reserve=4)) == 245


def test_strict_names_stop_instead_of_mapping() -> None:
    with pytest.raises(UnfitName, match=r"table s\.t: a Kafka topic name cannot contain ' '.*"
                       r"names: strict.*'svc\.a_b'"):
        TOPIC.name("svc.a b", "strict", "table s.t")
    assert TOPIC.name("svc.a_b", "strict", "table s.t") == "svc.a_b"
    assert TOPIC.name("svc.a b", "map", "table s.t") == "svc.a_b"
    with pytest.raises(UnfitName, match="no mapping"):
        TOPIC.name("..", "map", "table s.t")


def test_a_second_owner_of_a_name_is_refused_and_claims_are_recorded() -> None:
    recorded: list[tuple[str, str]] = []
    owners = NameOwners("topic", "topics", record=lambda n, s: recorded.append((n, s)))
    owners.load({"svc.a_b.t": "a_b.t"})  # from an earlier session
    owners.claim("svc.a_b.t", "a_b.t")
    with pytest.raises(NameCollision, match=r"a_b\.t and a b\.t both map to topic svc\.a_b\.t"
                       r".*give a b\.t its own name in the target's `topics`"):
        owners.claim("svc.a_b.t", "a b.t")
    owners.claim("svc.x.t", "x.t")
    assert recorded == [("svc.x.t", "x.t")]  # only new claims are written
    assert owners.owner("svc.x.t") == "x.t"


def test_sql_identifiers_are_cut_where_the_target_is_shorter() -> None:
    long = "c" * 64
    specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, long, "INT")]
    pg = SqlNames(PG, "map")
    aliases = pg.aliases(specs)
    assert list(aliases) == [long] and len(aliases[long]) == 63
    assert pg.table("s", "t" * 70) == ("s", shorten("t" * 70, 63))
    assert SqlNames(MARIADB, "map").aliases(specs) == {}  # MariaDB holds every source name
    assert SqlNames(ORACLE, "map").aliases(specs) == {}  # 128 bytes
    assert SqlNames(ORACLE, "map").identifier('a"b', "column") == "a_b"
    with pytest.raises(UnfitName, match="at most 63 bytes, this one is 64"):
        SqlNames(PG, "strict").aliases(specs)


def test_a_rule_without_limits_on_characters_keeps_them() -> None:
    rule = StoreRule("PostgreSQL identifier", 63)
    assert rule.fit('sel`ect "tbl" ü') == 'sel`ect "tbl" ü'
    assert rule.fit("a\x00b") == "a_b"
