"""Mixed transactions replicate exactly to MariaDB and PostgreSQL, row by row (PostgreSQL
makes every table, and the schema, from the THL)."""

from __future__ import annotations

from collections.abc import Callable

from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    NOPK_MYSQL,
    NOPK_NAMES,
    TYPES_MYSQL,
    TYPES_NAMES,
    compare,
    create_tables,
)
from .workload import MixedWorkload


def test_ten_thousand_mixed_transactions_arrive_exactly(
        make_replication: Callable[..., Replication]) -> None:
    rep = make_replication(pg_by_hand=False)
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, None), (NOPK_MYSQL, None), (TYPES_MYSQL, None))
    work = MixedWorkload(rep.source.port, rep.schema, types=True)
    work.seed_types()
    work.run(10_000)
    assert work.committed == 10_000
    rep.wait_source_applied(timeout=600)

    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 100
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 10
    assert compare(rep, "types", TYPES_NAMES, "id") == 3
    # Positions: trep_commit_seqno on each target says what the status says.
    for group, rows in (("mariadb", rep.tgt(
            f"SELECT seqno, epoch_number FROM {rep.cfg.tracking_schema}.trep_commit_seqno")),
            ("pg", rep.pgsql(f'SELECT seqno, epoch_number FROM '
                             f'"{rep.cfg.tracking_schema}".trep_commit_seqno'))):
        status = rep.status(group)
        assert rows == [(status["appliedLastSeqno"], status["appliedLastEpoch"])]
        assert status["state"] == "ONLINE"
