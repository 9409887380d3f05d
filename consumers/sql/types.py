"""The SQL applier's type map: THL column specs to target columns, THL values to driver values.

One table, ``TYPE_MAP``, says for every THL (MySQL/MariaDB) type which column the applier
creates on PostgreSQL and on Oracle (``column_type``); the README's type table is rendered
from it (``type_map_markdown``). Values then go through ``adapt_row``:
``thl_topics.values.from_thl`` gives the typed Python value of the source column, the
target's value policy (``ValuePolicy``: zero dates, U+0000) decides what a target that
cannot hold it gets, and ``adapt`` bends the value to the target column's reflected type,
whether the applier created that column from this map or a user wrote it by hand: a
PostgreSQL BIT(n) wants a bit string, a BOOLEAN a bool, a timestamp without time zone a
naive UTC datetime. ``row_adapter`` does the same for a table layout, with the choices
that depend only on the columns made once.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, cast

import sqlalchemy as sa

from consumers.sql._adapt_rows import adapt_rows
from thl_topics.event import ColumnSpec, ThlValue
from thl_topics.values import (
    DECIMAL_TYPES,
    INTEGER_TYPES,
    format_time,
    from_thl,
    incomplete_date,
)

SqlType = sa.types.TypeEngine[Any]

#: Bytes per character of the multi-byte character sets, by the name the THL carries (the
#: extractor writes pymysqlreplication's codec name: "utf8" for utf8mb3 *and* utf8mb4,
#: "cp1252" for latin1). The THL carries CHAR/VARCHAR lengths in bytes; dividing by the
#: smallest width the name can mean gives at least the declared number of characters, so a
#: created column is never too narrow ("utf8" VARCHAR(50) of utf8mb4 is 200 bytes, created
#: as VARCHAR(66)). Any other name is taken as one byte per character.
_CHARSET_WIDTH = {
    "utf8": 3, "utf8mb3": 3, "utf8mb4": 4, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4,
    "big5": 2, "sjis": 2, "cp932": 2, "euckr": 2, "gb2312": 2, "gbk": 2, "ujis": 3,
    "eucjpms": 3, "gb18030": 4,
}
#: Oracle VARCHAR2 holds 4000 bytes; past this many characters a text column is a CLOB.
_ORACLE_VARCHAR_CHARS = 1000
#: Oracle RAW holds 2000 bytes; longer binary columns are BLOBs.
_ORACLE_RAW_BYTES = 2000
#: Oracle NUMBER holds 38 significant digits.
_ORACLE_DIGITS = 38

#: Value range of each THL integer type, (signed, unsigned).
INTEGER_RANGES: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "TINYINT": ((-(1 << 7), (1 << 7) - 1), (0, (1 << 8) - 1)),
    "SMALLINT": ((-(1 << 15), (1 << 15) - 1), (0, (1 << 16) - 1)),
    "MEDIUMINT": ((-(1 << 23), (1 << 23) - 1), (0, (1 << 24) - 1)),
    "INT": ((-(1 << 31), (1 << 31) - 1), (0, (1 << 32) - 1)),
    "BIGINT": ((-(1 << 63), (1 << 63) - 1), (0, (1 << 64) - 1)),
}
DATE_TYPES = frozenset({"DATE", "DATETIME", "TIMESTAMP"})


def _postgresql() -> Any:
    """SQLAlchemy's PostgreSQL types, imported when a PostgreSQL column is first made (a
    MariaDB group never needs them, nor Oracle's: a tenth of a second of its start)."""
    from sqlalchemy.dialects import postgresql
    return postgresql


def _oracle() -> Any:
    """SQLAlchemy's Oracle types, imported at first use (see ``_postgresql``)."""
    from sqlalchemy.dialects import oracle
    return oracle


class UnmappedType(ValueError):
    """A THL column the target dialect has no exact column type for."""


def char_length(spec: ColumnSpec) -> int:
    """Characters a CHAR/VARCHAR column of the THL holds at least (its length is bytes)."""
    width = _CHARSET_WIDTH.get((spec.charset or "").lower(), 1)
    return max(1, spec.length // width)


def integer_range(spec: ColumnSpec) -> tuple[int, int]:
    """The values an integer column of the THL can hold."""
    kind = "INT" if spec.type.upper() == "INTEGER" else spec.type.upper()
    signed, unsigned = INTEGER_RANGES[kind]
    return unsigned if spec.unsigned else signed


def _digits(spec: ColumnSpec) -> int:
    low, high = integer_range(spec)
    return max(len(str(low)) - (1 if low < 0 else 0), len(str(high)))


# -- PostgreSQL -----------------------------------------------------------------------------

def _pg_integer(spec: ColumnSpec) -> SqlType:
    low, high = integer_range(spec)
    if -(1 << 15) <= low and high < (1 << 15):
        return sa.SmallInteger()
    if -(1 << 31) <= low and high < (1 << 31):
        return sa.Integer()
    if -(1 << 63) <= low and high < (1 << 63):
        return sa.BigInteger()
    return sa.Numeric(_digits(spec), 0)


def _pg_decimal(spec: ColumnSpec) -> SqlType:
    # MySQL's DECIMAL defaults to (10,0); a spec without a precision keeps every digit.
    return sa.Numeric(spec.length, spec.scale) if spec.length else sa.Numeric()


def _pg_bit(spec: ColumnSpec) -> SqlType:
    return _made(_postgresql, "BIT", max(1, spec.length))


def _pg_time(spec: ColumnSpec) -> SqlType:
    return _made(_postgresql, "INTERVAL", precision=spec.scale)


def _pg_datetime(spec: ColumnSpec) -> SqlType:
    return _made(_postgresql, "TIMESTAMP", precision=spec.scale)


def _pg_timestamp(spec: ColumnSpec) -> SqlType:
    return _made(_postgresql, "TIMESTAMP", timezone=True, precision=spec.scale)


def _pg_varchar(spec: ColumnSpec) -> SqlType:
    return sa.VARCHAR(char_length(spec))


# -- Oracle (compiled only: no Oracle server here) ------------------------------------------

def _number(precision: int, scale: int = 0) -> SqlType:
    return _made(_oracle, "NUMBER", precision, scale)


def _ora_integer(spec: ColumnSpec) -> SqlType:
    return _number(_digits(spec))


def _ora_decimal(spec: ColumnSpec) -> SqlType:
    precision = spec.length or 10
    if precision > _ORACLE_DIGITS:
        raise UnmappedType(f"DECIMAL({precision},{spec.scale}) does not fit Oracle NUMBER "
                           f"({_ORACLE_DIGITS} digits at most)")
    return _number(precision, spec.scale)


def _ora_bit(spec: ColumnSpec) -> SqlType:
    return _number(max(1, math.ceil(max(1, spec.length) * math.log10(2))))


def _ora_time(spec: ColumnSpec) -> SqlType:
    # TIME spans -838:59:59 .. 838:59:59: 34 days and some.
    return _made(_oracle, "INTERVAL", day_precision=2, second_precision=spec.scale)


def _ora_varchar(spec: ColumnSpec) -> SqlType:
    chars = char_length(spec)
    return _made(_oracle, "VARCHAR2", chars) if chars <= _ORACLE_VARCHAR_CHARS else sa.CLOB()


def _ora_members(spec: ColumnSpec) -> SqlType:
    # The longest value an ENUM (one member) or SET (every member, comma-separated) takes.
    sizes = [len(m) for m in spec.enum_values] or [1]
    chars = max(sizes) if spec.type.upper() == "ENUM" else sum(sizes) + len(sizes) - 1
    if chars > _ORACLE_VARCHAR_CHARS:
        return sa.CLOB()
    return _made(_oracle, "VARCHAR2", max(1, chars))


def _ora_binary(spec: ColumnSpec) -> SqlType:
    return _made(_oracle, "RAW", spec.length) if 0 < spec.length <= _ORACLE_RAW_BYTES else sa.BLOB()


def _fixed(factory: Callable[[], SqlType]) -> Callable[[ColumnSpec], SqlType]:
    return lambda _spec: factory()


def _made(dialect: Callable[[], Any], name: str, *args: Any, **kwargs: Any) -> SqlType:
    """The dialect's own type ``name`` made with ``args`` (its module imported now)."""
    return cast(SqlType, getattr(dialect(), name)(*args, **kwargs))


def _own(dialect: Callable[[], Any], name: str) -> Callable[[ColumnSpec], SqlType]:
    """A dialect's own type without parameters."""
    return lambda _spec: _made(dialect, name)


@dataclass(frozen=True)
class TypeRule:
    """One row of the type map: a THL type and the column created for it per dialect."""

    #: The source type as a MySQL user writes it (README).
    mysql: str
    #: The THL type names this row covers (``ColumnSpec.type``).
    thl: tuple[str, ...]
    postgresql: Callable[[ColumnSpec], SqlType]
    oracle: Callable[[ColumnSpec], SqlType]
    #: The created columns as the README shows them.
    postgresql_doc: str
    oracle_doc: str
    #: What a user should know about the values.
    note: str = ""


TYPE_MAP: tuple[TypeRule, ...] = (
    TypeRule("TINYINT [UNSIGNED], BOOL", ("TINYINT",), _pg_integer, _ora_integer,
             "SMALLINT", "NUMBER(3)"),
    TypeRule("SMALLINT / UNSIGNED", ("SMALLINT",), _pg_integer, _ora_integer,
             "SMALLINT / INTEGER", "NUMBER(5)", "UNSIGNED takes the next wider type"),
    TypeRule("MEDIUMINT [UNSIGNED]", ("MEDIUMINT",), _pg_integer, _ora_integer,
             "INTEGER", "NUMBER(7) / NUMBER(8)"),
    TypeRule("INT / UNSIGNED", ("INT", "INTEGER"), _pg_integer, _ora_integer,
             "INTEGER / BIGINT", "NUMBER(10)", "UNSIGNED takes the next wider type"),
    TypeRule("BIGINT / UNSIGNED", ("BIGINT",), _pg_integer, _ora_integer,
             "BIGINT / NUMERIC(20)", "NUMBER(19) / NUMBER(20)",
             "18446744073709551615 stays exact"),
    TypeRule("DECIMAL(p,s)", ("DECIMAL", "NUMERIC", "NEWDECIMAL"), _pg_decimal, _ora_decimal,
             "NUMERIC(p,s)", "NUMBER(p,s), p <= 38",
             "DECIMAL(65,30) exact on PostgreSQL; Oracle NUMBER holds 38 digits, so a wider "
             "DECIMAL is a data error there"),
    TypeRule("FLOAT", ("FLOAT",), _fixed(sa.REAL), _own(_oracle, "BINARY_FLOAT"),
             "REAL", "BINARY_FLOAT"),
    TypeRule("DOUBLE", ("DOUBLE", "REAL"), _own(_postgresql, "DOUBLE_PRECISION"),
             _own(_oracle, "BINARY_DOUBLE"), "DOUBLE PRECISION", "BINARY_DOUBLE"),
    TypeRule("BIT(n)", ("BIT",), _pg_bit, _ora_bit, "BIT(n)", "NUMBER(ceil(n·log10 2))",
             "bit strings on PostgreSQL, integers on Oracle"),
    TypeRule("YEAR", ("YEAR",), _fixed(sa.SmallInteger), lambda _s: _number(4),
             "SMALLINT", "NUMBER(4)", "YEAR 0000 is 0"),
    TypeRule("DATE", ("DATE",), _fixed(sa.Date), _own(_oracle, "DATE"), "DATE", "DATE",
             "zero dates: see `zero_dates`"),
    TypeRule("TIME(fsp)", ("TIME",), _pg_time, _ora_time, "INTERVAL(fsp)",
             "INTERVAL DAY(2) TO SECOND(fsp)", "-838:59:59 .. 838:59:59, negative kept"),
    TypeRule("DATETIME(fsp)", ("DATETIME",), _pg_datetime,
             _own(_oracle, "TIMESTAMP"), "TIMESTAMP(fsp) WITHOUT TIME ZONE", "TIMESTAMP",
             "wall time as on the source; zero dates: see `zero_dates`"),
    TypeRule("TIMESTAMP(fsp)", ("TIMESTAMP",), _pg_timestamp,
             lambda _s: _made(_oracle, "TIMESTAMP", timezone=True), "TIMESTAMP(fsp) WITH TIME ZONE",
             "TIMESTAMP WITH TIME ZONE", "the instant (the THL carries it in UTC)"),
    TypeRule("CHAR(n), VARCHAR(n)", ("CHAR", "VARCHAR"), _pg_varchar, _ora_varchar,
             "VARCHAR(n)", "VARCHAR2(n CHAR), CLOB past 1000",
             "CHAR as VARCHAR: MySQL reads CHAR without its trailing spaces. The THL has "
             "the length in bytes and the charset as a codec name (utf8 for utf8mb3 and "
             "utf8mb4): n = bytes / 3 for utf8, so a utf8mb4 column comes out wider"),
    TypeRule("TINYTEXT .. LONGTEXT, JSON on MariaDB", ("TEXT",), _fixed(sa.Text),
             _fixed(sa.CLOB), "TEXT", "CLOB",
             "utf8mb4 text needs a UTF8 database; U+0000: see `nul_characters`"),
    TypeRule("ENUM, SET", ("ENUM", "SET"), _fixed(sa.Text), _ora_members, "TEXT",
             "VARCHAR2(longest value CHAR)", "the member names; a SET as 'a,c'"),
    TypeRule("JSON (MySQL)", ("JSON",), _own(_postgresql, "JSONB"), _fixed(sa.CLOB), "JSONB",
             "CLOB", "JSONB normalizes key order and spacing; a \\u0000 escape: see "
             "`nul_characters`. MariaDB's JSON is a LONGTEXT: it arrives as TEXT, kept "
             "verbatim"),
    TypeRule("BINARY(n), VARBINARY(n)", ("BINARY", "VARBINARY"), _own(_postgresql, "BYTEA"),
             _ora_binary, "BYTEA", "RAW(n), BLOB past 2000",
             "BINARY(n) padded with 0x00 to n bytes as MySQL stores it"),
    TypeRule("TINYBLOB .. LONGBLOB, GEOMETRY", ("BLOB", "GEOMETRY"),
             _own(_postgresql, "BYTEA"), _fixed(sa.BLOB), "BYTEA", "BLOB",
             "GEOMETRY as MySQL's internal bytes (SRID + WKB)"),
)
_RULES = {name: rule for rule in TYPE_MAP for name in rule.thl}


def column_type(spec: ColumnSpec, dialect: str) -> SqlType:
    """The column type the applier creates on ``dialect`` for a THL column."""
    rule = _RULES.get(spec.type.upper())
    if rule is None:
        raise UnmappedType(f"THL type {spec.type} has no column type in the type map")
    if dialect == "postgresql":
        return rule.postgresql(spec)
    if dialect == "oracle":
        return rule.oracle(spec)
    raise UnmappedType(f"tables are created from the THL on PostgreSQL and Oracle only, "
                       f"not {dialect}")


def type_map_markdown() -> str:
    """The type map as the README's table."""
    lines = ["| MySQL / MariaDB | PostgreSQL | Oracle (compiled only) | values |",
             "|---|---|---|---|"]
    lines += [f"| {r.mysql} | {r.postgresql_doc} | {r.oracle_doc} | {r.note} |"
              for r in TYPE_MAP]
    return "\n".join(lines) + "\n"


# -- values ---------------------------------------------------------------------------------

class ValueRefused(ValueError):
    """A value the target cannot hold and the policy says to stop on."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(reason)
        self.column = column


#: A ``\\u0000`` escape in JSON text (not one whose backslash is itself escaped).
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


class ValuePolicy:
    """What a target that cannot hold a value gets: zero dates, U+0000 in text.

    ``zero_dates``: ``null`` (the value becomes NULL, counted) or ``error`` (stop).
    ``nul_characters``: ``error`` (stop) or ``strip`` (U+0000 removed, counted); only for
    PostgreSQL, whose text types cannot hold U+0000. Every changed value is counted in
    ``changed`` by (kind, column) until the applier collects it.
    """

    def __init__(self, dialect: str, zero_dates: Literal["null", "error"],
                 nul_characters: Literal["error", "strip"]) -> None:
        self.dialect = dialect
        self.zero_dates = zero_dates
        self.nul_characters = nul_characters
        #: Text can hold U+0000 everywhere but on PostgreSQL.
        self.checks_nul = dialect == "postgresql"
        self.changed: Counter[tuple[str, str]] = Counter()

    def value(self, spec: ColumnSpec, value: str) -> str | None:
        """A string value (after ``from_thl``) as this target gets it."""
        kind = spec.type.upper()
        if kind in DATE_TYPES:
            # from_thl leaves only what no date can hold as a string: a zero date.
            if self.zero_dates == "error":
                raise ValueRefused(spec.name, f"zero date {value!r} cannot be stored on "
                                   f"{self.dialect} (zero_dates: error; set zero_dates: "
                                   "null to store NULL)")
            self.changed["zero_date", spec.name] += 1
            return None
        if not self.checks_nul:
            return value
        nul = "\x00" in value
        json_nul = kind == "JSON" and "\\u0000" in value and _JSON_NUL.search(value)
        if not (nul or json_nul):
            return value
        if self.nul_characters == "error":
            raise ValueRefused(spec.name, "PostgreSQL text cannot hold U+0000 (NUL, 0x00) "
                               "(nul_characters: error; set nul_characters: strip to "
                               "store the text without it)")
        self.changed["nul_character", spec.name] += 1
        if json_nul:
            value = _JSON_NUL.sub(r"\1", value)
        return value.replace("\x00", "")

    def collect(self) -> Counter[tuple[str, str]]:
        """The values changed since the last call, by (kind, column)."""
        changed, self.changed = self.changed, Counter()
        return changed


def policy_for(dialect: str, zero_dates: Literal["null", "error"],
               nul_characters: Literal["error", "strip"]) -> ValuePolicy | None:
    """The value policy of a target; None for MySQL-family targets, which hold every value."""
    if dialect in ("mysql", "mariadb"):
        return None
    return ValuePolicy(dialect, zero_dates, nul_characters)


def adapt(value: object, target: SqlType, dialect: str, spec: ColumnSpec) -> object:
    """``value`` (from ``from_thl``) in the form the target column's driver wants."""
    if value is None:
        return None
    type_name = type(target).__name__.upper()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        # Sessions run in UTC; a zone-less column gets the UTC wall time.
        if dialect != "postgresql" or not getattr(target, "timezone", False):
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if dialect == "postgresql":
        if type_name in ("BIT", "VARBIT") and isinstance(value, int):
            width = getattr(target, "length", None) or max(spec.length, value.bit_length(), 1)
            return format(value, f"0{width}b")
        if type_name == "BOOLEAN" and isinstance(value, int):
            return bool(value)
        if type_name in ("TEXT", "VARCHAR", "CHAR") and isinstance(value, dt.timedelta):
            return spec_text(value)
    if isinstance(value, dt.timedelta) and (dialect in ("mysql", "mariadb") or type_name in (
            "TEXT", "VARCHAR", "CHAR", "STRING")):
        # PyMySQL renders a negative timedelta wrongly ('-839:00:01' for -838:59:59).
        return spec_text(value)
    return value


def spec_text(value: dt.timedelta) -> str:
    """A TIME value as MySQL prints it, for a text column."""
    return format_time(value)


def adapt_row(row: Sequence[ThlValue], specs: Sequence[ColumnSpec],
              targets: Sequence[SqlType], dialect: str,
              policy: ValuePolicy | None = None) -> list[object]:
    """One THL row, column by column (``policy``: what the target cannot hold)."""
    return [adapt_value(raw, spec, target, dialect, policy)
            for raw, spec, target in zip(row, specs, targets, strict=True)]


def adapt_value(raw: ThlValue, spec: ColumnSpec, target: SqlType, dialect: str,
                policy: ValuePolicy | None = None) -> object:
    """One THL value as the target column's driver gets it (see ``adapt_row``)."""
    value = from_thl(spec, raw)
    if policy is not None and isinstance(value, str):
        value = policy.value(spec, value)
    return adapt(value, target, dialect, spec)


RowAdapter = Callable[[Sequence[ThlValue]], list[object]]
"""A THL row to the values the target's driver gets (``row_adapter``)."""
RowsAdapter = Callable[[Sequence[Sequence[ThlValue]]], list[list[object]]]
"""The rows of a row change to the values the target's driver gets (``rows_adapter``)."""

#: Kinds whose string values do not pass as they are: ``from_thl`` converts them (numbers,
#: dates, times), or the value policy looks into them (JSON's escaped U+0000).
_CONVERTED_KINDS = INTEGER_TYPES | DECIMAL_TYPES | DATE_TYPES | {"TIME", "JSON"}
#: Passes: what a value must be to pass as it is (see ``row_adapter``); _DECIMAL, _DATE and
#: _DATETIME: a string parsed the way ``adapt_value`` would, without its dispatch.
_ANY, _INT, _STR, _STR_NO_NUL, _DECIMAL, _DATE, _DATETIME = range(7)


def _parsed(raw: str, passing: int, spec: ColumnSpec, target: SqlType, dialect: str,
            policy: ValuePolicy | None) -> object:
    """``adapt_value`` of a DECIMAL, DATE or DATETIME string: ``from_thl``'s parse, which
    ``adapt`` then hands on as it is (a Decimal, a date, a naive datetime); zero dates
    (the value policy's) and anything else go ``adapt_value``'s whole way."""
    if passing == _DECIMAL:
        return Decimal(raw)
    if not incomplete_date(raw):
        if passing == _DATE:
            return dt.date.fromisoformat(raw)
        value = dt.datetime.fromisoformat(raw)
        if value.tzinfo is None:
            return value
    return adapt_value(raw, spec, target, dialect, policy)


def row_adapter(specs: Sequence[ColumnSpec], targets: Sequence[SqlType], dialect: str,
                policy: ValuePolicy | None = None) -> RowAdapter:
    """``adapt_row`` for one layout of columns, as a function of the row.

    The per-column choices are made here, once: NULL, an integer of an integer column and
    a string of a column that keeps strings as they are (on PostgreSQL: without U+0000)
    come out as they went in, which is what ``adapt_row`` makes of them; every other value
    goes ``adapt_row``'s way.
    """
    return _adapter(specs, targets, dialect, policy)[0]


def rows_adapter(specs: Sequence[ColumnSpec], targets: Sequence[SqlType], dialect: str,
                 policy: ValuePolicy | None = None) -> RowsAdapter:
    """``row_adapter`` of every row of a row change: the rows it passes as they are (only
    plain values of their columns' types) are recognised by compiled code
    (``_adapt_rows``), the others are its."""
    one, plain, no_nul = _adapter(specs, targets, dialect, policy)
    if plain is None:
        return lambda rows: [one(row) for row in rows]
    return functools.partial(adapt_rows, plain, no_nul, one)


def _adapter(specs: Sequence[ColumnSpec], targets: Sequence[SqlType], dialect: str,
             policy: ValuePolicy | None
             ) -> tuple[RowAdapter, tuple[type, ...] | None, tuple[int, ...]]:
    """``row_adapter``'s function, the types of a row it passes by its types alone (None:
    no row does), and the columns whose strings must also hold no U+0000 to pass."""
    passes = _passes(specs, targets, dialect, policy)
    columns = list(zip(passes, specs, targets, strict=True))
    plain = _plain(passes)
    no_nul = tuple(i for i, p in enumerate(passes) if p == _STR_NO_NUL)

    def adapted(row: Sequence[ThlValue]) -> list[object]:
        if plain is not None and tuple(map(type, row)) == plain and (not no_nul or not any(
                "\x00" in row[i] for i in no_nul)):  # type: ignore[operator]
            return list(row)
        out: list[object] = []
        for raw, (passing, spec, target) in zip(row, columns, strict=True):
            if raw is None or (type(raw) is int and passing == _INT) or (isinstance(raw, str) and (
                    passing == _STR or (passing == _STR_NO_NUL and "\x00" not in raw))):
                out.append(raw)
            elif type(raw) is str and passing >= _DECIMAL:
                out.append(_parsed(raw, passing, spec, target, dialect, policy))
            else:
                out.append(adapt_value(raw, spec, target, dialect, policy))
        return out
    return adapted, plain, no_nul


def _passes(specs: Sequence[ColumnSpec], targets: Sequence[SqlType], dialect: str,
            policy: ValuePolicy | None) -> list[int]:
    """What each column's value must be to pass as it is."""
    passes: list[int] = []
    for spec, target in zip(specs, targets, strict=True):
        kind = spec.type.upper()
        type_name = type(target).__name__.upper()
        if kind in INTEGER_TYPES:
            # A PostgreSQL BIT wants a bit string, a BOOLEAN a bool (``adapt``).
            bent = dialect == "postgresql" and type_name in ("BIT", "VARBIT", "BOOLEAN")
            passes.append(_ANY if bent else _INT)
        elif kind in DECIMAL_TYPES:
            passes.append(_DECIMAL)
        elif kind == "DATE":
            passes.append(_DATE)
        elif kind == "DATETIME":
            passes.append(_DATETIME)
        elif kind in _CONVERTED_KINDS:
            passes.append(_ANY)
        else:
            passes.append(_STR_NO_NUL if policy is not None and policy.checks_nul else _STR)
    return passes


def _plain(passes: list[int]) -> tuple[type, ...] | None:
    """Where every column passes an int or a str as it is, the types of a row of only those
    (no NULL), recognised by its types alone: one comparison, no loop over the values (and
    a look for U+0000 in the strings that must not hold it)."""
    if all(p in (_INT, _STR, _STR_NO_NUL) for p in passes):
        return tuple(int if p == _INT else str for p in passes)
    return None
