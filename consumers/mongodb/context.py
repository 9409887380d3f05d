"""What every part of the MongoDB applier works with: the target's settings, its name in
messages, the client, and what the server turned out to be."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pymongo import MongoClient

from consumers.mongodb.blocks import RawDoc
from consumers.mongodb.config import MongoTarget
from consumers.mongodb.server import ServerTraits


@dataclass(frozen=True)
class TargetContext:
    """The deployment as the applier's parts see it."""

    cfg: MongoTarget
    #: The deployment as errors and log lines name it (its URL without credentials).
    target: str
    #: The applier's client (RuntimeError before it connects).
    connection: Callable[[], MongoClient[RawDoc]]
    #: What the server is (RuntimeError before the applier connects).
    traits: Callable[[], ServerTraits]

    @property
    def client(self) -> MongoClient[RawDoc]:
        """The client."""
        return self.connection()

    @property
    def server(self) -> ServerTraits:
        """What the server is."""
        return self.traits()
