"""Configuration of the in-memory target (``target: {type: memory}``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class MemoryTarget(BaseModel):
    """Rows kept in the process, lost with it; faults injected on purpose.

    For trying the runtime without a server and for its unit tests; never a real target.
    """

    model_config = {"extra": "forbid"}

    type: Literal["memory"] = "memory"
    #: Chance (0..1) that a commit fails as if the target were down, before it writes.
    transient_failure_rate: float = Field(0.0, ge=0, le=1)
    #: Seqnos whose data the target refuses (DataError at that seqno).
    refuse_seqnos: list[int] = Field(default_factory=list)
    #: Tables without a primary key are refused (as a key-addressed store would).
    keyless_tables: bool = True
    #: Seed of the fault generator, so a failing run can be repeated.
    seed: int = 0
