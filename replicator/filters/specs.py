"""Configuration of the filter chain: one model per filter ``type`` (a discriminated union).

```yaml
filters:
  replicate: ["shop.*"]
  chain:
    - {type: dropcolumn, tables: ["shop.users"], columns: ["password_hash"]}
    - {type: rename, schemas: {shop: store}, tables: {"shop.users": "customers"}}
    - {type: enumtostring}
    - {type: pkey, tables: {"shop.audit": ["id", "at"]}}
    - {type: mask, tables: ["shop.users"], columns: ["email"], method: hash, salt: "..."}
    - {type: custom, path: "mypackage.filters:make_filter", options: {threshold: 3}}
```

Table patterns are ``schema.table`` with shell wildcards (``shop.*``, ``*.users``); column
patterns are shell wildcards on the column name. Every match uses the names an event has
when it reaches that filter (a rename earlier in the chain changes what later ones see).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator


class _Spec(BaseModel):
    model_config = {"extra": "forbid"}

    #: Shown in errors and in ``thl filter-test``; default: the type and its position.
    name: str | None = None


class DropColumn(_Spec):
    """Remove columns (values and specs) from row changes. A key column cannot be dropped."""

    type: Literal["dropcolumn"]
    tables: list[str] = Field(default_factory=lambda: ["*.*"])
    columns: list[str]


class Rename(_Spec):
    """Rename schemas, tables and columns of row changes (and statements' default schema).

    The SQL text of a statement is not rewritten: a renamed table's DDL still names the old
    one, so rename for targets that create their tables from row changes.
    """

    type: Literal["rename"]
    #: schema -> new schema
    schemas: dict[str, str] = Field(default_factory=dict)
    #: "schema.table" -> "table" (same schema) or "schema.table" (moved)
    tables: dict[str, str] = Field(default_factory=dict)
    #: "schema.table" pattern -> {column: new column}
    columns: dict[str, dict[str, str]] = Field(default_factory=dict)

    @field_validator("tables")
    @classmethod
    def _qualified(cls, value: dict[str, str]) -> dict[str, str]:
        for old in value:
            if "." not in old:
                raise ValueError(f"rename tables: {old!r} must be schema.table")
        return value


class EnumToString(_Spec):
    """ENUM and SET columns become VARCHAR columns holding the member names (values already
    travel as names in the THL; the specs change, so targets create text columns)."""

    type: Literal["enumtostring"]
    tables: list[str] = Field(default_factory=lambda: ["*.*"])


class PrimaryKey(_Spec):
    """Declare a primary key for tables that have none (or override the source's). Key
    columns keep their table order."""

    type: Literal["pkey"]
    #: "schema.table" pattern -> key columns
    tables: dict[str, list[str]]


class Mask(_Spec):
    """Hide column values: a fixed replacement, or a keyed hash (HMAC-SHA256, hex) that stays
    the same for the same value, so joins and keys still work. NULL stays NULL."""

    type: Literal["mask"]
    tables: list[str] = Field(default_factory=lambda: ["*.*"])
    columns: list[str]
    method: Literal["mask", "hash"] = "mask"
    #: The text every masked value becomes (method mask).
    replacement: str = "****"
    #: The key of the hash (method hash). Never logged.
    salt: SecretStr = SecretStr("")


class Custom(_Spec):
    """A user's filter: ``path`` = ``package.module:factory``; ``factory(**options)`` returns
    a callable that takes a THL event and returns it (changed or not) or None."""

    type: Literal["custom"]
    path: str
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("path")
    @classmethod
    def _dotted(cls, value: str) -> str:
        module, _, attr = value.partition(":")
        if not module or not attr:
            raise ValueError(f"{value!r}: use package.module:factory")
        return value


FilterSpec = Annotated[DropColumn | Rename | EnumToString | PrimaryKey | Mask | Custom,
                       Field(discriminator="type")]
