"""Statement templates and the literals written without the driver (the driver's own
literals are checked against the real servers in tests/integration/consumers)."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pymysql
import pytest
from pymysql.converters import escape_string

from consumers.sql import render
from consumers.sql.render import Template, mysql_literal, postgresql_literal

#: The driver literals themselves (the tests of the fast paths replace them).
PYMYSQL_LITERAL = render._pymysql_literal


def test_named_template_renders_each_parameter_where_it_stands() -> None:
    t = Template("UPDATE t SET a=%(v0)s::INTEGER, b=%(v1)s WHERE id = %(k0)s AND p LIKE '5%%'")
    assert t.names == ("v0", "v1", "k0")
    text = t.render({"k0": "K", "v0": "A", "v1": "B"}, lambda v: f"<{v}>")
    assert text == "UPDATE t SET a=<A>::INTEGER, b=<B> WHERE id = <K> AND p LIKE '5%'"


def test_positional_template_takes_rows_by_position_or_by_the_compiled_order() -> None:
    sql = "(%s, %s, '%%s')"
    assert Template(sql).render(["x", "y"], str) == "(x, y, '%s')"
    named = Template(sql, ("v1", "v0"))
    assert named.names == ("v1", "v0")
    assert named.render({"v0": 0, "v1": 1}, str) == "(1, 0, '%s')"


def test_template_without_parameters() -> None:
    assert Template("SELECT 1").render({}, str) == "SELECT 1"


@pytest.mark.parametrize("sql", ["(%(v0)s)", "(%(v0)s, %(v1)s, '%%')", "SELECT 1"])
def test_a_batch_renders_as_its_rows_one_by_one(sql: str) -> None:
    t = Template(sql)
    rows = [{"v0": i, "v1": f"s{i}"} for i in range(5)]
    assert t.render_all(rows, repr) == [t.render(r, repr) for r in rows]
    assert t.render_all(rows[:1], repr)[0] == sql.replace("%(v0)s", "0").replace(
        "%(v1)s", "'s0'").replace("%%", "%")



@pytest.mark.parametrize("sql", ["(%(v0)s, %(v1)s, %(v2)s)", "(%(v0)s, %(v2)s)",
                                 "(%(v2)s, %(v0)s, '%%')", "(%(v1)s)"])
def test_images_render_as_their_bound_parameters(sql: str) -> None:
    """Collapsed rows are rendered from the images themselves: the same text as their
    parameters bound by name, with every column in order and with some left out (a
    generated column) or in another order."""
    t = Template(sql)
    images = [[i, f"s{i}", None if i % 2 else i * 1.5] for i in range(5)]
    by_name = [{f"v{at}": value for at, value in enumerate(row)} for row in images]
    positional = t.by_position(lambda name: int(name[1:]))
    assert positional.render_images(images, repr) == t.render_all(by_name, repr)
    assert positional.render_images([], repr) == []


class _Info:
    def __init__(self, conforming: str | None) -> None:
        self.conforming = conforming

    def parameter_status(self, name: str) -> str | None:
        assert name == "standard_conforming_strings"
        return self.conforming


class _Connection:
    def __init__(self, conforming: str | None = "on", no_backslash: bool = False) -> None:
        self.info = _Info(conforming)
        self.no_backslash = no_backslash

    def escape_string(self, text: str) -> str:
        return text.replace("'", "''") if self.no_backslash else \
            text.replace("\\", "\\\\").replace("'", "\\'")


class _Cursor:
    """What the literal functions use of a driver's cursor."""

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection


@pytest.fixture(autouse=True)
def driver(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The values left to the driver's literal, which here marks its output."""
    left: list[Any] = []

    def made(_cursor_or_connection: object) -> Callable[[object], str]:
        def literal(value: object) -> str:
            left.append(value)
            return f"driver({value!r})"
        return literal

    monkeypatch.setattr(render, "_psycopg_literal", made)
    monkeypatch.setattr(render, "_pymysql_literal", made)
    return left


def test_postgresql_literals_written_here_and_by_the_driver(driver: list[Any]) -> None:
    cursor = _Cursor(_Connection("on"))
    literal = postgresql_literal(cursor)
    assert literal(None) == "NULL"
    assert literal(0) == "0"
    assert literal(12345678901234567890123) == "12345678901234567890123"
    assert literal(-5) == " -5"  # psycopg's form: "- -5" never becomes a comment
    assert literal("it's é😀\n") == "'it''s é😀\n'"
    assert literal("") == "''"
    assert driver == []
    # A backslash (the E'' form), U+0000 (an error), bool, Decimal, bytes: the driver's.
    for value in ("back\\slash", "nul\x00", True, Decimal("1.50"), b"\x00", 1.5):
        assert literal(value) == f"driver({value!r})"
    assert driver == ["back\\slash", "nul\x00", True, Decimal("1.50"), b"\x00", 1.5]


@pytest.mark.parametrize("conforming", ["off", None])
def test_postgresql_without_standard_conforming_strings_leaves_every_value_to_the_driver(
        conforming: str | None) -> None:
    cursor = _Cursor(_Connection(conforming))
    literal = postgresql_literal(cursor)
    assert [literal(v) for v in (None, 1, "a")] == ["driver(None)", "driver(1)", "driver('a')"]


@pytest.mark.parametrize("no_backslash", [False, True])
def test_mysql_literals_escape_strings_as_the_connection_does(no_backslash: bool) -> None:
    cursor = _Cursor(_Connection(no_backslash=no_backslash))
    literal = mysql_literal(cursor)
    assert literal(None) == "NULL"
    assert literal(-5) == "-5"
    expected = "'it''s \\'" if no_backslash else "'it\\'s \\\\'"
    assert literal("it's \\") == expected
    assert literal(True) == "driver(True)"
    assert literal(b"\x00") == "driver(b'\\x00')"


class _PyMySQLConnection(_Connection):
    """PyMySQL's own ``Connection.escape_string``: its table of escapes, or quotes doubled
    under NO_BACKSLASH_ESCAPES."""

    def escape_string(self, text: str) -> str:
        return text.replace("'", "''") if self.no_backslash else escape_string(text)


@pytest.mark.parametrize("no_backslash", [False, True])
def test_mysql_string_literals_equal_pymysqls_escaping_for_every_special_character(
        no_backslash: bool) -> None:
    literal = mysql_literal(_Cursor(_PyMySQLConnection(no_backslash=no_backslash)))
    escape = _PyMySQLConnection(no_backslash=no_backslash).escape_string
    rng = random.Random(33)
    alphabet = ["a", "Z", "0", " ", "-", "é", "字", "\U0001f600", "%", "`", "\t",
                *"'\\\"\n\r\x00\x1a"]
    texts = ["", "plain", *alphabet] + ["".join(rng.choice(alphabet) for _ in range(
        rng.randint(1, 40))) for _ in range(2000)]
    for text in texts:
        assert literal(text) == "'" + escape(text) + "'", repr(text)


def _cursors() -> list[tuple[str, _Cursor]]:
    """A cursor of each dialect and quoting mode the compiled rendering serves."""
    return [("mysql", _Cursor(_PyMySQLConnection(no_backslash=False))),
            ("mysql", _Cursor(_PyMySQLConnection(no_backslash=True))),
            ("postgresql", _Cursor(_Connection("on")))]


def test_strings_without_a_special_character_are_their_literal_quoted() -> None:
    """What the compiled rendering writes itself: every character (ASCII, and wider ones)
    that is not in the dialect's ``special`` leaves a string as it is, in quotes."""
    for dialect, cursor in _cursors():
        literal, special = render.literals(cursor, dialect)
        assert special is not None
        for c in [*map(chr, range(128)), "é", "字", "\U0001f600"]:
            if c not in special:
                text = f"a{c}b"
                assert literal(text) == f"'{text}'", (dialect, c)
    assert render.literals(_Cursor(_Connection("off")), "postgresql")[1] is None


def test_compiled_images_equal_the_python_path(driver: list[Any]) -> None:
    """Random rows of every kind of value (strings of 1-, 2- and 4-byte characters with
    and without special ones, negative and 80-bit integers, bool, Decimal, bytes, floats,
    NULLs), through templates taking every column in order, some, or in another order."""
    rng = random.Random(5)
    alphabet = ["a", " ", "é", "字", "\U0001f600", "%", *"'\\\"\n\r\x00\x1a"]
    values: list[Callable[[], object]] = [
        lambda: None, lambda: rng.randint(-10, 10), lambda: rng.getrandbits(80),
        lambda: -rng.getrandbits(80), lambda: True, lambda: Decimal("1.50"),
        lambda: b"x\x00", lambda: rng.random(),
        lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))),
        lambda: "".join(rng.choice("abc xyz") for _ in range(rng.randint(0, 200)))]
    rows = [[rng.choice(values)() for _ in range(4)] for _ in range(3000)]
    for sql in ("(%(v0)s, %(v1)s, %(v2)s, %(v3)s)", "(%(v3)s, 'x%%', %(v1)s)", "(%(v2)s)"):
        t = Template(sql).by_position(lambda name: int(name[1:]))
        for dialect, cursor in _cursors():
            literal, special = render.literals(cursor, dialect)
            compiled = t.render_images(rows, literal, special)
            driver.clear()
            assert compiled == t.render_images(rows, literal), (sql, dialect)
            assert driver, "no value was left to the driver's literal"


def test_strings_of_utf8_text_columns_are_their_utf8_bytes_in_hexadecimal() -> None:
    """Where a value is marked 4 (utf8mb4) every string is ``X'<UTF-8 bytes>'``, escapes
    and the empty string included; 3 (utf8mb3) keeps the literal for a string with a
    character above U+FFFF; 0, a string that UTF-8 cannot hold (a lone surrogate) and every
    other value stay the literal's."""
    t = Template("(%(v0)s, %(v1)s, %(v2)s)").by_position(lambda name: int(name[1:]))
    literal = repr
    rows: list[list[object]] = [
        ["a€'\\", "漢", "é"], ["", "\U0001f600 x", "it's"], ["\ud800", None, 7],
        [None, -3, "plain"], ["\U0001f600", "\U0001f600", b"b"]]
    got = t.render_images(rows, literal, "'\\", (4, 3, 0))
    assert got == [
        "(X'61e282ac275c', X'e6bca2', 'é')",
        "(X'', " + repr("\U0001f600 x") + ", \"it's\")",
        "('\\ud800', NULL, 7)",
        "(NULL, -3, 'plain')",
        "(X'f09f9880', " + repr("\U0001f600") + ", b'b')"]
    assert t.render_images(rows, literal, "'\\", (0, 0, 0)) == \
        t.render_images(rows, literal, "'\\")
    with pytest.raises(ValueError, match="2 hex marks for 3 values"):
        t.render_images(rows, literal, "'", (4, 4))


@pytest.mark.parametrize("limit", [1, 60, 700, 1 << 20])
def test_statements_of_many_rows_are_their_rows_joined_within_the_limit(limit: int) -> None:
    """The compiled statements hold the rows' texts in order, joined by commas between
    the head and the tail, as many as fit ``limit`` characters (one at least), with and
    without hexadecimal strings."""
    rng = random.Random(7)
    alphabet = ["a", " ", "é", "\U0001f600", "'", "\\"]
    rows: list[list[object]] = [
        [rng.choice([None, rng.randint(0, 99), -1, Decimal("2.5"),
                     "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))])
         for _ in range(3)] for _ in range(400)]
    t = Template("(%(v2)s, %(v0)s, %(v1)s)").by_position(lambda name: int(name[1:]))
    for hexed in (None, (4, 0, 3)):
        texts = t.render_images(rows, repr, "'\\", hexed)
        got = t.render_statements(rows, repr, "'\\", hexed, limit, "INSERT x VALUES ",
                                  " ON y")
        assert [n for _, n in got] and sum(n for _, n in got) == len(rows)
        at = 0
        for sql, n in got:
            assert sql == "INSERT x VALUES " + ",".join(texts[at:at + n]) + " ON y"
            assert n == 1 or sum(len(x) + 1 for x in texts[at:at + n]) - 1 <= limit
            # The next row would not have fitted.
            if at + n < len(rows):
                assert sum(len(x) + 1 for x in texts[at:at + n + 1]) > limit
            at += n
        assert got == [("INSERT x VALUES " + text + " ON y", n)
                       for text, n in render.joined(texts, limit)]
    # Without a special set (every value the driver's), the same statements.
    assert t.render_statements(rows, repr, None, None, 700, "(", ")") == [
        ("(" + text + ")", n) for text, n in render.joined(t.render_images(rows, repr), 700)]


def test_pymysql_literals_equal_its_mogrify_for_the_types_it_encodes_directly() -> None:
    """Calendar types included, which are written here, not by PyMySQL's encoders."""
    # Strings and bytes depend on the server's quoting mode (checked against a real server
    # in tests/integration/consumers/test_sql_render.py); these do not.
    conn = pymysql.connect(defer_connect=True)
    literal = PYMYSQL_LITERAL(conn)
    values: list[object] = [
        None, 0, -5, 2**64 - 1, True, False, 1.5, -0.0, 1e300, Decimal("-0.000001"),
        Decimal("12345678901234567890.123456789"), Decimal("1E+5"),
        dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(1, 1, 1),
        dt.datetime(2024, 1, 2, 3, 4, 5, 60, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        dt.time(0, 0), dt.time(23, 59, 59, 1), dt.time(1, 2, 3, tzinfo=dt.UTC),
        dt.time(1, 2, 3, 400000, tzinfo=dt.UTC),
        dt.timedelta(hours=-838, seconds=1), dt.timedelta(microseconds=7),
        (1, "a"), [Decimal("1.5"), None], {2, 3}]
    cursor = conn.cursor()
    for value in values:
        assert literal(value) == cursor.mogrify("%s", (value,)), value


@pytest.mark.parametrize("binary_prefix", [False, True])
@pytest.mark.parametrize("no_backslash", [False, True])
def test_statements_as_bytes_equal_their_text_encoded(
        no_backslash: bool, binary_prefix: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``render_bytes`` with ``mysql_literal_parts`` (values of many MiB) writes exactly the
    bytes of the text path (``mysql_literal``, PyMySQL's own escaping of strings and bytes)
    encoded as PyMySQL encodes a query: every byte value, every special character, strings
    of 1- to 4-byte characters, and the other types the driver writes."""
    monkeypatch.setattr(render, "_pymysql_literal", PYMYSQL_LITERAL)  # the real driver's
    conn = pymysql.connect(defer_connect=True, charset="utf8mb4", binary_prefix=binary_prefix)
    # What the server's answers set on a connected one (a deferred connection has none).
    conn.server_status = (  # type: ignore[attr-defined]
        pymysql.constants.SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash
        else 0)
    cursor = conn.cursor()
    literal, parts = mysql_literal(cursor), render.mysql_literal_parts(cursor)
    template = Template("UPDATE `t` SET `b`=%s, `n`=%s WHERE `id` = %s AND 100%% = 100",
                        ["b", "n", "id"])
    rng = random.Random(7)
    alphabet = ["a", " ", "é", "字", "\U0001f600", "%", *"'\\\"\n\r\x00\x1a"]
    values: list[object] = [
        b"", bytes(range(256)), bytes(range(256)) * 3, "", "plain",
        *["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(300)],
        *[rng.randbytes(rng.randint(1, 300)) for _ in range(300)],
        bytearray(b"a'\\\x00"), None, 7, Decimal("1.50"), dt.datetime(2024, 1, 2, 3, 4, 5)]
    for value in values:
        params = {"b": value, "n": "it's", "id": -3}
        expected = template.render(params, literal).encode(conn.encoding, "surrogateescape")
        assert render.render_bytes(template, params, parts, conn.encoding) == expected, value
    around = ("INSERT INTO `t` (`b`) VALUES ", " ON DUPLICATE KEY UPDATE `b` = VALUES(`b`)")
    row = Template("(%s)", ["b"])
    assert render.render_bytes(row, {"b": b"x'"}, parts, conn.encoding, around) == (
        around[0] + row.render({"b": b"x'"}, literal) + around[1]).encode(conn.encoding,
                                                                          "surrogateescape")
