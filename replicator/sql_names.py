"""Which schema and table a SQL statement touches, for filtering statement events.

A small matcher for the statements a binlog carries (DDL, statement-format DML), in the
spirit of Tungsten's MySQLOperationMatcher. It reads only the head of the statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_NAME = rf"(?P<name>{_IDENT}(?:\s*\.\s*{_IDENT})?)"
_EXISTS = r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
_MODIFIERS = (r"(?:(?:OR\s+REPLACE|TEMPORARY|ONLINE|OFFLINE|IGNORE|DEFINER\s*=\s*\S+|"
              r"ALGORITHM\s*=\s*\w+|SQL\s+SECURITY\s+\w+|UNIQUE|FULLTEXT|SPATIAL)\s+)*")
_COMMENT = r"(?:\s|/\*.*?\*/)*"
#: ``/*!50003 CREATE*/``: a versioned comment whose text the server runs (mysqldump's form).
_VERSIONED = re.compile(r"/\*!\d*\s?(.*?)\*/", re.S)

_PATTERNS = [
    ("database", re.compile(
        rf"^{_COMMENT}(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+{_EXISTS}{_NAME}",
        re.I | re.S)),
    ("table", re.compile(
        rf"^{_COMMENT}(?:CREATE|ALTER|DROP|TRUNCATE|RENAME|OPTIMIZE|ANALYZE|REPAIR)\s+"
        rf"{_MODIFIERS}(?:TABLE|TABLES|VIEW)\s+{_EXISTS}{_NAME}", re.I | re.S)),
    # TABLE is optional after TRUNCATE (``TRUNCATE shop.t``).
    ("table", re.compile(rf"^{_COMMENT}TRUNCATE\s+{_NAME}", re.I | re.S)),
    ("table", re.compile(
        rf"^{_COMMENT}(?:CREATE|DROP)\s+{_MODIFIERS}INDEX\s+{_IDENT}\s+ON\s+{_NAME}",
        re.I | re.S)),
    # A trigger belongs to its table (in the trigger's schema when the table is unqualified).
    ("trigger", re.compile(
        rf"^{_COMMENT}CREATE\s+{_MODIFIERS}TRIGGER\s+{_EXISTS}"
        rf"(?P<trigger>{_IDENT}(?:\s*\.\s*{_IDENT})?)\s+(?:BEFORE|AFTER)\s+"
        rf"(?:INSERT|UPDATE|DELETE)\s+ON\s+{_NAME}", re.I | re.S)),
    ("schema", re.compile(rf"^{_COMMENT}DROP\s+TRIGGER\s+{_EXISTS}{_NAME}", re.I | re.S)),
    ("table", re.compile(
        rf"^{_COMMENT}(?:INSERT|REPLACE)\s+(?:(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE)"
        rf"\s+)*(?:INTO\s+)?{_NAME}", re.I | re.S)),
    ("table", re.compile(
        rf"^{_COMMENT}UPDATE\s+(?:(?:LOW_PRIORITY|IGNORE)\s+)*{_NAME}", re.I | re.S)),
    ("table", re.compile(
        rf"^{_COMMENT}DELETE\s+(?:(?:LOW_PRIORITY|QUICK|IGNORE)\s+)*FROM\s+{_NAME}",
        re.I | re.S)),
]


@dataclass(frozen=True)
class StatementTarget:
    """What a statement touches: a schema, and a table unless it is a database statement."""

    schema: str | None
    table: str | None


def _unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _split(name: str) -> list[str]:
    parts = re.findall(_IDENT, name)
    return [_unquote(p) for p in parts]


def statement_target(sql: str, default_schema: str | None) -> StatementTarget:
    """The schema and table of ``sql``; an unqualified table is in ``default_schema``."""
    head = _VERSIONED.sub(r"\1", sql[:2000])
    for kind, pattern in _PATTERNS:
        match = pattern.match(head)
        if match is None:
            continue
        parts = _split(match.group("name"))
        if kind == "database":
            return StatementTarget(parts[0], None)
        if kind == "schema":  # DROP TRIGGER [schema.]name: its table is not named
            return StatementTarget(parts[0] if len(parts) == 2 else default_schema, None)
        if kind == "trigger" and len(parts) == 1:
            trigger = _split(match.group("trigger"))
            if len(trigger) == 2:
                return StatementTarget(trigger[0], parts[0])
        if len(parts) == 2:
            return StatementTarget(parts[0], parts[1])
        return StatementTarget(default_schema, parts[0])
    return StatementTarget(default_schema, None)


#: Statements that change data inside a transaction; anything else (DDL) commits implicitly.
_TRANSACTIONAL = re.compile(
    rf"^{_COMMENT}(INSERT|UPDATE|DELETE|REPLACE|LOAD|SELECT|SET|DO|CALL)\b", re.I | re.S)
_DATABASE = re.compile(rf"^{_COMMENT}(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\b", re.I | re.S)


def is_transactional(sql: str) -> bool:
    """True for statements that run inside a transaction (DML); False for DDL, which MySQL
    commits by itself (with whatever the transaction held before it)."""
    return _TRANSACTIONAL.match(sql) is not None


def is_database_statement(sql: str) -> bool:
    """True for CREATE/DROP/ALTER DATABASE (SCHEMA)."""
    return _DATABASE.match(sql) is not None

_TRIGGER = re.compile(rf"^{_COMMENT}(?:CREATE\s+{_MODIFIERS}|DROP\s+)TRIGGER\b", re.I | re.S)


def is_trigger_statement(sql: str) -> bool:
    """True for CREATE/DROP TRIGGER, also written in versioned comments as mysqldump does."""
    return _TRIGGER.match(_VERSIONED.sub(r"\1", sql[:2000])) is not None
