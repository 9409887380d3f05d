"""Configuration of a SQL target (``target: {type: sql, ...}``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from consumers.naming import NamePolicy

#: SQLAlchemy backends of the MySQL family: statement events can be replayed there.
MYSQL_FAMILY = ("mysql", "mariadb")


class SqlTarget(BaseModel):
    """A MySQL/MariaDB, PostgreSQL or Oracle database reached through SQLAlchemy."""

    model_config = {"extra": "forbid"}

    type: Literal["sql"] = "sql"
    #: SQLAlchemy URL of the target, e.g. ``mysql+pymysql://user@host:3306/`` or
    #: ``postgresql+psycopg://user@host:5432/db``. Put the password in ``password``.
    url: str
    #: The target's password; overrides one written in ``url``. Never logged.
    password: SecretStr | None = None
    #: Statement events (DDL, statement-format DML): ``apply`` (MySQL-family targets only),
    #: ``skip`` them, or stop with an ``error``. Default: apply on MySQL/MariaDB; skip where
    #: ``create_tables`` makes the tables from the row images; else error.
    statements: Literal["apply", "skip", "error"] | None = None
    #: CREATE/DROP TRIGGER statement events: ``skip`` (the default) leaves them out, since
    #: the row images already carry what a source trigger did and a trigger made on the
    #: target would do it a second time; ``apply`` replays them like other statements.
    triggers: Literal["skip", "apply"] = "skip"
    #: Create a table the THL names and the target lacks (schema too), add a column a row
    #: image has and the table lacks, widen a column whose source type widened; a column
    #: dropped or narrowed on the source follows ``schema_changes`` (see the README's
    #: "Schema changes as data"). Default: on
    #: for PostgreSQL and Oracle; MySQL-family targets get their tables from the replayed
    #: DDL and cannot turn it on.
    create_tables: bool | None = None
    #: A zero date ('0000-00-00', '0000-00-00 00:00:00') on a target that has none
    #: (PostgreSQL, Oracle): ``null`` stores NULL, logs a warning and counts it in
    #: ``trep_values_changed_total{kind="zero_date"}``; ``error`` stops the group at its
    #: seqno. MySQL-family targets store zero dates as they are.
    zero_dates: Literal["null", "error"] = "null"
    #: U+0000 in text on PostgreSQL (its text types cannot hold it): ``error`` stops the group
    #: at its seqno; ``strip`` removes it and counts the value in
    #: ``trep_values_changed_total{kind="nul_character"}``. Other targets store it.
    nul_characters: Literal["error", "strip"] = "error"
    #: A schema, table or column name longer than the target's identifiers (PostgreSQL 63
    #: bytes, Oracle 128): ``map`` cuts it and ends it with a hash of the whole name
    #: (``consumers.naming``); ``strict`` stops the group at its seqno.
    names: NamePolicy = "map"
    #: How a block's row changes reach the target. ``set-based``: the changes of each table
    #: with a primary key are collapsed to each key's last image and sent as one multi-row
    #: upsert and one multi-key DELETE per table (MySQL-family targets through PyMySQL and
    #: PostgreSQL through psycopg; keyless tables, statements, key moves, tables with
    #: triggers or, on MySQL-family targets, a second unique key go in order; a block the
    #: target refuses in that form goes again in order). ``ordered``: every row change as
    #: its own statement, in source order.
    apply: Literal["set-based", "ordered"] = "set-based"
    #: Rows sent to the driver in one executemany at most.
    batch_rows: int = Field(1000, gt=0)
    #: Also record every applied seqno in ``trep_apply_audit`` (same transaction as the
    #: data), so tests can count how often each seqno was applied. Off in production.
    audit_seqnos: bool = False

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a SQLAlchemy URL: {exc}") from exc
        return value

    def engine_url(self) -> URL:
        """The target URL with the configured password."""
        url = make_url(self.url)
        if self.password is not None:
            url = url.set(password=self.password.get_secret_value())
        return url

    @property
    def dialect(self) -> str:
        """The SQLAlchemy backend name: ``mysql``, ``mariadb``, ``postgresql``, ``oracle`` ..."""
        return make_url(self.url).get_backend_name()
