"""DDL statements of the binlog as schema-change items (``thl_topics.schema_change``).

sqlglot's MySQL dialect does the parsing; this module only maps its syntax tree onto the
items and fills the gaps MariaDB's grammar leaves in it (``RENAME TABLE a TO b, c TO d``,
``ALTER IGNORE|ONLINE TABLE``, ``RENAME AS``). A table statement it cannot read gets
``None``: the statement still goes into the THL with its text, as before, and the caller
counts and logs it. Statements that touch no table (``CREATE DATABASE``, grants, views,
statement-format DML) get ``None`` too: they are not schema changes of replicated tables.
"""

from __future__ import annotations

import itertools
import logging
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from thl_topics.schema_change import ChangeKind, SchemaChange

log = logging.getLogger(__name__)

#: Leading words of the statements that change a table's shape or contents wholesale.
_TABLE_DDL = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*(?:"
    r"ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|"
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE|"
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX|"
    r"DROP\s+(?:TEMPORARY\s+)?TABLES?|DROP\s+(?:ONLINE\s+)?INDEX|"
    r"RENAME\s+TABLES?|TRUNCATE)\b",
    re.IGNORECASE | re.DOTALL)

_RENAME_TABLE = re.compile(r"\s*(?:/\*.*?\*/\s*)*RENAME\s+TABLES?\b", re.IGNORECASE | re.DOTALL)
# sqlglot warns of each statement it keeps as an opaque command; that is ours to report.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


class NotUnderstood(Exception):
    """A table statement whose meaning the parser cannot state exactly."""


def is_table_ddl(sql: str) -> bool:
    """Whether ``sql`` is a statement this module turns into items (cheap: a prefix match)."""
    return _TABLE_DDL.match(sql) is not None


def parse_schema_changes(sql: str, default_schema: str | None) -> list[SchemaChange] | None:
    """The items of one table DDL statement, in order; ``None`` when ``sql`` is no table DDL
    or cannot be read exactly (never a guess: a wrong item is worse than none)."""
    return read_schema_changes(sql, default_schema) if is_table_ddl(sql) else None


def read_schema_changes(sql: str, default_schema: str | None) -> list[SchemaChange] | None:
    """The items of ``sql``, known to be table DDL (``is_table_ddl``); None if not read."""
    try:
        return _Reader(default_schema).statement(sql)
    except (NotUnderstood, SqlglotError, ValueError) as exc:
        log.debug("DDL not understood (%s): %.200s", exc, sql)
        return None


class _Reader:
    def __init__(self, default_schema: str | None) -> None:
        self.default_schema = default_schema

    def statement(self, sql: str) -> list[SchemaChange]:
        rename = _RENAME_TABLE.match(sql)
        if rename is not None:
            return self._rename_tables(sqlglot.tokenize(sql[rename.end():], read="mysql"))
        tokens = sqlglot.tokenize(sql, read="mysql")
        tree = sqlglot.parse_one(_mariadb_to_sqlglot(sql, tokens), read="mysql")
        if isinstance(tree, exp.Alter):
            return self._alter(tree)
        if isinstance(tree, exp.Create):
            return self._create(tree)
        if isinstance(tree, exp.Drop):
            return self._drop(tree)
        if isinstance(tree, exp.TruncateTable):
            return [SchemaChange(ChangeKind.TRUNCATE, *self._name(t))
                    for t in tree.expressions]
        raise NotUnderstood(f"parsed as {type(tree).__name__}")

    def _name(self, table: exp.Expression) -> tuple[str, str]:
        if not isinstance(table, exp.Table) or table.args.get("catalog") is not None:
            raise NotUnderstood(f"not a table name: {table.sql('mysql')}")
        schema = table.db or self.default_schema
        if not schema:
            raise NotUnderstood(f"table {table.name} without a schema and no default schema")
        return schema, table.name

    # RENAME TABLE a TO b, c TO d: sqlglot keeps it as an opaque command.
    def _rename_tables(self, tokens: list[Token]) -> list[SchemaChange]:
        changes: list[SchemaChange] = []
        pairs = _split(tokens, TokenType.COMMA)
        for pair in pairs:
            to = [i for i, t in enumerate(pair) if t.text.upper() == "TO"
                  and t.token_type is not TokenType.IDENTIFIER]
            if len(to) != 1:
                raise NotUnderstood("RENAME TABLE pair without one TO")
            old = self._name(_table(pair[:to[0]]))
            new = self._name(_table(pair[to[0] + 1:]))
            changes.append(SchemaChange(ChangeKind.RENAME_TABLE, *old, new_schema=new[0],
                                        new_name=new[1]))
        return changes

    def _create(self, tree: exp.Create) -> list[SchemaChange]:
        kind = (tree.args.get("kind") or "").upper()
        if kind == "INDEX":
            index = tree.this
            if not isinstance(index, exp.Index):
                raise NotUnderstood("CREATE INDEX without an index")
            params = index.args.get("params")
            columns = [_column_name(c) for c in (params.args.get("columns") or [])] \
                if params is not None else []
            return [SchemaChange(ChangeKind.CREATE_INDEX, *self._name(index.args["table"]),
                                 index=index.name, columns=tuple(columns),
                                 unique=bool(tree.args.get("unique")))]
        if kind != "TABLE":
            raise NotUnderstood(f"CREATE {kind}")
        if _temporary(tree):
            return []  # never in a row-based binlog's data: nothing of it is replicated
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        name = self._name(target)
        created = [SchemaChange(ChangeKind.CREATE_TABLE, *name)]
        if tree.args.get("replace"):
            # CREATE OR REPLACE drops the table with its rows first.
            return [SchemaChange(ChangeKind.DROP_TABLE, *name), *created]
        return created

    def _drop(self, tree: exp.Drop) -> list[SchemaChange]:
        kind = (tree.args.get("kind") or "").upper()
        if kind == "TABLE":
            if tree.args.get("temporary"):
                return []
            return [SchemaChange(ChangeKind.DROP_TABLE, *self._name(t))
                    for t in tree.args.get("tables") or []]
        if kind == "INDEX":
            on = tree.args.get("cluster")
            (index,) = tree.args.get("tables") or [None]
            if not isinstance(on, exp.OnProperty) or index is None:
                raise NotUnderstood("DROP INDEX without its table")
            return [SchemaChange(ChangeKind.DROP_INDEX, *self._name(on.this),
                                 index=index.name)]
        raise NotUnderstood(f"DROP {kind}")

    def _alter(self, tree: exp.Alter) -> list[SchemaChange]:
        if (tree.args.get("kind") or "").upper() != "TABLE":
            raise NotUnderstood(f"ALTER {tree.args.get('kind')}")
        schema, table = self._name(tree.this)
        changes: list[SchemaChange] = []
        for action in tree.args.get("actions") or []:
            changes.extend(self._action(schema, table, action))
        return changes

    def _action(self, schema: str, table: str,
                action: exp.Expression) -> list[SchemaChange]:
        if isinstance(action, exp.ColumnDef):
            return [_column(ChangeKind.ADD_COLUMN, schema, table, action)]
        if isinstance(action, exp.ModifyColumn):
            definition = action.this
            if not isinstance(definition, exp.ColumnDef):
                raise NotUnderstood("MODIFY without a column definition")
            modified = _column(ChangeKind.MODIFY_COLUMN, schema, table, definition)
            old = action.args.get("rename_from")
            if old is None or old.name == definition.name:
                return [modified]
            # CHANGE old new <type>: a rename, then the new name's definition.
            return [SchemaChange(ChangeKind.RENAME_COLUMN, schema, table, column=old.name,
                                 new_name=definition.name), modified]
        if isinstance(action, exp.RenameColumn):
            return [SchemaChange(ChangeKind.RENAME_COLUMN, schema, table,
                                 column=_column_name(action.this),
                                 new_name=_column_name(action.args["to"]))]
        if isinstance(action, exp.AlterRename):
            new_schema, new_table = self._name(action.this)
            return [SchemaChange(ChangeKind.RENAME_TABLE, schema, table,
                                 new_schema=new_schema, new_name=new_table)]
        if isinstance(action, exp.Drop):
            kind = (action.args.get("kind") or "").upper()
            names = [t.name for t in action.args.get("tables") or []]
            if kind == "COLUMN":
                return [SchemaChange(ChangeKind.DROP_COLUMN, schema, table, column=n)
                        for n in names]
            if kind in ("INDEX", "KEY"):
                return [SchemaChange(ChangeKind.DROP_INDEX, schema, table, index=n)
                        for n in names]
            if kind in ("FOREIGN KEY", "CONSTRAINT", "CHECK"):
                return []  # rules of the source's writes, not of the replicated data
            raise NotUnderstood(f"DROP {kind} in ALTER TABLE")
        if isinstance(action, exp.AddConstraint):
            return [c for e in action.expressions for c in _constraint(schema, table, e)]
        if isinstance(action, (exp.AlterColumn, exp.RenameIndex, exp.DropPrimaryKey,
                               exp.ForceProperty)):
            # Defaults, index names, a rebuild: the rows stay as they are. (A primary key
            # change shows in the key flags of the row events that follow.)
            return []
        raise NotUnderstood(f"ALTER TABLE action {type(action).__name__}")


def _mariadb_to_sqlglot(sql: str, tokens: list[Token]) -> str:
    """``sql`` with the MariaDB words sqlglot does not read taken out or respelled:
    ``ALTER ONLINE|IGNORE TABLE`` (how, not what) and ``RENAME AS`` (= ``RENAME TO``)."""
    cuts: list[tuple[int, int, str]] = []
    if tokens and tokens[0].text.upper() == "ALTER":
        for token in tokens[1:]:
            if token.text.upper() not in ("ONLINE", "IGNORE"):
                break
            cuts.append((token.start, token.end + 1, ""))
    for prev, token in itertools.pairwise(tokens):
        if prev.text.upper() == "RENAME" and token.token_type is TokenType.ALIAS:
            cuts.append((token.start, token.end + 1, "TO"))
    for start, end, text in reversed(cuts):
        sql = sql[:start] + text + sql[end:]
    return sql


def _split(tokens: list[Token], separator: TokenType) -> list[list[Token]]:
    parts: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type is separator:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _table(tokens: list[Token]) -> exp.Table:
    """``name`` or ``schema.name`` from identifier tokens (quoted or not)."""
    names = [t.text for t in tokens if t.token_type is not TokenType.DOT]
    dots = [t for t in tokens if t.token_type is TokenType.DOT]
    if not 1 <= len(names) <= 2 or len(dots) != len(names) - 1:
        raise NotUnderstood(f"not a table name: {' '.join(t.text for t in tokens)}")
    if len(names) == 1:
        return exp.Table(this=exp.to_identifier(names[0]))
    return exp.Table(this=exp.to_identifier(names[1]), db=exp.to_identifier(names[0]))


def _column_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Ordered):
        node = node.this
    if isinstance(node, exp.ColumnPrefix):
        node = node.this
    if isinstance(node, exp.Anonymous) and isinstance(node.this, str) \
            and all(isinstance(a, exp.Literal) for a in node.expressions):
        return node.this  # b(10) in CREATE INDEX: a prefix of column b, read as a call
    if isinstance(node, (exp.Column, exp.Identifier)):
        return node.name
    raise NotUnderstood(f"not a column: {node.sql('mysql')}")


def _temporary(tree: exp.Create) -> bool:
    props = tree.args.get("properties")
    return props is not None and any(isinstance(p, exp.TemporaryProperty)
                                      for p in props.expressions)


def _column(kind: ChangeKind, schema: str, table: str, col: exp.ColumnDef) -> SchemaChange:
    data_type = col.args.get("kind")
    if data_type is None:
        raise NotUnderstood(f"column {col.name} without a type")
    nullable: bool | None = None
    for constraint in col.args.get("constraints") or []:
        what = constraint.args.get("kind")
        if isinstance(what, exp.NotNullColumnConstraint):
            nullable = bool(what.args.get("allow_null"))
        elif isinstance(what, exp.PrimaryKeyColumnConstraint):
            nullable = False
    position = col.args.get("position")
    where = None
    if isinstance(position, exp.ColumnPosition):
        place = (position.args.get("position") or "").upper()
        where = "FIRST" if place == "FIRST" else f"AFTER {_column_name(position.this)}"
    return SchemaChange(kind, schema, table, column=col.name,
                        column_type=data_type.sql("mysql"), nullable=nullable,
                        position=where)


def _constraint(schema: str, table: str, node: exp.Expression) -> list[SchemaChange]:
    if isinstance(node, exp.IndexColumnConstraint):
        name = node.this.name if node.this is not None else None
        return [SchemaChange(ChangeKind.CREATE_INDEX, schema, table, index=name,
                             columns=tuple(_column_name(c) for c in node.expressions))]
    if isinstance(node, exp.UniqueColumnConstraint):
        spec = node.this
        if not isinstance(spec, exp.Schema):
            raise NotUnderstood("UNIQUE without columns")
        name = spec.this.name if spec.this is not None else None
        return [SchemaChange(ChangeKind.CREATE_INDEX, schema, table, index=name,
                             columns=tuple(_column_name(c) for c in spec.expressions),
                             unique=True)]
    if isinstance(node, (exp.PrimaryKey, exp.ForeignKey, exp.Constraint,
                         exp.CheckColumnConstraint)):
        return []  # the key shows in the row events' key flags; the rest rules source writes
    raise NotUnderstood(f"ADD {type(node).__name__}")
