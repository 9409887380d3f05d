"""Configuration of a service's binlog extractor (the ``extractor:`` section)."""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import BaseModel, Field

from replicator.config import FilterConfig


class ExtractorConfig(BaseModel):
    """The binlog extractor of a service; the source it reads is the service's ``source:``."""

    model_config = {"extra": "forbid"}

    #: server_id this replication client announces; unique among the source's replicas.
    server_id: int = Field(1001, gt=0)
    #: SOURCEID stamped on every event.
    source_id: str = Field(default_factory=socket.gethostname)
    #: Rows per THL fragment: a larger transaction is split, never held whole in memory.
    fragment_rows: int = Field(5000, gt=0)
    #: Approximate bytes per THL fragment.
    fragment_bytes: int = Field(1024 * 1024, gt=1024)
    #: Where to start when no position exists anywhere: the binlog's current end or its start.
    start_at: Literal["current", "earliest"] = "current"
    #: Extract-stage replicate/ignore filter: changes the THL for every consumer group.
    filters: FilterConfig = FilterConfig()
    #: Source transactions per Kafka transaction at most (latency bound below).
    batch_transactions: int = Field(200, gt=0)
    #: Longest a source transaction waits before its Kafka transaction commits.
    batch_ms: int = Field(100, ge=0)
    #: Seconds without a binlog event (heartbeats come every 0.2 s when the source is idle),
    #: or with read transactions not committed to the THL, before the status shows a stall.
    stall_warning_s: float = Field(30.0, gt=0)
    #: Longest the source or Kafka may stay unreachable before the extractor stops with
    #: OFFLINE:ERROR; meanwhile it starts again from the THL tail with backoff. 0: forever.
    retry_limit_s: float = Field(0, ge=0)
    #: THL retention by the extractor itself (never past a consumer group's position, as
    #: `thl purge`): keep at least this many seqnos (0: no count rule) ...
    purge_keep_events: int = Field(0, ge=0)
    #: ... and every event extracted in the last this many hours (0: no time rule). With
    #: both at 0 the extractor never purges.
    purge_keep_hours: float = Field(0, ge=0)
    #: How often the extractor looks for something to purge.
    purge_interval_s: float = Field(300, gt=0)
    #: ``initial``: a new service (no position anywhere) first provisions every table its
    #: filters replicate, as ``trepctl provision`` would; ``none``: changes only.
    provision: Literal["none", "initial"] = "none"
    #: Rows per provisioned chunk (one consistent snapshot and one THL transaction each).
    provision_chunk_rows: int = Field(5000, gt=0)
    #: Provisioning reads at most this many rows per second (0: as fast as it can), to
    #: spare a busy source.
    provision_rows_per_s: int = Field(0, ge=0)
