"""Parallel apply by shard (``channels: N``): which channel applies a seqno, and where the
channels stand. Tungsten's design (whitepaper "Parallel apply"), for appliers that declare
``Capabilities.channels``.

Shards and routes:

- A shard is a source schema (Tungsten's default). A seqno whose row changes all belong to
  one schema goes to that shard's channel; order is kept within a shard because one channel
  applies it, in THL order.
- A shard's channel is read from ``trep_shard_channel`` on the target; a shard seen for the
  first time gets ``crc32(shard) % N`` (stable across processes and restarts, unlike
  Python's ``hash()``) and that row is written before the seqno is handed to the channel,
  so a restart routes every seqno as before. An operator may insert rows before the group
  first goes online to pin shards to channels.
- A seqno is *critical* when it cannot be ordered by one shard: row changes of several
  schemas, a statement (DDL), a consistency check (it reads the target), a transaction cut
  into fragments (its later fragments may touch any schema, and they are not read yet), a
  provisioning mark without rows. Every channel commits what it holds, then channel 0
  applies the seqno alone, then the channels go on. A shard marked ``critical = 1`` in
  ``trep_shard`` is applied alone too, by its own channel.
- A seqno with nothing to apply (emptied by an extraction filter) belongs to no channel.

Positions: channel ``c`` keeps its own ``trep_commit_seqno`` row (``task_id = c``): every
seqno routed to ``c`` up to that seqno is applied, none after it. The lowest channel seqno
is the group's restart point: everything up to it is applied everywhere. A restart seeks
there and each channel skips the seqnos it already applied. An idle channel moves its row
up to the last seqno the group passed, so the restart point follows the busy channels.

Changing N is safe only when every channel row holds the same seqno (then the rows say
"everything up to S applied, nothing after", whatever the routing was): ``trepctl
offline`` drains every channel to one seqno before it stops (Tungsten's clean offline).
After a crash the rows differ, and a new N would route seqnos to channels that never saw
them: ``plan_channels`` refuses with the way out.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from consumers.applier import Applier
from consumers.errors import TerminalError
from consumers.position import Position
from thl_topics.event import RowChange, Statement, ThlEvent
from thl_topics.records import META_CHECK, META_PROVISION

log = logging.getLogger(__package__)


class ChannelError(TerminalError):
    """The stored channels cannot serve this configuration (count changed after a crash,
    a shard assigned to a channel the group does not have)."""

    code = "CHANNELS"

#: The channel that applies critical seqnos (alone, every other channel drained).
CRITICAL_CHANNEL = 0


class ChannelStore(Protocol):
    """Where a target keeps every channel's position and the shard assignments (Tungsten's
    ``trep_commit_seqno`` rows by ``task_id``, ``trep_shard_channel``, ``trep_shard``)."""

    def positions(self) -> dict[int, Position]:
        """Every stored channel position, by channel (``task_id``)."""

    def assignments(self) -> dict[str, int]:
        """shard -> channel, as stored."""

    def critical_shards(self) -> set[str]:
        """Shards an operator marked critical (applied alone)."""

    def assign(self, shard: str, channel: int) -> int:
        """Store ``shard -> channel`` unless the shard has a channel already; the stored one."""

    def rechannel(self, channels: int) -> None:
        """Rows ``0..channels-1`` all holding the (common) stored position, no other rows,
        no shard assignment. Only called when every stored row holds the same position."""

    def clear_assignments(self, at_or_above: int) -> None:
        """Forget the assignments to channels ``at_or_above`` and higher."""


class ChannelApplier(Applier, Protocol):
    """An applier that can apply in parallel (``capabilities.channels``): its ``position``,
    ``begin`` and ``commit`` work on its own channel's row (``ApplierContext.channel``)."""

    def channel_store(self) -> ChannelStore:
        """The store of every channel of the group (connect() first)."""


@dataclass(frozen=True)
class Route:
    """Where one seqno goes."""

    #: The channel that applies it; None: nothing to apply, no channel.
    channel: int | None
    #: Its shard (schemas joined by ',' when several).
    shard: str
    #: Why it is applied alone (None: in parallel with the other channels).
    critical: str | None = None


def shard_channel(shard: str, channels: int) -> int:
    """The default channel of a shard: crc32 of its UTF-8 name, modulo the channel count."""
    return zlib.crc32(shard.encode()) % channels


class ShardMap:
    """shard -> channel for one group: the stored assignments first, else the crc32 default,
    stored (through ``persist``) before it is first used."""

    def __init__(self, channels: int, assigned: Mapping[str, int], critical: set[str],
                 persist: Callable[[str, int], int], where: str = "") -> None:
        self.channels = channels
        self.critical = set(critical)
        self._persist = persist
        self._where = where
        self._assigned: dict[str, int] = {}
        for shard, channel in assigned.items():
            self._assigned[shard] = self._checked(shard, channel)

    def _checked(self, shard: str, channel: int) -> int:
        if not 0 <= channel < self.channels:
            raise ChannelError(
                f"{self._where}trep_shard_channel assigns shard {shard!r} to channel "
                f"{channel}, but the group has {self.channels} channel(s) (0-"
                f"{self.channels - 1}): correct or delete that row")
        return channel

    def channel_of(self, shard: str) -> int:
        found = self._assigned.get(shard)
        if found is None:
            found = self._checked(shard, self._persist(shard, shard_channel(shard,
                                                                            self.channels)))
            self._assigned[shard] = found
        return found

    def shards(self) -> dict[int, list[str]]:
        """Known shards by channel (for status)."""
        out: dict[int, list[str]] = {c: [] for c in range(self.channels)}
        for shard, channel in sorted(self._assigned.items()):
            out[channel].append(shard)
        return out

    def route(self, event: ThlEvent) -> Route:
        """The route of a seqno, from its first fragment (the THL's content only, so every
        restart routes it the same way)."""
        if META_CHECK in event.metadata:
            return Route(CRITICAL_CHANNEL, event.shard_id, "a consistency check")
        if not event.last_frag:
            return Route(CRITICAL_CHANNEL, event.shard_id, "a fragmented transaction")
        if any(isinstance(item, Statement) for item in event.data):
            return Route(CRITICAL_CHANNEL, event.shard_id, "a statement")
        schemas = {item.schema for item in event.data if isinstance(item, RowChange)}
        if not schemas:
            if META_PROVISION in event.metadata:
                return Route(CRITICAL_CHANNEL, event.shard_id, "a provisioning mark")
            return Route(None, event.shard_id)
        if len(schemas) > 1:
            return Route(CRITICAL_CHANNEL, ",".join(sorted(schemas)), "several shards")
        shard = schemas.pop()
        if shard in self.critical:
            # Its own channel still: marking a shard critical between a crash and the
            # restart must not move seqnos to a channel that never saw them.
            return Route(self.channel_of(shard), shard, "a critical shard")
        return Route(self.channel_of(shard), shard)


def plan_channels(store: ChannelStore, channels: int, group: str, target: str) -> None:
    """Make the stored rows those of ``channels`` channels where that is safe.

    No rows: a fresh group (assignments to channels it does not have are dropped). Rows of
    exactly these channels: nothing to do. Other rows that all hold the same position: the
    count changed after a clean offline; every channel starts from that position and the
    shards are assigned again. Other rows that differ: refused (ChannelError).
    """
    rows = store.positions()
    if not rows:
        store.clear_assignments(at_or_above=channels)
        return
    if set(rows) == set(range(channels)):
        return
    stored = max(rows) + 1
    if len({(p.seqno, p.fragno, p.event_id) for p in rows.values()}) == 1:
        seqno = next(iter(rows.values())).seqno
        log.info("%s: consumer group %s goes from %d to %d channel(s) at seqno %d (every "
                 "channel stopped there)", target, group, stored, channels, seqno)
        store.rechannel(channels)
        return
    held = ", ".join(f"channel {c}: seqno {p.seqno}" for c, p in sorted(rows.items()))
    raise ChannelError(
        f"{target}: trep_commit_seqno holds the positions of {stored} channel(s) that differ "
        f"({held}): consumer group {group} stopped without a clean offline, and its channel "
        f"count cannot change from {stored} to {channels} now (seqnos would be applied twice "
        f"or never). Start it again with `channels: {stored}`, take it offline cleanly "
        f"(`trepctl offline -group {group}` drains every channel to one seqno), then set "
        f"`channels: {channels}`.", seqno=min(p.seqno for p in rows.values()) + 1)
