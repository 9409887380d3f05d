"""What every part of the Elasticsearch applier works with: the target's settings, its name in
messages, and the cluster's client."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from elasticsearch import Elasticsearch

from consumers.elasticsearch.config import ElasticsearchTarget


@dataclass(frozen=True)
class TargetContext:
    """The cluster as the applier's parts see it."""

    cfg: ElasticsearchTarget
    #: The cluster as errors and log lines name it (its hosts, without credentials).
    target: str
    #: The applier's client (RuntimeError before it connects).
    client: Callable[[], Elasticsearch]

    @property
    def es(self) -> Elasticsearch:
        """The client."""
        return self.client()
