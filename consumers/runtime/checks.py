"""Consistency checks as the runtime applies them: a check event compares the target's rows
of one key range with the source's and records both (``consumers.check`` has the range, the
digest and the applier's side).

A check is a block of its own (``preparation.Preparation.isolates``), so the target holds
every earlier seqno when its rows are read. Results are mirrored to ZooKeeper for
``trepctl check -status``; a target that cannot check reports the range unsupported.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from kazoo.exceptions import KazooException

from consumers.applier import Applier, Capabilities
from consumers.check import CheckingApplier, CheckRange, CheckResult, now_text
from consumers.errors import ConsumerError
from replicator.control import ComponentNodes
from replicator.filters import ReplicateFilter
from thl_topics.checksum import range_digest
from thl_topics.event import ThlEvent

log = logging.getLogger(__package__)


class RangeChecks:
    """The check events of one group: compared on its target, recorded, mirrored."""

    def __init__(self, name: str, replicate: ReplicateFilter, capabilities: Capabilities,
                 nodes: ComponentNodes) -> None:
        self.name = name
        self.filter = replicate
        self.capabilities = capabilities
        self.nodes = nodes

    def check(self, check: CheckRange, event: ThlEvent, target: Applier) -> None:
        """Compare the target's rows of a checked range with the source's, record both."""
        if not self.filter.keeps(check.schema, check.table):
            return
        if not self.capabilities.checks:
            self._publish_check({"request": check.request, "schema": check.schema,
                                 "table": check.table, "range": check.range,
                                 "unsupported": True})
            return
        applier = cast(CheckingApplier, target)
        try:
            count, digest = range_digest(check.specs, applier.read_range(check))
            result = CheckResult(
                request=check.request, schema=check.schema, table=check.table,
                range=check.range, limit=check.limit, lo=check.lo, hi=check.hi,
                source_count=check.count, source_digest=check.digest, target_count=count,
                target_digest=digest, method=check.method, seqno=event.seqno,
                checked_at=now_text())
            applier.record_check(result)
        except ConsumerError as exc:
            if exc.seqno < 0:
                exc.seqno, exc.event_id = event.seqno, event.event_id
            raise
        if not result.equal:
            log.warning("%s: check %s: %s.%s range %d differs: source %d rows %s, target %d "
                        "rows %s", self.name, check.request, check.schema, check.table,
                        check.range, check.count, check.digest[:12], count, digest[:12])
        self._publish_check(result.to_json())

    def _publish_check(self, result: dict[str, Any]) -> None:
        """Mirror a check result to ZooKeeper for ``trepctl check -status`` (best effort)."""
        try:
            self.nodes.record_check(result)
        except KazooException as exc:
            log.warning("%s: check result not mirrored to ZooKeeper: %s", self.name, exc)
