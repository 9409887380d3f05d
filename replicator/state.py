"""The replicator state machine (the whitepaper's states) and the status a component publishes."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class State(StrEnum):
    """Where a consumer is. Transitions happen on transaction boundaries only."""

    OFFLINE = "OFFLINE:NORMAL"
    ERROR = "OFFLINE:ERROR"
    SYNCHRONIZING = "GOING-ONLINE:SYNCHRONIZING"
    ONLINE = "ONLINE"


@dataclass
class Status:
    """What ``trepctl status`` shows for one consumer group (Tungsten's field names)."""

    serviceName: str
    role: str
    state: str = State.OFFLINE.value
    appliedLastSeqno: int = -1
    appliedLastEventId: str = ""
    appliedLastEpoch: int = -1
    appliedLatency: float = 0.0
    pendingError: str = "NONE"
    pendingErrorCode: str = "NONE"
    pendingErrorEventId: str = "NONE"
    pendingErrorSeqno: int = -1
    pendingExceptionMessage: str = "NONE"
    skippedSeqnos: list[int] = field(default_factory=list)
    #: Row changes a consumer group committed since its process started (rows/s is the
    #: difference of two readings over their time).
    appliedRows: int = 0
    #: Times this process lost its ZooKeeper connection (it goes on applying meanwhile).
    zookeeperDisconnects: int = 0
    #: The extractor's provisioning: NONE, or "running: rows done/total rows table".
    provisioning: str = "NONE"
    #: The extractor's XA transactions prepared and not yet decided: NONE, or how many,
    #: the oldest and how long it has been open.
    xaPrepared: str = "NONE"
    #: The extractor's: NONE, or what has not moved for ``stall_warning_s`` (no binlog
    #: event, read transactions not committed).
    stall: str = "NONE"
    timeInStateSeconds: float = 0.0
    stateSince: float = field(default_factory=time.time)
    host: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["timeInStateSeconds"] = round(time.time() - self.stateSince, 3)
        if self.role != "extractor":
            del data["xaPrepared"], data["stall"]  # the extractor's alone
        return data

    def set_state(self, state: State) -> None:
        if self.state != state.value:
            self.state = state.value
            self.stateSince = time.time()

    def clear_error(self) -> None:
        self.pendingError = self.pendingErrorCode = "NONE"
        self.pendingErrorEventId = self.pendingExceptionMessage = "NONE"
        self.pendingErrorSeqno = -1
