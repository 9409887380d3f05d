"""Purging the THL: Kafka's DeleteRecords below a seqno, never past a consumer group.

A group's stored position names the last seqno it applied; its next start checks that
seqno's epoch in the THL (the handshake), so a purge keeps every record from the lowest
position of any group on. Going further breaks those groups and must be asked for by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from thl_topics.admin import PURGEABLE, check_retention, describe_configs
from thl_topics.errors import ThlError
from thl_topics.reader import ThlReader


class PurgeRefused(ThlError):
    """Purging there would delete events a consumer group still needs."""


@dataclass(frozen=True)
class PurgePlan:
    """What a purge below ``seqno`` would do."""

    seqno: int
    #: Records below this offset go.
    offset: int
    #: The first seqno kept now (None: empty topic).
    first_kept: int | None
    #: Groups whose position is below ``seqno``: they would stop (seqno -1: no position).
    broken: dict[str, int]


def plan_purge(reader: ThlReader, seqno: int, positions: Mapping[str, int]) -> PurgePlan:
    """Where a purge below ``seqno`` cuts the topic, and which groups it would break."""
    low, _ = reader.watermarks()
    first = reader.sample(low)
    broken = {group: pos for group, pos in positions.items() if pos < seqno}
    return PurgePlan(seqno, reader.offset_of(seqno), None if first is None else first[1],
                     broken)


def safe_seqno(positions: Mapping[str, int]) -> int | None:
    """The highest seqno a purge may go up to without breaking a group (None: no group)."""
    return min(positions.values()) if positions else None


def purge(admin: AdminClient, topic: str, plan: PurgePlan, force: Iterable[str] = (),
          timeout: float = 30.0) -> None:
    """Delete the records below ``plan.offset``; PurgeRefused if a group not named in
    ``force`` would lose what it needs."""
    unforced = {g: p for g, p in plan.broken.items() if g not in set(force)}
    if unforced:
        groups = ", ".join(f"{g} (at seqno {p})" for g, p in sorted(unforced.items()))
        raise PurgeRefused(
            f"purging {topic} below seqno {plan.seqno} would delete events that consumer "
            f"group(s) {groups} still need; purge below the lowest position instead, or name "
            "the groups you accept to break with --force (they will need re-provisioning)")
    allow_delete_records(admin, topic, timeout)
    futures = admin.delete_records([TopicPartition(topic, 0, plan.offset)],
                                   request_timeout=timeout)
    for future in futures.values():
        try:
            future.result(timeout)
        except KafkaException as exc:
            raise ThlError(f"{topic}: DeleteRecords below offset {plan.offset} failed: "
                           f"{exc.args[0].str() if exc.args else exc}") from exc


def allow_delete_records(admin: AdminClient, topic: str, timeout: float = 30.0) -> None:
    """Make a compact-only THL topic accept DeleteRecords (compact,delete, infinite
    retention: Kafka still deletes nothing by itself)."""
    configs = describe_configs(admin, topic, timeout)
    check_retention(topic, configs)
    if "delete" in configs.get("cleanup.policy", "").split(","):
        return
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in PURGEABLE.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout)
