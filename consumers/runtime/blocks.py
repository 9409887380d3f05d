"""The open block of a consumer group (or of one channel): what counts against its limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from consumers.applier import BlockLimits
from consumers.position import Position


@dataclass
class Block:
    """The open block: positions of its whole seqnos, and what counts against its limits."""

    positions: list[Position] = field(default_factory=list)
    opened: float = 0.0
    rows: int = 0
    bytes: int = 0
    skipped: list[int] = field(default_factory=list)

    def full(self, limits: BlockLimits) -> bool:
        """True once any of ``limits`` is reached."""
        return len(self.positions) >= limits.events \
            or (limits.rows is not None and self.rows >= limits.rows) \
            or (limits.bytes is not None and self.bytes >= limits.bytes)
