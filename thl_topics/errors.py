"""Errors of the THL topic layer; each says where (topic, partition, offset) and why."""

from __future__ import annotations


class ThlError(RuntimeError):
    """Base class of THL topic errors."""


class ThlDecodeError(ThlError):
    """A record of the THL topic could not be decoded into a THL event."""

    def __init__(self, reason: str, *, topic: str | None = None,
                 partition: int | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = "THL record"
        if topic is not None:
            where += f" {topic}"
            if partition is not None:
                where += f"[{partition}]"
        if offset is not None:
            where += f" at offset {offset}"
        super().__init__(f"{where}: cannot decode: {reason}")


class ThlTopicMissing(ThlError):
    """The THL topic does not exist (yet): no extractor has created it."""
