"""The consumer runtime shared by every applier (see ``lifecycle``)."""

from consumers.runtime.lifecycle import ConsumerRuntime, FeedSettings

__all__ = ["ConsumerRuntime", "FeedSettings"]
