"""The demo on change topics: a data team's consumer reads them and folds them into rows.

``rebuild`` deletes the demo tables' topics (the group then starts after the marker, as a
freshly provisioned one would); ``digests`` prints a few records of the customers topic as a
plain confluent-kafka consumer decodes them (Avro through the registry), then materializes
every demo topic (latest value per key; creates and deletes replayed for the keyless table)
for the comparison with the source.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka.admin import AdminClient

from consumers.changes.config import ChangesTarget
from consumers.changes.readback import ChangeReader, materialize
from demo.compare import Digest, digest
from demo.tables import SCHEMA, DemoTable
from trep.config import ServiceConfig


class ChangesDemoTarget:
    """A ``changes`` consumer group's topics."""

    def __init__(self, cfg: ServiceConfig, group: str, tables: Sequence[DemoTable]) -> None:
        target = cfg.consumers[group].target
        if not isinstance(target, ChangesTarget):
            raise TypeError(f"{group} is not a changes group")
        self.target = target
        self.group = group
        self.tables = tables
        self.bootstrap = target.bootstrap_servers or cfg.kafka.bootstrap_servers
        self.topics = {t.name: target.topic.format(service=cfg.service, schema=SCHEMA,
                                                   table=t.name) for t in tables}
        self.registry = target.schema_registry.url if target.schema_registry else None

    def rebuild(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        present = admin.list_topics(timeout=30).topics
        names = [t for t in self.topics.values() if t in present]
        if not names:
            return
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)
        deadline = time.monotonic() + 60
        while any(t in admin.list_topics(timeout=30).topics for t in names):
            if time.monotonic() > deadline:
                raise SystemExit(f"change topics {names} are still there after 60 s")
            time.sleep(0.3)

    def show(self, table: str, count: int = 3) -> None:
        """Print the last ``count`` records of a table's topic, decoded."""
        reader = ChangeReader(self.bootstrap, self.registry)
        changes = list(reader.records([self.topics[table]]))
        print(f"\n=== {self.group}: topic {self.topics[table]} ({len(changes)} records, "
              f"{self.target.envelope} envelope, {self.target.format}), the last {count} "
              "row changes as a consumer decodes them ===")
        shown = [c for c in changes if c.op is not None][-count:]
        for c in shown:
            print(f"  partition {c.partition} offset {c.offset} seqno {c.seqno} op {c.op} "
                  f"key {c.key}")
            print(f"    after {c.after}" if c.after is not None else f"    before {c.before}")

    def digests(self) -> dict[str, Digest]:
        self.show(self.tables[0].name)
        reader = ChangeReader(self.bootstrap, self.registry)
        out = {}
        for table in self.tables:
            keyed = table.name == "customers"  # audit_log has no primary key
            rows = materialize(reader.records([self.topics[table.name]]), keyed)
            out[table.name] = digest([[r.get(c) for c in table.columns] for r in rows])
        return out
