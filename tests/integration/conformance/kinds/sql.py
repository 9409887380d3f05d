"""The SQL kinds: MariaDB (tables from the replayed DDL) and PostgreSQL (tables made by the
applier from the THL's row images: ``create_tables``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pymysql

from stack.service import Service

from ...consumers.tables import _norm
from ..tables import Table, mysql_columns, mysql_name
from .base import Kind, Row


class MariaDBKind(Kind):
    name = "mariadb"
    zero_dates_kept = True
    replays_ddl = True
    servers = ("mariadb_target",)
    down = "mariadb_target"

    @property
    def port(self) -> int:
        port = self.servers_up["mariadb_target"].port
        assert port is not None
        return port

    def _sql(self, *statements: str) -> list[Row]:
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                               charset="utf8mb4", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                rows: list[Row] = []
                for stmt in statements:
                    cur.execute(stmt)
                    rows = list(cur.fetchall())
                return rows
        finally:
            conn.close()

    def target(self, service: str) -> dict[str, Any]:
        return {"type": "sql", "url": f"mysql+pymysql://root@127.0.0.1:{self.port}/",
                "audit_seqnos": True}

    def create(self, schema: str, tables: Sequence[Table]) -> None:
        # The tables come with the replayed DDL; their database was made before the
        # extractor started.
        self._sql(f"CREATE DATABASE IF NOT EXISTS {schema}")

    def rows(self, schema: str, table: Table) -> list[Row]:
        return self._sql(f"SELECT {mysql_columns(table)} FROM {schema}.{mysql_name(table)}")

    def columns(self, schema: str, name: str) -> set[str] | None:
        found = self._sql("SELECT column_name FROM information_schema.columns WHERE "
                          f"table_schema = '{schema}' AND table_name = '{name}'")
        return {r[0] for r in found} or None

    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        # The replay runs the CREATE TABLEs again.
        self._sql(f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}")

    def drop(self, schema: str, service: str) -> None:
        self._sql(f"DROP DATABASE IF EXISTS {schema}",
                  f"DROP DATABASE IF EXISTS tungsten_{service}")

    def server(self) -> Service:
        return self.servers_up["mariadb_target"]

    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                               charset="utf8mb4", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"UPDATE {schema}.{mysql_name(table)} SET `{column}` = %s "
                            f"WHERE `{table.key[0]}` = %s", (value, key))
        finally:
            conn.close()


class PostgreSQLKind(Kind):
    name = "postgresql"
    servers = ("postgresql",)
    down = "postgresql"
    #: The target keeps its key; a new row repeating a value of it is refused.
    key_lost_stop = "duplicate key"

    @property
    def port(self) -> int:
        port = self.servers_up["postgresql"].port
        assert port is not None
        return port

    def _sql(self, *statements: str) -> list[Row]:
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", options="-c timezone=UTC",
                             autocommit=True) as conn:
            rows: list[Row] = []
            for stmt in statements:
                cur = conn.execute(stmt.encode())
                if cur.description is not None:
                    rows = list(cur.fetchall())
            return rows

    def target(self, service: str) -> dict[str, Any]:
        return {"type": "sql", "statements": "skip", "audit_seqnos": True,
                "url": f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"}

    def rows(self, schema: str, table: Table) -> list[Row]:
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in table.columns)
        name = f'"{schema}"."' + table.name.replace('"', '""') + '"'
        # A table is made with its first row change: one no row reached is not there.
        if self._sql(f"SELECT to_regclass('{name.replace(chr(39), chr(39) * 2)}')") == [(None,)]:
            return []
        return [self._normal(table, r) for r in self._sql(f"SELECT {cols} FROM {name}")]

    def _normal(self, table: Table, row: Row) -> Row:
        return tuple(_norm(c, v) for c, v in zip(table.columns, row, strict=True))

    def normalize(self, table: Table, row: Row) -> Row:
        return self._normal(table, row)

    def columns(self, schema: str, name: str) -> set[str] | None:
        found = self._sql("SELECT column_name FROM information_schema.columns WHERE "
                          f"table_schema = '{schema}' AND table_name = '{name}'")
        return {r[0] for r in found} or None

    def empty(self, schema: str, tables: Sequence[Table]) -> None:
        # The replay makes the schema and its tables again from the THL.
        self._sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def drop(self, schema: str, service: str) -> None:
        self._sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE',
                  f'DROP SCHEMA IF EXISTS "tungsten_{service}" CASCADE')

    def server(self) -> Service:
        return self.servers_up["postgresql"]

    def tamper(self, schema: str, table: Table, key: int, column: str, value: Any) -> None:
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            name = '"' + table.name.replace('"', '""') + '"'
            conn.execute(f'UPDATE "{schema}".{name} SET "{column}" = %s '
                         f'WHERE "{table.key[0]}" = %s', (value, key))
