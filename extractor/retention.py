"""THL retention run by the extractor: the same rule as ``thl purge``, on a schedule.

Keep the last ``purge_keep_events`` seqnos and what was extracted in the last
``purge_keep_hours``; never delete past the lowest position of a consumer group (a group
without a position blocks purging: it may need the THL from its start).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import KazooException

from extractor.config import ExtractorConfig
from replicator.config import ServiceSettings
from replicator.control import consumer_groups
from replicator.zk import ServiceNodes
from thl_topics.errors import ThlError
from thl_topics.purge import plan_purge, purge, safe_seqno
from thl_topics.reader import ThlReader

log = logging.getLogger(__name__)


def retention_seqno(tail: int, keep_events: int, seqno_at_age: int | None) -> int | None:
    """The seqno below which events may go by the retention rules alone (None: keep all)."""
    rules = []
    if keep_events:
        rules.append(tail + 1 - keep_events)
    if seqno_at_age is not None:
        rules.append(seqno_at_age)
    return min(rules) if rules else None


def purge_target(tail: int, keep_events: int, seqno_at_age: int | None,
                 positions: Mapping[str, int]) -> int | None:
    """Where a scheduled purge may cut: the retention rules, bounded by every group."""
    wanted = retention_seqno(tail, keep_events, seqno_at_age)
    if wanted is None:
        return None
    lowest = safe_seqno(positions)
    return wanted if lowest is None else min(wanted, lowest)


class Retention:
    """Purges the THL now and then, as configured."""

    def __init__(self, service: ServiceSettings, cfg: ExtractorConfig,
                 nodes: ServiceNodes) -> None:
        self.service = service
        self.cfg = cfg
        self.nodes = nodes
        self._next = time.monotonic() + cfg.purge_interval_s
        #: Purges done (for metrics and tests).
        self.purges = 0

    @property
    def enabled(self) -> bool:
        return bool(self.cfg.purge_keep_events or self.cfg.purge_keep_hours)

    def maybe_purge(self) -> None:
        """Purge if it is time; failures are logged, never raised (the THL is untouched)."""
        if not self.enabled or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.cfg.purge_interval_s
        try:
            self._purge()
        except (ThlError, KafkaException, KazooException) as exc:
            log.warning("THL retention: not purging this time: %s", exc)

    def _positions(self) -> dict[str, int]:
        groups = consumer_groups(self.nodes.client, self.service.zookeeper.root,
                                 self.service.service)
        out = {}
        for group in groups:
            pos = self.nodes.read_position(f"consumers/{group}")
            out[group] = -1 if pos is None else pos.seqno
        return out

    def _purge(self) -> None:
        positions = self._positions()
        with ThlReader(self.service.kafka.client(), self.service.thl_topic) as reader:
            tail = reader.tail()
            if tail is None:
                return
            at_age = None
            if self.cfg.purge_keep_hours:
                since = int((time.time() - self.cfg.purge_keep_hours * 3600) * 1000)
                offset = reader.offset_for_time(since)
                sample = reader.sample(offset)
                at_age = tail.seqno + 1 if sample is None else sample[1]
            target = purge_target(tail.seqno, self.cfg.purge_keep_events, at_age, positions)
            if target is None:
                return
            plan = plan_purge(reader, target, positions)
        if plan.first_kept is None or plan.first_kept >= target:
            return
        purge(AdminClient(self.service.kafka.client()), self.service.thl_topic, plan)
        self.purges += 1
        log.info("THL retention: purged %s below seqno %d (groups at %s)",
                 self.service.thl_topic, target, positions or "none")
