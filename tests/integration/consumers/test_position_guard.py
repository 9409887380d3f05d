"""One writer per position: a second applier of the same group on the same target is refused
before it commits anything (MariaDB and PostgreSQL, the real servers)."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from consumers.errors import PositionConflict
from consumers.heartbeat import Heartbeat
from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.sql.applier import SqlApplier
from consumers.sql.config import SqlTarget
from replicator.config import ServiceSettings
from replicator.tracking import CommitSeqnoTable
from stack.services.mariadb import MariaDB
from stack.services.postgresql import PostgreSQL


def _event(seqno: int) -> Position:
    return Position(seqno=seqno, epoch=0, source_id="src", event_id=f"bin.000001:{seqno};0",
                    shard_id="db", tstamp=int(time.time() * 1e6))


@pytest.fixture(params=["mariadb", "postgresql"])
def target(request: pytest.FixtureRequest, mariadb_target: MariaDB,
           postgresql: PostgreSQL) -> Iterator[tuple[str, str]]:
    """A SQLAlchemy URL and a fresh tracking schema on it."""
    schema = f"tungsten_g{uuid.uuid4().hex[:10]}"  # the tracking schema of service g...
    url = (f"mysql+pymysql://root@127.0.0.1:{mariadb_target.port}/"
           if request.param == "mariadb"
           else f"postgresql+psycopg://postgres@127.0.0.1:{postgresql.port}/postgres")
    yield url, schema
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        q = conn.dialect.identifier_preparer.quote(schema)
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {q}"
                             + (" CASCADE" if request.param == "postgresql" else "")))
    engine.dispose()


def _applier(url: str, schema: str) -> SqlApplier:
    service = ServiceSettings(service=schema.removeprefix("tungsten_"))
    applier = SqlApplier(SqlTarget(url=url, statements="skip"), ApplierContext(service, "g"))
    applier.connect()
    return applier


def _block(applier: SqlApplier, seqno: int) -> None:
    """One block up to ``seqno``: the lock is taken at begin() (PostgreSQL) or leads the
    block's first round trip (MariaDB, where it travels with the rows): either way a moved
    position is refused before anything of the block commits."""
    applier.begin()
    applier.commit(_event(seqno))


def _stored(url: str, schema: str) -> int | None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return CommitSeqnoTable(schema).stored(conn, 0)
    finally:
        engine.dispose()


def test_second_writer_of_a_position_is_refused(target: tuple[str, str]) -> None:
    url, schema = target
    a, b = _applier(url, schema), _applier(url, schema)
    try:
        assert a.position() is None and b.position() is None
        _block(a, 0)
        # b read "no position" before a wrote one.
        with pytest.raises(PositionConflict, match="expected stored seqno none, found 0"):
            _block(b, 1)
        assert _stored(url, schema) == 0
        pos = b.position()
        assert pos is not None and pos.seqno == 0
        _block(b, 1)
        with pytest.raises(PositionConflict, match="expected stored seqno 0, found 1"):
            _block(a, 2)
        assert _stored(url, schema) == 1
        pos = a.position()
        assert pos is not None and pos.seqno == 1
        # Refused writers leave nothing behind: the next block of the rightful one commits.
        _block(a, 2)
        assert _stored(url, schema) == 2
    finally:
        a.close()
        b.close()


def test_concurrent_writers_serialize_on_the_position_row(target: tuple[str, str]) -> None:
    url, schema = target
    a, b = _applier(url, schema), _applier(url, schema)
    try:
        a.position()
        _block(a, 5)
        assert b.position() is not None
        a.position()
        a.begin()  # holds the position row (MariaDB: from its first round trip, here
        # the heartbeat's)
        now = dt.datetime.now(dt.UTC)
        a.heartbeat(Heartbeat(id=1, name="guard", salt=1, seqno=6, event_id="e",
                              source_tstamp=now, target_tstamp=now, lag_millis=0))
        outcome: list[BaseException | None] = []

        def second() -> None:
            try:
                _block(b, 7)  # waits for a's block, then sees the position it wrote
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.0)
        assert not outcome, "the second writer did not wait for the first"
        a.commit(_event(6))
        thread.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], PositionConflict), outcome
        assert "expected stored seqno 5, found 6" in str(outcome[0])
        pos = a.position()
        assert pos is not None and pos.seqno == 6
    finally:
        a.close()
        b.close()
