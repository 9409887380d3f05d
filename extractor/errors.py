"""Errors of the extractor. Each says what happened, where, and what the operator can do."""

from __future__ import annotations


class ExtractorError(RuntimeError):
    """The extractor cannot go on; it stopped on a transaction boundary."""


class BinlogPurgedError(ExtractorError):
    """The resume position is no longer in the source's binlog."""
