"""What provisioning (``extractor.provision``) and consistency checks (``extractor.check``)
have in common: a ``trepctl`` request carried out in snapshots of the source, inside the
extractor's stream.

The request is a ZooKeeper node (``replicator.requests``), read between transactions at most
once a second. Once taken up, the job and the stream share one thread: at every transaction
boundary the stream lets the job read its next piece (a chunk, a range) in a consistent
snapshot, whose binlog position says where in the stream the piece belongs. The piece is
emitted at once if the stream stands exactly there, kept while the source is ahead, and read
again if the stream has passed it. Progress goes back to the request node, for ``trepctl``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar

import pymysql
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from extractor.binlog_position import BinlogPosition
from extractor.transactions import TransactionAssembler
from replicator.config import ServiceSettings
from replicator.filters import ItemFilter
from replicator.requests import CheckRequest, ProvisionRequest, read_request, write_request

#: Opens a connection to the source (a string: pymysql's Connection takes a type argument in
#: its type stubs only, not at run time).
Connect: TypeAlias = "Callable[[], pymysql.connections.Connection[Any]]"


@dataclass
class Held:
    """A piece read in a snapshot the stream has not reached yet."""

    position: BinlogPosition
    marks: dict[str, Any]


R = TypeVar("R", ProvisionRequest, CheckRequest)
H = TypeVar("H", bound=Held)


def position_key(pos: BinlogPosition) -> tuple[int, int]:
    """Order of binlog positions across files (``name.000042`` -> 42)."""
    return int(pos.file.rsplit(".", 1)[-1]), pos.pos


class SnapshotJob(Generic[R, H]):
    """Runs one request of a kind inside the extractor's stream (one thread)."""

    #: The request's kind (its ZooKeeper node).
    REQUEST: type[R]
    #: The states in which ``poll`` takes a request up.
    TAKES_UP: ClassVar[tuple[str, ...]] = ("requested",)
    #: How long one transaction boundary may spend emitting pieces.
    STEP_BUDGET_S: ClassVar[float]
    #: The job in log lines, and the logger of its module (log lines keep their origin).
    NAME: ClassVar[str]
    LOG: ClassVar[logging.Logger]

    def __init__(self, service: ServiceSettings, zk: KazooClient, filters: ItemFilter,
                 connect: Connect) -> None:
        self.service = service
        self.zk = zk
        self.filters = filters
        self._connect = connect
        self.request: R | None = None
        self._held: H | None = None
        #: Last look for a request, or last progress written: at most one a second.
        self._polled = 0.0

    # -- requests ---------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.request is not None and self.request.state in ("requested", "running")

    def poll(self, next_seqno: int) -> None:
        """Between transactions: take up a new request (``next_seqno``: where the stream's
        next event goes)."""
        if self.active or not self._due():
            return
        try:
            req = read_request(self.zk, self.service, self.REQUEST)
        except KazooException:
            return
        if req is not None and req.state in self.TAKES_UP:
            with self.stops_on_missing_table(req):
                self._take_up(req, next_seqno)

    def _take_up(self, req: R, next_seqno: int) -> None:
        raise NotImplementedError

    @contextmanager
    def stops_on_missing_table(self, req: R | None = None) -> Iterator[None]:
        """A table the request names that the source does not have (or no longer has)
        fails the request, with why, for ``trepctl``; the extractor goes on streaming."""
        try:
            yield
        except LookupError as exc:
            if req is not None:
                self.request = req
            self.LOG.error("%s stopped: %s", self.NAME, exc)
            self.fail(str(exc))

    def fail(self, message: str) -> None:
        """Give the request up (a table vanished, ...): state failed, with why."""
        self._conclude("failed", message)

    def _conclude(self, state: str, message: str) -> None:
        if self.request is not None:
            self.request.state = state
            self.request.message = message
            self._write()

    # -- pieces -----------------------------------------------------------------------------

    def step(self, position: BinlogPosition, assembler: TransactionAssembler) -> None:
        """At a transaction boundary: emit the pieces whose snapshot is at ``position``."""
        if not self.active:
            return
        with self.stops_on_missing_table():
            self._step(position, assembler)

    def _step(self, position: BinlogPosition, assembler: TransactionAssembler) -> None:
        self._open(position, assembler)
        deadline = time.monotonic() + self.STEP_BUDGET_S
        while self.active and time.monotonic() < deadline:
            held = self._held
            if held is None:
                held = self._held = self._read()
                if held is None:
                    break
            here, there = position_key(position), position_key(held.position)
            if here < there:
                return  # the source is ahead: emitted when the stream gets there
            self._held = None
            if here > there:
                continue  # passed it: that snapshot is stale, read the piece again
            self._emit(held, assembler, position)
        self._stepped()

    def _open(self, position: BinlogPosition, assembler: TransactionAssembler) -> None:
        """Before the first piece of a boundary (nothing by default)."""

    def _read(self) -> H | None:
        """The next piece (None: none now, or the request is over)."""
        raise NotImplementedError

    def _emit(self, held: H, assembler: TransactionAssembler, position: BinlogPosition
              ) -> None:
        raise NotImplementedError

    def _stepped(self) -> None:
        """After the pieces of a boundary, unless the source is ahead (nothing by default)."""

    @contextmanager
    def _connection(self) -> Iterator[pymysql.connections.Connection[Any]]:
        """A connection to the source for one read, closed after it."""
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    # -- progress ---------------------------------------------------------------------------

    def _publish_progress(self) -> None:
        if self._due():
            self._write()

    def _due(self) -> bool:
        """True at most once a second, for a look for a request and progress writes alike."""
        now = time.monotonic()
        if now - self._polled < 1.0:
            return False
        self._polled = now
        return True

    def _write(self) -> None:
        if self.request is None:
            return
        try:
            write_request(self.zk, self.service, self.request)
        except KazooException as exc:
            self.LOG.debug("%s progress not published: %s", self.NAME, exc)
