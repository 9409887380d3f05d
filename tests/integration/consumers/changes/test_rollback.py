"""A block rolled back after it wrote a table's first records: what the block recorded about
the table goes with it, so the block applied again records it again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from consumers.changes.applier import ChangesApplier
from consumers.changes.readback import ChangeReader, materialize
from consumers.errors import TransientError
from consumers.position import Position

from .conftest import ChangeService

GROUP = "t"


def test_a_table_first_written_by_a_rolled_back_block_is_known_after_a_restart(
        make_service: Callable[..., ChangeService], monkeypatch: pytest.MonkeyPatch) -> None:
    """The block that first writes a table records its layout in the group's layouts topic
    (how a later session knows the table's topic: a TRUNCATE, a rename or a drop re-publishes
    its rows). That block fails at its commit once (a transient error: rolled back, applied
    again); after a restart, a TRUNCATE still empties the table's topic."""
    svc = make_service({GROUP: {"envelope": "debezium", "format": "avro", "partitions": 1}})
    s = svc.schema
    failed: list[int] = []
    commit = ChangesApplier.commit

    def failing_once(self: ChangesApplier, position: Position) -> None:
        written = {t.shape.topic for t in self._records._tables.values()}
        if not failed and self._txn.records and svc.topic("goods") in written:
            failed.append(position.seqno)
            raise TransientError("injected: the block's commit failed", seqno=position.seqno)
        commit(self, position)

    monkeypatch.setattr(ChangesApplier, "commit", failing_once)
    svc.start()
    svc.src(f"CREATE TABLE {s}.goods (id INT PRIMARY KEY, name VARCHAR(20))",
            f"INSERT INTO {s}.goods VALUES (1, 'one'), (2, 'two')")
    svc.wait_source_applied()
    assert failed, "the block writing goods was never failed"
    svc.stop()
    monkeypatch.setattr(ChangesApplier, "commit", commit)

    svc.start()
    svc.src(f"TRUNCATE TABLE {s}.goods", f"INSERT INTO {s}.goods VALUES (3, 'three')")
    svc.wait_source_applied()
    svc.stop()
    rows: list[dict[str, Any]] = materialize(
        ChangeReader(svc.bootstrap, svc.registry_url).records([svc.topic("goods")]), True)
    assert rows == [{"id": 3, "name": "three"}], rows
