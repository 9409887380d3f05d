"""Statement text with its values in it, rendered on the client as the driver would.

The SQL applier sends a block's statements as one text per round trip (``batches.py``),
so every row's values are rendered into SQL literals on the client. The drivers' own
``mogrify`` parses the statement and looks up an adapter for every value, every row: on
PostgreSQL that costs about 5 us a row of four columns, more than the rest of the row's
way through the applier. Here a statement is cut at its parameters once (``Template``)
and the common values (NULL, integers, strings) are written directly; every other value
is rendered by the driver's own adapter for its type, so its form (dates, bytes, JSON,
decimals, the driver's casts) stays the driver's. Not through ``mogrify`` itself: psycopg's
builds a new ``Transformer`` (adapter lookups and all) on every call, 3-5 us a value where
the adapter takes 0.5-2; PyMySQL's formats a query around the one value.
"""

from __future__ import annotations

import codecs
import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from pymysql import converters
from pymysql.constants import SERVER_STATUS

from consumers.sql._render_rows import render_images as _render_images
from consumers.sql._render_rows import render_joined as _render_joined

#: A parameter of a compiled statement: ``%(name)s`` (named) or ``%s`` (positional).
_PARAM = re.compile(r"%\((\w+)\)s|%s|%%")

Literal = Callable[[object], str]
"""A value as an SQL literal of one connection."""


class Template:
    """A statement's text cut at its parameters, rendered with each row's values."""

    __slots__ = ("form", "names", "pieces")

    def __init__(self, sql: str, order: Sequence[str] | None = None) -> None:
        """``sql``: the driver's text (``%(name)s`` or ``%s`` parameters, ``%%`` for %);
        ``order``: the names of its ``%s`` parameters, in order (else rows of a positional
        statement are sequences)."""
        pieces: list[str] = []
        names: list[str | int] = []
        text: list[str] = []
        at = position = 0
        for match in _PARAM.finditer(sql):
            text.append(sql[at:match.start()])
            at = match.end()
            if match.group(0) == "%%":
                text.append("%")
                continue
            pieces.append("".join(text))
            text = []
            if match.group(1) is not None:
                names.append(match.group(1))
            else:
                names.append(order[position] if order is not None else position)
            position += 1
        text.append(sql[at:])
        pieces.append("".join(text))
        #: Each parameter's name, or its position (positional style without ``order``).
        self.names: tuple[Any, ...] = tuple(names)
        #: The text before each parameter and after the last one.
        self.pieces = tuple(pieces)
        #: The same, as one %-format of the parameters' literals (one C call a row, not a
        #: loop).
        self.form = "%s".join(p.replace("%", "%%") for p in pieces)

    def render(self, params: Mapping[str, object] | Sequence[object], literal: Literal) -> str:
        """The text with ``params`` (a mapping by name, or a sequence by position) in it."""
        return self.form % tuple([literal(params[name]) for name in self.names])

    def render_all(self, rows: Iterable[Mapping[str, object]], literal: Literal) -> list[str]:
        """``render`` of each row (the rows of one batch: no method call per row)."""
        form, names = self.form, self.names
        return [form % tuple([literal(row[name]) for name in names]) for row in rows]

    def by_position(self, position: Callable[[str], int]) -> Template:
        """The same text taking sequences: each parameter at ``position(name)``."""
        other = Template.__new__(Template)
        other.form = self.form
        other.pieces = self.pieces
        other.names = tuple(position(name) for name in self.names)
        return other

    def render_images(self, rows: Sequence[Sequence[object]], literal: Literal,
                      special: str | None = None, hexed: tuple[int, ...] | None = None
                      ) -> list[str]:
        """``render_all`` of sequences (a ``by_position`` template), all of one width.
        ``special``: the characters that make a string ``literal``'s to write (``literals``);
        given, NULLs, integers and other strings are written by compiled code, and the
        strings of the values ``hexed`` marks (MariaDB/MySQL UTF-8 text columns: 4 or 3,
        ``TargetTable.utf8_text``) in hexadecimal."""
        if special is not None:
            return _render_images(self.pieces, rows, self.names, special, literal, hexed)
        form, names = self.form, self.names
        return [form % tuple([literal(row[at]) for at in names]) for row in rows]

    def render_statements(self, rows: Sequence[Sequence[object]], literal: Literal,
                          special: str | None, hexed: tuple[int, ...] | None, limit: int,
                          head: str, tail: str) -> list[tuple[str, int]]:
        """``render_images``' texts joined by commas between ``head`` and ``tail``: one
        statement per run of rows whose texts (a comma each) reach ``limit`` characters at
        most (one row at least), each with its number of rows."""
        if special is not None:
            return _render_joined(self.pieces, rows, self.names, special, literal, hexed,
                                  limit, head, tail)
        return [(head + text + tail, n)
                for text, n in joined(self.render_images(rows, literal), limit)]


def joined(texts: Iterable[str], limit: int) -> Iterator[tuple[str, int]]:
    """Rows' VALUES tuples joined by commas into texts of ``limit`` characters at most (one
    row at least), each with its number of rows."""
    parts: list[str] = []
    size = 0
    for text in texts:
        if parts and size + len(text) > limit:
            yield ",".join(parts), len(parts)
            parts, size = [], 0
        parts.append(text)
        size += len(text) + 1
    if parts:
        yield ",".join(parts), len(parts)


#: The characters of a string that ``mysql_literal`` escapes (in either quoting mode) and
#: that make a string ``postgresql_literal``'s to double its quotes or the driver's to
#: write: every other string is quoted as it is.
MYSQL_SPECIAL = "'\\\"\n\r\x00\x1a"
POSTGRESQL_SPECIAL = "'\\\x00"


def literals(cursor: Any, dialect: str) -> tuple[Literal, str | None]:
    """The literals of a client cursor of ``dialect`` (``mysql_literal`` or
    ``postgresql_literal``), and the characters that make a string theirs to write (None:
    every value is theirs)."""
    if dialect == "postgresql":
        return postgresql_literal(cursor), POSTGRESQL_SPECIAL if _conforming(cursor) else None
    return mysql_literal(cursor), MYSQL_SPECIAL


def _conforming(cursor: Any) -> bool:
    status: str | None = cursor.connection.info.parameter_status("standard_conforming_strings")
    return status == "on"


def postgresql_literal(cursor: Any) -> Literal:
    """Literals for a psycopg ``ClientCursor``: NULL, integers and strings written here as
    libpq's ``PQescapeLiteral`` writes them (``standard_conforming_strings`` must be on, as
    it is by default since PostgreSQL 9.1); anything else as the cursor's ``mogrify`` would
    (``_psycopg_literal``)."""
    driver = _psycopg_literal(cursor)
    if not _conforming(cursor):
        return driver

    def literal(value: object) -> str:
        kind = type(value)
        if kind is str:
            text: str = value  # type: ignore[assignment]
            # A backslash takes the E'' form, U+0000 an error: both the driver's to write.
            if "\\" not in text and "\x00" not in text:
                return "'" + text.replace("'", "''") + "'"
        elif kind is int:
            number: int = value  # type: ignore[assignment]
            # psycopg's form: a space before a minus, so that "- -1" never becomes "--1".
            return str(number) if number >= 0 else " " + str(number)
        elif value is None:
            return "NULL"
        return driver(value)
    return literal


def mysql_literal(cursor: Any) -> Literal:
    """Literals for a PyMySQL cursor: NULL, integers and strings written here as its
    ``mogrify`` writes them (strings escaped by the connection, which knows the server's
    NO_BACKSLASH_ESCAPES mode); anything else as ``mogrify`` would (``_pymysql_literal``)."""
    escape: Callable[[str], str] = cursor.connection.escape_string
    driver = _pymysql_literal(cursor.connection)

    def literal(value: object) -> str:
        kind = type(value)
        if kind is str:
            text: str = value  # type: ignore[assignment]
            # Most strings hold nothing either escaping mode changes: seven scans for one
            # character each cost a third of the escaping's character-by-character table.
            if "'" in text or "\\" in text or '"' in text or "\n" in text or "\r" in text \
                    or "\x00" in text or "\x1a" in text:
                return "'" + escape(text) + "'"
            return "'" + text + "'"
        if kind is int:
            return str(value)
        if value is None:
            return "NULL"
        return driver(value)
    return literal


def _psycopg_literal(cursor: Any) -> Literal:
    """What psycopg's ``ClientCursor.mogrify("%s", (value,))`` writes for a value that is not
    None: the literal of its text dumper, with the type cast psycopg adds (``'...'::date``).
    mogrify makes a ``Transformer`` of the cursor on every call; one made here serves a
    whole batch (its dumpers are cached by type, as they are for an ``executemany``)."""
    from psycopg.adapt import Transformer  # PostgreSQL targets only

    transformer = Transformer(cursor)
    as_literal = transformer.as_literal
    encoding = transformer.encoding

    def literal(value: object) -> str:
        return "NULL" if value is None else as_literal(value).decode(encoding)
    return literal


def _pymysql_literal(conn: Any) -> Literal:
    """What PyMySQL's ``cursor.mogrify("%s", (value,))`` writes: ``conn.literal(value)``.
    For the types its ``escape_item`` hands straight to their encoder (not strings or
    bytes, which depend on the connection's quoting mode and charset, nor sequences and
    dicts, which take the charset), that encoder is called here without the lookups."""
    encoders: dict[type, Any] = conn.encoders
    special = (converters.escape_dict, converters.escape_sequence)
    direct = {kind: encoder for kind, encoder in encoders.items()
              if kind not in (str, bytes, bytearray) and encoder not in special}
    for kind, (theirs, ours) in _PYMYSQL_CALENDAR.items():
        if direct.get(kind) is theirs:
            direct[kind] = ours
    fallback: Literal = conn.literal

    def literal(value: object) -> str:
        encoder = direct.get(type(value))
        if encoder is not None:
            return encoder(value, encoders)  # type: ignore[no-any-return]
        return fallback(value)
    return literal


def _pymysql_datetime(value: dt.datetime, _mapping: object = None) -> str:
    # PyMySQL's escape_datetime, which formats field by field ('{0.year:04}-...': 2 us a
    # value, a tenth of a row's apply on a table with a DATETIME): its text is
    # isoformat's, without the offset it ignores.
    return "'" + value.isoformat(" ")[:26 if value.microsecond else 19] + "'"


def _pymysql_date(value: dt.date, _mapping: object = None) -> str:
    return "'" + value.isoformat() + "'"


def _pymysql_time(value: dt.time, _mapping: object = None) -> str:
    return "'" + value.isoformat()[:15 if value.microsecond else 8] + "'"


#: PyMySQL's encoders of calendar types, and the same text made faster (``_pymysql_literal``
#: uses ours only where the connection's encoder is PyMySQL's own).
_PYMYSQL_CALENDAR: dict[type, tuple[object, Callable[..., str]]] = {
    dt.datetime: (converters.escape_datetime, _pymysql_datetime),
    dt.date: (converters.escape_date, _pymysql_date),
    dt.time: (converters.escape_time, _pymysql_time)}


#: What PyMySQL's ``escape_string`` writes for each character it escapes, as bytes: the
#: backslash first, so that no later replacement's backslash is escaped again.
_MYSQL_BYTE_ESCAPES = ((b"\\", b"\\\\"), (b"\0", b"\\0"), (b"\n", b"\\n"),
                       (b"\r", b"\\r"), (b"\x1a", b"\\Z"), (b'"', b'\\"'),
                       (b"'", b"\\'"))


def mysql_literal_parts(cursor: Any) -> Callable[[object], tuple[bytes, ...]]:
    """``mysql_literal``'s text of a value as bytes in the connection's encoding, in parts
    to be joined once into the statement: for values of many MiB. A string or bytes value
    is escaped as bytes, each escaped character a ``bytes.replace`` (a copy freed at the
    next one), where PyMySQL's ``escape_bytes`` goes through a str of surrogates (two bytes
    a byte) and the query's formatting and encoding copy it again (a 64 MiB row grew the
    group by 408-424 MiB that way, 277-286 MiB this way). The special characters are
    ASCII, which no UTF-8 sequence of another character holds, so escaping a string's UTF-8
    bytes is escaping its characters."""
    conn = cursor.connection
    encoding: str = conn.encoding
    utf8 = codecs.lookup(encoding).name == "utf-8"
    literal = mysql_literal(cursor)

    def parts(value: object) -> tuple[bytes, ...]:
        if isinstance(value, (bytes, bytearray)):
            raw = bytes(value)
            prefix = b"_binary'" if conn._binary_prefix else b"'"
        elif isinstance(value, str) and utf8:
            raw = value.encode(encoding, "surrogateescape")
            prefix = b"'"
        else:
            return (literal(value).encode(encoding, "surrogateescape"),)
        if conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES:
            return prefix, raw.replace(b"'", b"''"), b"'"
        for char, escaped in _MYSQL_BYTE_ESCAPES:
            raw = raw.replace(char, escaped)  # the same object where there is none
        return prefix, raw, b"'"
    return parts


def render_bytes(template: Template, params: Mapping[str, object],
                 parts: Callable[[object], tuple[bytes, ...]], encoding: str,
                 around: tuple[str, str] = ("", "")) -> bytes:
    """``template.render`` as bytes in ``encoding`` (between ``around``'s two texts), each
    value's literal from ``parts`` (``mysql_literal_parts``): one join of the statement,
    no text copy of a value."""
    pieces = template.pieces
    out = [(around[0] + pieces[0]).encode(encoding, "surrogateescape")]
    for name, piece in zip(template.names, pieces[1:], strict=True):
        out.extend(parts(params[name]))
        out.append(piece.encode(encoding, "surrogateescape"))
    out.append(around[1].encode(encoding, "surrogateescape"))
    return b"".join(out)


def client_cursor(conn: sa.Connection, dialect: str) -> Any:
    """A cursor of ``conn`` that binds on the client (``mogrify``) and reads several results
    (the driver's: psycopg's ``ClientCursor`` on PostgreSQL, PyMySQL's cursor)."""
    raw = conn.connection.dbapi_connection
    if dialect == "postgresql":
        import psycopg  # PostgreSQL targets only: a MariaDB group never loads it
        return psycopg.ClientCursor(raw)  # type: ignore[call-overload]
    return raw.cursor()  # type: ignore[union-attr]
