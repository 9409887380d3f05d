"""Named crash points: trep-run killed (exit 137) at each exact step, with a fragmented
transaction, a DDL, a table without a key and generated columns in flight; after a restart
the THL is gapless with no source transaction twice, both targets equal the source row by
row, and the audit table shows every seqno applied exactly once.

PostgreSQL makes ``accounts``, ``nopk`` and ``big`` from the THL and adds ``big.extra``
when the row images first carry it (in the killed blocks: the ALTER must be undone with
them); the tables with generated columns are written there by hand."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
import yaml

from replicator.crashpoints import EXIT_STATUS
from thl_topics.event import RowChange
from thl_topics.reader import ThlReader

from ..harness.processes import spawn_trep, stacks
from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    NOPK_MYSQL,
    NOPK_NAMES,
    compare,
    create_tables,
)
from .test_outages import _assert_thl_exact, _extractor_status, _until
from .test_restart_points import (
    BIG_MYSQL,
    GEN_NAMES,
    GEN_NOPK_NAMES,
    GENERATED_MYSQL,
    GENERATED_NOPK_MYSQL,
    GENERATED_NOPK_PG,
    GENERATED_PG,
)
from .workload import MixedWorkload

#: point -> the pass that kills (see replicator.crashpoints for where each point is).
POINTS = {
    "apply-handshake": 1,  # the first handshake after a clean stop with positions stored
    "apply-between-fragments": 1,  # inside the 8,000-row transaction
    "apply-after-ddl": 1,  # the ALTER TABLE ran on MariaDB, its position not yet written
    "apply-before-position": 2,  # block 1 is the DDL alone, block 2 the big transaction
    "apply-commit-sent": 2,  # MariaDB: the big transaction's block sent, not committed
    "apply-committed": 2,
    "extract-between-fragments": 2,
    "extract-committed": 2,
}


def _spawn(rep: Replication, crash: str | None = None, *args: str
           ) -> subprocess.Popen[bytes]:
    """``trep-run`` in its own process, armed to die at the crash point ``crash``."""
    proc = spawn_trep("trep.runner", rep.config_path, rep.log_path, *args, crash=crash or None)
    rep.procs.append(proc)
    return proc


def _assert_crashed_at(rep: Replication, armed: subprocess.Popen[bytes], point: str) -> None:
    """``armed`` exits at its crash point (``point``, with or without ``:<n>``)."""
    try:
        status = armed.wait(120)
    except subprocess.TimeoutExpired:
        where = stacks(armed.pid)
        armed.kill()
        raise AssertionError(f"crash point {point} was never reached; the process's "
                             f"threads:\n{where}\nits log:\n"
                             f"{rep.log_path.read_text()[-5000:]}") from None
    log = rep.log_path.read_text()
    name = point.partition(":")[0]
    assert status == EXIT_STATUS and f"crash point {name} reached" in log, log[-3000:]


def _awkward_transactions(rep: Replication) -> None:
    """A DDL, a fragmented transaction, keyless and generated-column changes, then more."""
    s = rep.schema
    rep.src(f"ALTER TABLE {s}.big ADD COLUMN extra INT NULL")
    rows = [(i, f"row {i}") for i in range(8_000)]
    rep.src(f"INSERT INTO {s}.big (id, pad) VALUES (%s, %s)", params=rows, many=True)
    rep.src(f"INSERT INTO {s}.nopk VALUES (1, 'dup', 1.5), (1, 'dup', 1.5), (2, NULL, NULL)",
            f"UPDATE {s}.nopk SET c = 9.5 WHERE a = 1 LIMIT 1")
    rep.src(f"INSERT INTO {s}.gen (id, a, txt) VALUES (1, 1, 'one'), (2, NULL, 'null')",
            f"INSERT INTO {s}.gen_nopk (a, txt) VALUES (3, 'x'), (3, 'x')")
    rep.src(f"UPDATE {s}.gen SET a = 7 WHERE id = 1",
            f"UPDATE {s}.gen_nopk SET txt = 'y' WHERE a = 3 LIMIT 1",
            f"DELETE FROM {s}.big WHERE id < 100")


def _applied_exactly_once(rep: Replication, query: Callable[[str], list[tuple[int, int]]],
                          expected: set[int]) -> None:
    audit = f"{rep.cfg.tracking_schema}.trep_apply_audit"
    counts = dict(query(audit))
    twice = {s: n for s, n in counts.items() if n != 1}
    assert not twice, f"seqnos applied more than once: {twice}"
    missing = expected - set(counts)
    assert not missing, f"seqnos never applied: {sorted(missing)[:20]}"


def _data_seqnos(rep: Replication) -> tuple[set[int], set[int]]:
    """Seqnos carrying rows of the test schema (both targets), and any item (MariaDB)."""
    rows, any_item = set(), set()
    with ThlReader(rep.cfg.kafka.client(), rep.cfg.thl_topic) as reader:
        for rec in reader.records(reader.watermarks()[0]):
            assert rec.event is not None
            for item in rec.event.data:
                any_item.add(rec.seqno)
                if isinstance(item, RowChange) and item.schema == rep.schema:
                    rows.add(rec.seqno)
    return rows, any_item


@pytest.mark.parametrize("point", list(POINTS))
def test_crash_at_each_named_point_loses_nothing_and_applies_once(
        make_replication: Callable[..., Replication], point: str) -> None:
    audit = {"audit_seqnos": True}
    rep = make_replication(mariadb_target=audit, pg_target=audit)
    data = yaml.safe_load(rep.config_path.read_text())
    data["extractor"]["fragment_rows"] = 2000  # the 8,000-row transaction: 4 fragments
    rep.config_path.write_text(yaml.safe_dump(data))

    # Phase 0: a clean run that stores positions everywhere.
    first = _spawn(rep)
    _until("extractor ONLINE", lambda: _extractor_status(rep).get("state") == "ONLINE", 90)
    create_tables(rep, (ACCOUNTS_MYSQL, None), (NOPK_MYSQL, None), (BIG_MYSQL, None),
                  (GENERATED_MYSQL, GENERATED_PG), (GENERATED_NOPK_MYSQL, GENERATED_NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=61)  # one id sequence throughout
    work.run(50)
    rep.wait_source_applied()
    epoch0 = _extractor_status(rep).get("appliedLastEpoch")
    first.terminate()
    assert first.wait(60) == 0, rep.log_path.read_text()[-3000:]

    # Phase 1: armed; the awkward transactions go in while it runs.
    armed = _spawn(rep, f"{point}:{POINTS[point]}")
    if point == "extract-committed":
        # Its second Kafka commit must come: written before the extractor streams, the
        # whole phase is read in one burst (the compiled decoder reads 8,000 rows in a few
        # ms) and goes out in one Kafka transaction, and an idle extractor commits no more.
        _until("armed extractor ONLINE", lambda: _extractor_status(rep).get("state") ==
               "ONLINE" and _extractor_status(rep).get("appliedLastEpoch") != epoch0, 90)
    _awkward_transactions(rep)
    work.run(100)
    _assert_crashed_at(rep, armed, point)

    # Phase 2: restarted clean, everything converges exactly.
    again = _spawn(rep)
    work.run(20)
    rep.wait_source_applied(timeout=300)
    again.terminate()
    assert again.wait(60) == 0, rep.log_path.read_text()[-3000:]

    _assert_thl_exact(rep)
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
    assert compare(rep, "big", ["id", "pad"], "id") == 7_900
    assert compare(rep, "gen", GEN_NAMES, "id") == 2
    assert compare(rep, "gen_nopk", GEN_NOPK_NAMES, "a, txt") == 2
    rows, any_item = _data_seqnos(rep)
    _applied_exactly_once(rep, lambda t: [tuple(r) for r in rep.tgt(
        f"SELECT seqno, COUNT(*) FROM {t} GROUP BY seqno")], any_item)
    _applied_exactly_once(rep, lambda t: [tuple(r) for r in rep.pgsql(
        'SELECT seqno, COUNT(*) FROM "{}"."{}" GROUP BY seqno'.format(*t.split(".")))], rows)
    assert rep.tgt(f"SELECT COUNT(*) FROM {rep.cfg.tracking_schema}.trep_commit_seqno") \
        == [(1,)]
    # The column PostgreSQL added from the row images, once, with its source type.
    assert rep.pgsql(
        "SELECT column_name, data_type, col_description(format('%I.%I', table_schema, "
        "table_name)::regclass, ordinal_position) FROM information_schema.columns "
        f"WHERE table_schema = '{rep.schema}' AND table_name = 'big' ORDER BY ordinal_position"
    ) == [("id", "integer", "tungsten source type: INT"),
          ("pad", "character varying", "tungsten source type: VARCHAR(160 bytes)"),
          ("extra", "integer", "tungsten source type: INT")]
