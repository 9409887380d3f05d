"""Exactly once under SIGKILL, and fencing: every row change of a mixed workload (inserts,
updates, deletes, key changes, a keyless table, the type matrix) reaches its change topic
exactly once per seqno under ``read_committed``, in seqno order per key, across SIGKILLs (3;
20 in make soak) of ``trep-run`` at random points under load; a second applier of the group
is fenced, and the fenced one cannot commit; the materialized topics equal the source row by
row."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from consumers.changes.applier import ChangesApplier
from consumers.changes.readback import Change, ChangeReader, materialize
from consumers.errors import PositionConflict
from consumers.position import Position
from consumers.registry import ApplierContext
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent

from ...conformance.kinds.changes import _comparable
from ...soak import kills
from ..tables import ACCOUNTS_MYSQL, ACCOUNTS_NAMES, NOPK_MYSQL, NOPK_NAMES, TYPES_MYSQL
from ..workload import MixedWorkload
from .conftest import ChangeService

TYPES_NAMES = ["id", "u_big", "s_big", "tiny", "u_tiny", "small", "u_med", "i", "u_i", "dec65",
               "dec_small", "f", "d", "b64", "b1", "b9", "y", "t6", "t0", "dt6", "dt0", "ts6",
               "ts0", "dte", "e", "st", "j", "vc", "ch", "txt", "ltxt", "vb", "bn", "bl"]
GROUP = "changes"


class KeyChangingWorkload(MixedWorkload):
    """The mixed workload plus primary key changes of live accounts."""

    def _statement(self, cur: Any) -> None:
        if self.rng.random() < 0.08:
            cur.execute(f"UPDATE {self.schema}.accounts SET id = id + 1000000 WHERE id = %s",
                        (self.rng.randint(1, self._next_id),))
            return
        super()._statement(cur)


def _records(svc: ChangeService, tables: list[str]) -> list[Change]:
    reader = ChangeReader(svc.bootstrap, svc.registry_url)
    return list(reader.records([svc.topic(t) for t in tables]))


def _assert_exactly_once_in_order(changes: list[Change]) -> int:
    """Each (seqno, row) once (and its tombstone once), rows of a seqno without holes, and
    per key nondecreasing seqnos in offset order; the number of seqnos."""
    data = Counter((c.seqno, c.row) for c in changes if c.op is not None)
    tombs = Counter((c.seqno, c.row) for c in changes if c.op is None)
    twice = [k for k, n in (data + tombs).items() if n > (2 if k in tombs else 1)]
    assert not twice, f"published more than once: {twice[:10]}"
    assert all(n == 1 for n in tombs.values())
    rows_by_seqno: dict[int, list[int]] = defaultdict(list)
    for seqno, row in data:
        rows_by_seqno[seqno].append(row)
    for seqno, rows in rows_by_seqno.items():
        assert sorted(rows) == list(range(len(rows))), f"seqno {seqno}: rows {sorted(rows)}"
    last: dict[tuple[str, str], int] = {}
    for c in changes:
        if c.key is None:
            continue
        k = (c.topic, repr(sorted(c.key.items())))
        assert c.seqno >= last.get(k, -1), f"key {k} goes back to seqno {c.seqno}"
        last[k] = c.seqno
    return len(rows_by_seqno)


def _compare(svc: ChangeService, table: str, columns: list[str], keyed: bool) -> int:
    src = sorted((tuple(_comparable(c, v) for c, v in zip(columns, row, strict=True))
                  for row in svc.src(f"SELECT {', '.join(columns)} FROM {svc.schema}.{table}")),
                 key=repr)
    reader = ChangeReader(svc.bootstrap, svc.registry_url)
    changes = list(reader.records([svc.topic(table)]))
    rows = materialize(changes, keyed)
    tgt = sorted((tuple(_comparable(c, r.get(c)) for c in columns) for r in rows), key=repr)
    if tgt != src and keyed:
        odd = {row[0] for row in set(tgt) ^ set(src)}
        history = [(c.partition, c.offset, c.seqno, c.row, c.op, c.key) for c in changes
                   if c.key and next(iter(c.key.values())) in odd]
        raise AssertionError(f"{table}: {len(tgt)} rows in the topic, {len(src)} on the "
                             f"source; keys {sorted(odd)[:10]}: {history[:40]}")
    assert tgt == src, f"{table}: {len(tgt)} rows in the topic, {len(src)} on the source"
    return len(src)


def _fake_event(svc: ChangeService, seqno: int) -> ThlEvent:
    spec = ColumnSpec(index=1, name="n", type="INT", primary_key=True)
    return ThlEvent(seqno=seqno, epoch=0, source_id="test", event_id="x:1;0",
                    shard_id=svc.schema, tstamp=0,
                    data=[RowChange(RowAction.INSERT, svc.schema, "ready", [spec], [],
                                    [[-1]], [])])


def test_sigkills_under_load_publish_every_row_change_exactly_once(
        make_service: Callable[..., ChangeService]) -> None:
    svc = make_service({GROUP: {"envelope": "debezium", "format": "avro", "partitions": 3}},
                       block_commit_events=20)
    s = svc.schema
    svc.src(ACCOUNTS_MYSQL.format(s=s), NOPK_MYSQL.format(s=s), TYPES_MYSQL.format(s=s))
    work = KeyChangingWorkload(svc.source.port, s, seed=61, types=True, rate=40)
    rng = random.Random(61)
    since = time.time()
    proc = svc.spawn()
    svc.wait_extractor_online(since)
    # With no THL yet the extractor starts at the binlog's end: the THL must hold a first
    # event before the workload and the kills begin (then every restart resumes from it).
    svc.thl_marker()
    work.seed_types()
    work.start()
    try:
        for _ in range(kills()):
            time.sleep(rng.uniform(0.5, 4.0))
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
            proc = svc.spawn()
    finally:
        committed = work.stop(at_least=101)
    assert committed > 100
    svc.wait_source_applied(timeout=300)

    # A second applier of the group: its producer fences the running one, whose next
    # commit is refused (CONFLICT) with nothing published.
    cfg = svc.cfg.consumers[GROUP].target
    second = ChangesApplier(cfg, ApplierContext(svc.cfg, GROUP))  # type: ignore[arg-type]
    second.connect()
    stored = second.position()
    assert stored is not None
    svc.src(f"INSERT INTO {s}.nopk VALUES (99, 'after fence', NULL)")
    status = svc.wait_state(GROUP, "OFFLINE:ERROR", timeout=120)
    assert status["pendingErrorCode"] == "CONFLICT", status
    assert "fenced" in status["pendingExceptionMessage"], status
    # The operator brings the group back: it fences the second applier in turn.
    second.begin()
    assert svc.trepctl("online").returncode == 0
    svc.wait_state(GROUP, "ONLINE", timeout=120)
    with pytest.raises(PositionConflict, match="fenced"):
        second.apply(_fake_event(svc, stored.seqno + 1))
        second.commit(Position(seqno=stored.seqno + 1, epoch=0, event_id="x:1;0"))
    second.close()

    last = svc.wait_source_applied(timeout=300)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, svc.log_path.read_text()[-3000:]

    tables = ["accounts", "nopk", "types"]
    changes = _records(svc, tables)
    seqnos = _assert_exactly_once_in_order(changes)
    assert seqnos > 100 and max(c.seqno for c in changes) <= last
    assert {c.op for c in changes} == {"c", "u", "d", None}
    assert _compare(svc, "accounts", ACCOUNTS_NAMES, True) > 20
    assert _compare(svc, "nopk", NOPK_NAMES, False) > 5
    assert _compare(svc, "types", TYPES_NAMES, True) == 3
    # The group's THL offset was committed in its transactions (lag tools see it).
    admin = AdminClient({"bootstrap.servers": svc.bootstrap})
    group = svc.cfg.group_id(GROUP)
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(svc.cfg.thl_topic, 0)])]
    )[group].result(30).topic_partitions
    assert offsets[0].offset > 0
