"""How source names become change-topic names: a table's topic, Avro names of columns.

A table's topic comes from the target's template (``{service}.{schema}.{table}`` by default,
or the first ``topics:`` pattern that matches ``schema.table``). Kafka topic names allow only
``[A-Za-z0-9._-]``, at most 249 characters: a table whose name the template cannot express is
a data error naming the table and the seqno, never a silently mangled name.

Avro names allow only ``[A-Za-z_][A-Za-z0-9_]*``: any other character of a column or topic
name is written ``_uXXXX`` (UTF-16 code units, Debezium's ``avro_unicode`` adjustment), and
the field keeps the source name under ``tungsten.column``. JSON keeps the source names.
"""

from __future__ import annotations

import fnmatch
import re

from consumers.changes.config import ChangesTarget
from consumers.errors import DataError

_LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_AVRO_CHAR = re.compile(r"[A-Za-z0-9_]")


class TopicNames:
    """The topic of each table, from the target's templates."""

    def __init__(self, cfg: ChangesTarget, service: str) -> None:
        self.cfg = cfg
        self.service = service
        self._cache: dict[tuple[str, str], str] = {}

    def template(self, schema: str, table: str) -> str:
        """The template that applies to ``schema.table``."""
        name = f"{schema}.{table}"
        for pattern, template in self.cfg.topics.items():
            if fnmatch.fnmatchcase(name, pattern):
                return template
        return self.cfg.topic

    def topic(self, schema: str, table: str, seqno: int) -> str:
        """The table's topic; DataError if it is not a legal Kafka topic name."""
        found = self._cache.get((schema, table))
        if found is not None:
            return found
        template = self.template(schema, table)
        name = template.format(service=self.service, schema=schema, table=table)
        if not _LEGAL.match(name) or name in (".", ".."):
            raise DataError(
                f"table {schema}.{table} (seqno {seqno}): the topic template {template!r} "
                f"gives {name!r}, which is not a Kafka topic name (only A-Z a-z 0-9 . _ -, "
                f"at most 249 characters). Map the table to a topic with the target's "
                f"`topics: {{\"{schema}.{table}\": \"...\"}}`, filter it out of this group, "
                f"or skip the seqno.", seqno=seqno)
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
