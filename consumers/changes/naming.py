"""How source names become change-topic names: a table's topic, Avro names of columns.

A table's topic comes from the target's template (``{service}.{schema}.{table}`` by default,
or the first ``topics:`` pattern that matches ``schema.table``), made a Kafka topic name by
the one naming rule (``consumers.naming``): Kafka allows only ``[A-Za-z0-9._-]``, at most
249 characters, so any other character becomes ``_`` (Debezium's rule) and a longer name is
cut and ends with a hash. Two tables that meet on one topic are refused (a data error naming
both); ``names: strict`` refuses every name the rule would change.

Avro names allow only ``[A-Za-z_][A-Za-z0-9_]*``: any other character of a column or topic
name is written ``_uXXXX`` (UTF-16 code units, Debezium's ``avro_unicode`` adjustment), and
the field keeps the source name under ``tungsten.column``. JSON keeps the source names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from consumers.changes.config import ChangesTarget
from consumers.errors import DataError
from consumers.naming import NameOwners, Overrides, StoreRule, UnfitName

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_AVRO_CHAR = re.compile(r"[A-Za-z0-9_]")

#: Kafka's topic names (``org.apache.kafka.common.internals.Topic``).
TOPIC = StoreRule("Kafka topic name", 249,
                  takes=lambda ch: ch.isascii() and (ch.isalnum() or ch in "._-"),
                  reserved=frozenset({".", ".."}))


class TopicNames:
    """The topic of each table, from the target's templates and the naming rule."""

    def __init__(self, cfg: ChangesTarget, service: str) -> None:
        self.cfg = cfg
        self.service = service
        self.overrides = Overrides(cfg.topics)
        self.owners = NameOwners("topic", "topics")
        self._cache: dict[tuple[str, str], str] = {}

    def template(self, schema: str, table: str) -> str:
        """The template that applies to ``schema.table``."""
        return self.overrides.match(schema, table) or self.cfg.topic

    def load(self, tables: Iterable[tuple[str, str]]) -> None:
        """The tables this group wrote in earlier sessions own their topics (as the naming
        rule maps them today): another table that meets one of them is refused."""
        owners = {}
        for schema, table in tables:
            try:
                owners[self._name(schema, table)] = f"{schema}.{table}"
            except UnfitName:
                continue  # refused when the table is written again, with its seqno
        self.owners.load(owners)

    def release(self, schema: str, table: str) -> None:
        """The table left its topic (renamed, or dropped under ``evolve``)."""
        name = self._cache.pop((schema, table), None)
        if name is not None and self.owners.owner(name) == f"{schema}.{table}":
            self.owners.release(name)

    def _name(self, schema: str, table: str) -> str:
        template = self.template(schema, table)
        return TOPIC.name(template.format(service=self.service, schema=schema, table=table),
                          self.cfg.names, f"table {schema}.{table}")

    def topic(self, schema: str, table: str, seqno: int) -> str:
        """The table's topic; DataError if no topic can hold it (strict names, collision)."""
        found = self._cache.get((schema, table))
        if found is not None:
            return found
        template = self.template(schema, table)
        try:
            name = self._name(schema, table)
            self.owners.claim(name, f"{schema}.{table}")
        except UnfitName as exc:
            raise DataError(
                f"{exc} (seqno {seqno}, topic template {template!r}). Map the table with the "
                f"target's `topics: {{\"{schema}.{table}\": \"...\"}}`, filter it out of this "
                f"group, or skip the seqno.", seqno=seqno) from exc
        self._cache[(schema, table)] = name
        return name


def avro_name(name: str) -> str:
    """``name`` as a legal Avro name: other characters as ``_uXXXX`` (UTF-16 units)."""
    if _AVRO_NAME.match(name):
        return name
    out = []
    for i, ch in enumerate(name):
        if _AVRO_CHAR.match(ch) and not (i == 0 and ch.isdigit()):
            out.append(ch)
            continue
        units = ch.encode("utf-16-be")
        out.extend(f"_u{int.from_bytes(units[j:j + 2], 'big'):04x}"
                   for j in range(0, len(units), 2))
    return "".join(out) or "_"


def avro_namespace(name: str) -> str:
    """A dotted name (a topic) as an Avro namespace: each part a legal Avro name."""
    return ".".join(avro_name(part) for part in name.split("."))
