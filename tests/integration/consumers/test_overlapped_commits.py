"""Overlapped commits on MariaDB and PostgreSQL (``SqlApplier.commit_begin``): a block's
last round trip goes out with its position and the next block is applied while the server
works on it (on PostgreSQL the block's text, then the COPY of its new rows, moved on as the
server answers). Nothing of a block is visible, or counted, before its commit is finished;
a refusal of the pending block is its own error and takes the block after it along; a
rollback abandons both. The real servers, read from a second connection."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from consumers.applier import PendingCommit
from consumers.errors import ConsumerError, PositionConflict, TransientError
from consumers.position import Position
from consumers.registry import ApplierContext
from consumers.sql.applier import SqlApplier
from consumers.sql.batches import InFlight, LastCopy
from consumers.sql.config import SqlTarget
from replicator.config import ServiceSettings
from replicator.tracking import CommitSeqnoTable
from stack.services.mariadb import MariaDB
from stack.services.postgresql import PostgreSQL
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

SPECS = [ColumnSpec(1, "id", "INT", primary_key=True, nullable=False),
         ColumnSpec(2, "v", "VARCHAR", length=20)]


class Target:
    """A fresh schema with table ``t`` on a target, and its tracking schema."""

    def __init__(self, url: str) -> None:
        self.name = f"ov{uuid.uuid4().hex[:10]}"
        self.url = url
        self.engine = sa.create_engine(self.url)
        self._cascade = " CASCADE" if url.startswith("postgresql") else ""
        self._appliers: list[SqlApplier] = []
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {self.name}")
            conn.exec_driver_sql(f"CREATE TABLE {self.name}.t (id INT PRIMARY KEY, "
                                 "v VARCHAR(20))")

    def applier(self) -> SqlApplier:
        applier = SqlApplier(SqlTarget(url=self.url, statements="skip"),
                             ApplierContext(ServiceSettings(service=self.name), "g"))
        applier.connect()
        applier.position()
        self._appliers.append(applier)
        return applier

    def started(self, *ids: int) -> SqlApplier:
        """An applier whose first block (seqno 0, inserting ``ids``) is committed: its
        position is stored, so the blocks after it overlap."""
        applier = self.applier()
        applier.commit(_apply(applier, _event(self.name, 0, RowAction.INSERT, *ids)))
        return applier

    def ids(self) -> list[int]:
        """The table's keys as another session sees them (committed rows only)."""
        with self.engine.connect() as conn:
            return [r[0] for r in conn.exec_driver_sql(
                f"SELECT id FROM {self.name}.t ORDER BY id")]

    def stored(self) -> int | None:
        with self.engine.connect() as conn:
            return CommitSeqnoTable(f"tungsten_{self.name}").stored(conn, 0)

    def drop(self) -> None:
        for applier in self._appliers:
            applier.close()
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.name}{self._cascade}")
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS tungsten_{self.name}{self._cascade}")
        self.engine.dispose()


@pytest.fixture(params=["mariadb", "postgresql"])
def target(request: pytest.FixtureRequest, mariadb_target: MariaDB,
           postgresql: PostgreSQL) -> Iterator[Target]:
    made = Target(f"mysql+pymysql://root@127.0.0.1:{mariadb_target.port}/"
                  if request.param == "mariadb" else _pg_url(postgresql))
    yield made
    made.drop()


@pytest.fixture
def pg_target(postgresql: PostgreSQL) -> Iterator[Target]:
    made = Target(_pg_url(postgresql))
    yield made
    made.drop()


def _pg_url(postgresql: PostgreSQL) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{postgresql.port}/postgres"


def _event(schema: str, seqno: int, action: RowAction, *ids: int) -> ThlEvent:
    rows: list[list[ThlValue]] = [[i, f"s{seqno}"] for i in ids]
    change = RowChange(action, schema, "t", SPECS if action is not RowAction.DELETE else [],
                       SPECS if action is not RowAction.INSERT else [],
                       rows if action is not RowAction.DELETE else [],
                       rows if action is not RowAction.INSERT else [])
    return ThlEvent(seqno=seqno, epoch=0, source_id="src", event_id=f"bin.000001:{seqno};0",
                    shard_id=schema, tstamp=int(time.time() * 1e6), data=[change])


def _sent(applier: SqlApplier, position: Position) -> PendingCommit:
    """The block's commit begun, and left pending (the overlapped path was taken)."""
    pending = applier.commit_begin(position)
    assert pending is not None, "committed at once: the commit did not overlap"
    return pending


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within 10 s"
        time.sleep(0.01)


def _apply(applier: SqlApplier, event: ThlEvent) -> Position:
    applier.begin()
    applier.apply(event)
    return Position.of(event)


def _stored_seqno(applier: SqlApplier) -> int:
    """The stored position as the applier reads it (a read of the target)."""
    pos = applier.position()
    assert pos is not None
    return pos.seqno


def _only_the_first_block_stays(target: Target, applier: SqlApplier) -> None:
    """Nothing after the started block is on the target, and the applier, on a working
    connection, reads the started block's position."""
    assert target.ids() == [1] and target.stored() == 0
    assert _stored_seqno(applier) == 0


def test_a_block_is_applied_while_the_one_before_commits_and_neither_shows_early(
        target: Target) -> None:
    applier = target.started(1, 2)
    s = target.name
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, 3, 4)))
    # Sent with its position, not committed: another session sees neither.
    assert target.ids() == [1, 2] and target.stored() == 0
    applier.begin()
    applier.apply(_event(s, 2, RowAction.UPDATE, 3))
    applier.apply(_event(s, 3, RowAction.INSERT, 5))
    assert target.stored() == 0, "applying the next block must not need the target"
    second = _sent(applier, Position.of(_event(s, 3, RowAction.INSERT, 5)))
    # Its answers were read before the second block went out, and its COMMIT led the
    # second block's round trip: the server commits it, the second stays open.
    assert first.rides and not second.rides
    _until(lambda: target.stored() == 1)
    assert target.ids() == [1, 2, 3, 4]
    first.finish()  # the second block's answers read: the first's COMMIT is answered
    assert not first.rides
    second.finish()
    second.finish()  # idempotent
    assert target.ids() == [1, 2, 3, 4, 5] and target.stored() == 3
    with target.engine.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT v FROM {s}.t WHERE id = 3").scalar() == "s2"
    # A read of the target (here the stored position) waits for nothing: the
    # applier is between blocks with nothing pending.
    assert _stored_seqno(applier) == 3


def test_a_block_of_more_text_than_a_round_trip_goes_in_several_and_its_last_overlaps(
        target: Target) -> None:
    """Round trips are cut at ``round_trip_bytes`` (at least one statement each): the
    block's earlier ones are answered before the next goes out, its last one carries the
    position and is left pending; every row lands, and nothing shows before the COMMIT."""
    applier = target.started(*range(1, 3001))
    trips = 0
    transmit = applier._batches.transmit

    def counted(last: LastCopy | None = None, lead_commit: bool = False) -> InFlight | None:
        nonlocal trips
        trips += 1
        return transmit(last, lead_commit)

    applier._batches.transmit = counted  # type: ignore[method-assign]
    # Far below one statement: each statement goes in a round trip of its own.
    applier._batches.round_trip_bytes = 4096
    s = target.name
    applier.begin()
    applier.apply(_event(s, 1, RowAction.DELETE, *range(1, 2501)))  # 3 IN lists
    applier.apply(_event(s, 2, RowAction.UPDATE, *range(2501, 3001)))
    last = _event(s, 3, RowAction.INSERT, *range(3001, 4001))
    applier.apply(last)
    pending = _sent(applier, Position.of(last))
    assert trips >= 4, f"the block went in {trips} round trip(s)"
    assert target.stored() == 0 and len(target.ids()) == 3000  # not committed yet
    pending.finish()
    assert target.stored() == 3
    assert target.ids() == list(range(2501, 4001))
    with target.engine.connect() as conn:
        values = {r[0]: r[1] for r in conn.exec_driver_sql(f"SELECT id, v FROM {s}.t")}
    assert all(values[i] == "s2" for i in range(2501, 3001))
    assert all(values[i] == "s3" for i in range(3001, 4001))


def test_a_refused_pending_block_is_its_own_error_and_takes_the_next_one_along(
        target: Target) -> None:
    applier = target.started(1)
    s = target.name
    # Seqno 1 updates a row the target does not have: diverged.
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.UPDATE, 9)))
    applier.begin()
    applier.apply(_event(s, 2, RowAction.INSERT, 2))
    with pytest.raises(ConsumerError) as raised:
        _sent(applier, Position.of(_event(s, 2, RowAction.INSERT, 2)))
    assert raised.value.seqno == 1, raised.value
    with pytest.raises(ConsumerError) as again:
        first.finish()
    assert again.value is raised.value
    applier.rollback()
    # The session starts again from the stored position.
    _only_the_first_block_stays(target, applier)
    applier.commit(_apply(applier, _event(s, 2, RowAction.INSERT, 2)))
    assert target.ids() == [1, 2] and target.stored() == 2


def test_a_rollback_abandons_the_pending_commit_with_the_open_block(target: Target) -> None:
    applier = target.started(1)
    s = target.name
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, 2)))
    applier.begin()
    applier.apply(_event(s, 2, RowAction.INSERT, 3))
    applier.rollback()
    with pytest.raises(TransientError, match="abandoned"):
        first.finish()
    _only_the_first_block_stays(target, applier)
    applier.commit(_apply(applier, _event(s, 1, RowAction.INSERT, 2)))
    pending = _sent(applier, _apply(applier, _event(s, 2, RowAction.INSERT, 3)))
    pending.finish()
    assert target.ids() == [1, 2, 3] and target.stored() == 2


def test_a_commit_riding_the_next_block_is_committed_though_that_block_fails(
        target: Target) -> None:
    applier = target.started(1)
    s = target.name
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, 2)))
    # The next block updates a row the target does not have: it diverged there.
    second = _sent(applier, _apply(applier, _event(s, 2, RowAction.UPDATE, 9)))
    assert first.rides
    first.finish()  # committed by the COMMIT that led the second block's round trip
    with pytest.raises(ConsumerError) as raised:
        second.finish()
    assert raised.value.seqno == 2, raised.value
    assert target.ids() == [1, 2] and target.stored() == 1
    assert _stored_seqno(applier) == 1


def test_a_commit_riding_an_abandoned_block_is_told_by_the_stored_position(
        target: Target) -> None:
    applier = target.started(1)
    s = target.name
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, 2)))
    _sent(applier, _apply(applier, _event(s, 2, RowAction.INSERT, 3)))
    assert first.rides
    applier.rollback()  # the second block's answers were never read
    with pytest.raises(TransientError, match="position stored on the target tells"):
        first.finish()
    # Whichever it was, the rows are those of the stored position, and the session goes
    # on from it. The applier reads it once the dropped session has ended: from then on it
    # no longer moves (read straight after the drop, the target could still say 0 and then
    # 1, when the server had the COMMIT still to work through: seen under CI's load).
    stored = _stored_seqno(applier)
    assert (target.stored(), target.ids()) in [(0, [1]), (1, [1, 2])]
    assert target.stored() == stored
    if stored == 0:
        applier.commit(_apply(applier, _event(s, 1, RowAction.INSERT, 2)))
    applier.commit(_apply(applier, _event(s, 2, RowAction.INSERT, 3)))
    assert target.ids() == [1, 2, 3] and target.stored() == 2


def test_a_position_moved_by_another_writer_refuses_the_overlapped_block(
        target: Target) -> None:
    a, b = target.started(1), target.applier()
    s = target.name
    _sent(a, _apply(a, _event(s, 1, RowAction.INSERT, 2))).finish()
    assert b.position() is not None
    b.commit(_apply(b, _event(s, 2, RowAction.INSERT, 3)))
    pending = _sent(a, _apply(a, _event(s, 2, RowAction.INSERT, 4)))
    with pytest.raises(PositionConflict, match="expected stored seqno 1, found 2"):
        pending.finish()
    a.rollback()
    assert target.ids() == [1, 2, 3] and target.stored() == 2


def test_postgresql_a_copy_left_open_commits_with_its_block_or_not_at_all(
        pg_target: Target) -> None:
    """The pending block ends with a COPY (enough new rows for one): it goes on while the
    next block is applied, shows nothing before its commit, and a rollback takes it back
    whatever step it had reached."""
    target = pg_target
    applier = target.started(1)
    s = target.name
    many = list(range(100, 200))
    _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, *many)))
    applier.begin()
    applier.apply(_event(s, 2, RowAction.INSERT, 2))  # moves the COPY on
    assert target.ids() == [1] and target.stored() == 0
    applier.rollback()
    _only_the_first_block_stays(target, applier)
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, *many)))
    applier.begin()
    applier.apply(_event(s, 2, RowAction.INSERT, 2))
    second = _sent(applier, Position.of(_event(s, 2, RowAction.INSERT, 2)))
    assert first.rides  # its COPY answered, its COMMIT leads the second block's text
    _until(lambda: target.stored() == 1)
    assert target.ids() == [1, *many]
    first.finish()
    second.finish()
    assert target.ids() == [1, 2, *many] and target.stored() == 2


def test_postgresql_a_copy_the_target_refuses_is_the_pending_blocks_own_error(
        pg_target: Target) -> None:
    """A new row whose key the target has already: the COPY fails on the server after
    the block's text was answered; the error is the pending block's (set-based apply
    refused up to its seqno), nothing of either block stays."""
    target = pg_target
    applier = target.started(1)
    s = target.name
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, *range(100, 199), 1)))
    applier.begin()
    applier.apply(_event(s, 2, RowAction.INSERT, 2))
    with pytest.raises(TransientError, match="up to seqno 1 refused") as raised:
        first.finish()
    assert raised.value.seqno == 1
    applier.rollback()
    _only_the_first_block_stays(target, applier)


def test_postgresql_a_riding_commit_the_server_refuses_stops_the_block_it_leads(
        pg_target: Target) -> None:
    """A deferred constraint is checked at COMMIT: the riding COMMIT fails, the server
    runs nothing of the block it leads. The refused block's error is its own, the block
    after it is abandoned with it, and neither leaves a row or a position."""
    target = pg_target
    s = target.name
    with target.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {s}.t ADD CONSTRAINT one_v UNIQUE (v) "
                             "DEFERRABLE INITIALLY DEFERRED")
    applier = target.started(1)
    # Both rows of seqno 1 have v 's1': accepted by each statement, refused at COMMIT.
    first = _sent(applier, _apply(applier, _event(s, 1, RowAction.INSERT, 2, 3)))
    second = _sent(applier, _apply(applier, _event(s, 2, RowAction.INSERT, 4)))
    assert first.rides
    with pytest.raises(ConsumerError, match="one_v") as raised:
        first.finish()
    assert raised.value.seqno == 1, raised.value
    with pytest.raises(TransientError, match="abandoned with the COMMIT") as abandoned:
        second.finish()
    assert abandoned.value.seqno == 2
    applier.rollback()
    _only_the_first_block_stays(target, applier)
    applier.commit(_apply(applier, _event(s, 2, RowAction.INSERT, 4)))
    assert target.ids() == [1, 4] and target.stored() == 2
