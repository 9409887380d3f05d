"""How source names become warehouse names: Delta table paths and catalog names, path
segments, quoted Spark SQL identifiers.

A source table's Delta table comes from the target's ``table_path`` template (default
``{location}/{schema}/{table}``) or its ``table_name`` (a table in Spark's catalog), with
schema and table made path-safe. Column names are kept as they are: Delta's column mapping
takes any name, and every identifier is quoted where it goes into SQL text.
"""

from __future__ import annotations

from dataclasses import dataclass

from consumers.warehouse.config import WarehouseTarget


@dataclass(frozen=True)
class TableRef:
    """A Delta table: by path (a URI) or by name in Spark's catalog."""

    source: str
    path: str | None = None
    name: str | None = None

    @property
    def sql(self) -> str:
        if self.path is not None:
            return "delta." + quote_name(self.path)
        return ".".join(quote_name(part) for part in (self.name or self.source).split("."))

    def __str__(self) -> str:
        return self.path or self.name or self.source


def table_ref(cfg: WarehouseTarget, schema: str, table: str) -> TableRef:
    """The Delta table of source table ``schema.table``."""
    names = {"location": cfg.location, "schema": path_safe(schema), "table": path_safe(table)}
    if cfg.table_name is not None:
        return TableRef(f"{schema}.{table}", name=cfg.table_name.format(**names))
    template = cfg.table_path or "{location}/{schema}/{table}"
    path = template.format(**names)
    return TableRef(f"{schema}.{table}",
                    path=f"file://{path}" if path.startswith("/") else path)


def quote_name(name: str) -> str:
    """A Spark SQL identifier, quoted with backticks."""
    return "`" + name.replace("`", "``") + "`"


def path_safe(name: str) -> str:
    """A schema or table name as one path segment: [A-Za-z0-9_] kept, every other byte of
    its UTF-8 form as ``-hh`` (injective: '-' appears only as that escape)."""
    out = []
    for ch in name:
        if ch.isascii() and (ch.isalnum() or ch == "_"):
            out.append(ch)
        else:
            out.extend(f"-{b:02x}" for b in ch.encode())
    return "".join(out) or "-"
