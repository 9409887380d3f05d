"""Configuration of a MongoDB target (``target: {type: mongodb, ...}``).

```yaml
consumers:
  mongo:
    target:
      type: mongodb
      url: mongodb://tungsten@mongo1:27017,mongo2:27017/?replicaSet=rs0
      password: ...                 # or in the URL; never logged
      database: "{schema}"          # default: one database per source schema
      collection: "{table}"         # default: one collection per source table
      transactions: auto            # auto | on | off
```
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from consumers.naming import NamePolicy, check_template

#: The fields a name template may use.
TEMPLATE_FIELDS = {"database": {"schema", "service"}, "collection": {"schema", "table"}}


class MongoTarget(BaseModel):
    """A MongoDB deployment (or a MongoDB-wire server such as FerretDB) reached by pymongo."""

    model_config = {"extra": "forbid"}

    type: Literal["mongodb"] = "mongodb"
    #: MongoDB connection string (``mongodb://`` or ``mongodb+srv://``), options included
    #: (``replicaSet``, ``w``, ``journal``, ``tls`` ...). Put the password in ``password``.
    url: str
    #: The password of the URL's user; overrides one written in ``url``. Never logged.
    password: SecretStr | None = None
    #: Database of a source table: a template of ``{schema}`` and ``{service}``.
    database: str = "{schema}"
    #: Collection of a source table: a template of ``{schema}`` and ``{table}``, e.g.
    #: ``"{schema}.{table}"`` with a fixed ``database``.
    collection: str = "{table}"
    #: Percent-encode, in collection and field names, the characters some server cannot
    #: take there: ``%`` ``$`` ``.`` ``"`` ``\\`` and control characters (``a.b`` becomes
    #: ``a%2Eb``); a column named like one of the applier's own fields (``_id``,
    #: ``_seqno``, ``_deleted``, ``_op``) gets its ``_`` encoded. Reversible and injective.
    #: ``false``: names go verbatim and a name the server refuses stops the group
    #: (data error).
    escape_names: bool = True
    #: A database name the server refuses (a space, a dot, over 63 bytes ...): ``map`` makes
    #: each refused character ``_`` and cuts a long name with a hash (two tables meeting on
    #: one collection stop the group); ``strict`` stops the group on such a name.
    names: NamePolicy = "map"
    #: ``on``: data and position of a block in one multi-document transaction (a replica set
    #: or sharded cluster; refused where the server has none, FerretDB included); ``off``:
    #: seqno-guarded writes, position last; ``auto``: ``on`` where the server has
    #: transactions.
    transactions: Literal["auto", "on", "off"] = "auto"
    #: DECIMAL columns of up to 34 digits, and integers beyond signed 64 bits, as
    #: ``decimal128`` or as exact decimal ``string``s; ``auto``: Decimal128 unless the server
    #: has none (FerretDB). Wider DECIMALs are always strings (Decimal128 holds 34 digits).
    decimal: Literal["auto", "decimal128", "string"] = "auto"
    #: Zero and partial dates ('0000-00-00', '2024-03-00'), which no BSON date holds:
    #: ``null`` stores null, counted in ``trep_values_changed_total{kind="zero_date"}``;
    #: ``text`` the string MySQL prints (what this applier did before 2026-11); ``error``
    #: stops the group at the seqno (``consumers.zero_dates``).
    zero_dates: Literal["null", "text", "error"] = "null"
    #: Text columns that hold JSON, embedded as documents like JSON columns:
    #: ``schema.table.column`` patterns (``*`` and ``?`` wildcards). MariaDB's JSON type is a
    #: LONGTEXT to the binlog, so its JSON columns must be named here; a MySQL JSON column
    #: is embedded without. A named column whose value is not JSON stops the group.
    json_columns: list[str] = Field(default_factory=list)
    #: Write operations per command at most (also bounded by 8 MiB of documents); also how
    #: many documents of an open block are collected before they are written ahead, while
    #: the block goes on (its position is still written last).
    batch_ops: int = Field(2000, gt=0, le=100_000)
    #: How long to look for a usable server before calling the target down (milliseconds).
    server_selection_timeout_ms: int = Field(5000, gt=0)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if value.startswith("mongodb+srv://"):
            return value  # checked when connecting: parsing it means a DNS lookup
        if not value.startswith("mongodb://"):
            raise ValueError("a MongoDB connection string starts with mongodb:// or "
                             "mongodb+srv://")
        # Only a config with a MongoDB target pays for importing pymongo.
        from pymongo.errors import ConfigurationError, InvalidURI
        from pymongo.uri_parser import parse_uri

        try:
            parse_uri(value)
        except (InvalidURI, ConfigurationError, ValueError) as exc:
            raise ValueError(f"not a MongoDB connection string: {exc}") from exc
        return value

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        return check_template(value, TEMPLATE_FIELDS["database"], "database")

    @field_validator("collection")
    @classmethod
    def _collection(cls, value: str) -> str:
        return check_template(value, TEMPLATE_FIELDS["collection"], "collection")

    def is_json(self, schema: str, table: str, column: str) -> bool:
        """Whether a text column is declared to hold JSON (``json_columns``)."""
        name = f"{schema}.{table}.{column}"
        return any(fnmatchcase(name, pattern) for pattern in self.json_columns)

    def client_options(self) -> dict[str, Any]:
        """``MongoClient`` options from this configuration (the password overrides the URL's)."""
        options: dict[str, Any] = {
            "appname": "tungsten-replicator", "tz_aware": False,
            "serverSelectionTimeoutMS": self.server_selection_timeout_ms,
            "connectTimeoutMS": self.server_selection_timeout_ms}
        if self.password is not None:
            options["password"] = self.password.get_secret_value()
        return options

    def display_url(self) -> str:
        """The connection string without any password, for errors and status."""
        scheme, rest = self.url.split("://", 1)
        head, sep, tail = rest.partition("/")
        if "@" in head:
            creds, host = head.rsplit("@", 1)
            head = f"{creds.split(':', 1)[0]}@{host}"
        return f"{scheme}://{head}{sep}{tail}"
