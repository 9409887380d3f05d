"""Replays: a range replayed with another batch size leaves every table as it was (over
the tables in ``make soak``); after ``reset``, ``--from-seqno`` re-applies into emptied
tables, in other blocks, the same rows; time travel by seqno and a rebuild as of a seqno
agree with the tables' history."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from consumers.warehouse.history import commit_ranges, rebuild, version_for_seqno
from consumers.warehouse.naming import TableRef
from stack.settings import REPO_ROOT
from trep.warehouse import cli as warehouse_cli

from ..soak import SOAK
from ..sparks import connect_session, delta_rows
from .conftest import CraftedThl, delete, insert, spec, update

ITEM = [spec(1, "id", "INT", key=True), spec(2, "name", "VARCHAR", length=40)]
COLS = ["id", "name", "_seqno"]


def trepctl(svc: CraftedThl, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "trep.trepctl", "-c", str(svc.config_path),
                           *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr


def reset_and_replay(svc: CraftedThl, start: int, last: int) -> None:
    """offline, reset, online --from-seqno ``start``; until ``last`` is applied again."""
    trepctl(svc, "offline")
    svc.wait_state("OFFLINE:NORMAL")
    trepctl(svc, "reset", "-y")
    assert svc.status()["appliedLastSeqno"] == -1
    trepctl(svc, "online", "--from-seqno", str(start))
    svc.wait_applied(last, timeout=600)  # small blocks: a Delta commit each


def _workload(svc: CraftedThl, n: int) -> int:
    s, last = "shop", -1
    for i in range(n):
        items = [insert(s, "items", ITEM, [i, f"v{i}"], [i + 1000, f"w{i}"])]
        if i % 3 == 1:
            items.append(update(s, "items", ITEM, [i - 1, f"v{i - 1}"], [i - 1, f"u{i}"]))
        if i % 4 == 2:
            items.append(delete(s, "items", ITEM, [i + 1000, f"w{i}"]))
        if i % 5 == 3:
            items.append(delete(s, "items", ITEM, [i, f"v{i}"]))
            items.append(insert(s, "items", ITEM, [i, f"again{i}"]))
        last = svc.publish(*items)
    return last


@pytest.mark.timeout(2400)  # three full applies, in small blocks: slow on a shared machine
@pytest.mark.slow
def test_replay_with_another_batch_size_changes_nothing(crafted: CraftedThl) -> None:
    last = _workload(crafted, 40)
    crafted.cfg.consumers["w"] = crafted.cfg.consumers["w"].model_copy(
        update={"block_commit_rows": 40})  # several blocks: commits to travel between
    crafted.start()
    crafted.wait_applied(last)
    before = crafted.rows("shop", "items", COLS)
    assert len(before) > 40
    ref = TableRef("shop.items", path=crafted.path("shop", "items"))
    spark = connect_session()
    first_commits = commit_ranges(spark, ref)
    assert len(first_commits) > 2
    # Time travel by seqno: the version holding the end of the second block.
    middle = first_commits[1].high
    found = version_for_seqno(first_commits, middle)
    assert found is not None and found.exact and found.commit == first_commits[1]
    old = sorted((tuple(r) for r in spark.read.format("delta").option(
        "versionAsOf", found.commit.version).load(ref.path).select(*COLS).collect()), key=repr)
    assert 0 < len(old) < len(before) + 40
    crafted.stop()

    generations = 2  # each reset and each --from-seqno starts one
    if SOAK:
        # The same range again, 12 rows per block, in a new generation: no table changes.
        # (make test replays once, below: a Delta commit per small block is what costs.)
        with_rows = crafted.cfg.consumers["w"].model_copy(update={"block_commit_rows": 12})
        crafted.cfg.consumers["w"] = with_rows
        crafted.start()
        crafted.wait_state("ONLINE")
        reset_and_replay(crafted, 0, last)
        assert crafted.rows("shop", "items", COLS) == before
        generations += 2
    # --from-seqno after reset re-applies everything into emptied tables, in other blocks
    # than the first run's: the same rows.
    crafted.stop()
    shutil.rmtree(crafted.location / "shop")
    crafted.cfg.consumers["w"] = crafted.cfg.consumers["w"].model_copy(
        update={"block_commit_rows": 25})
    crafted.start()
    crafted.wait_state("ONLINE")
    reset_and_replay(crafted, 0, last)
    assert crafted.rows("shop", "items", COLS) == before

    # A rebuild as of that seqno from the THL is the table time travel gave.
    to = f"{crafted.location}/rebuilt"
    applied = rebuild(spark, crafted.bootstrap, crafted.cfg.thl_topic, "shop", "items", middle,
                      to)
    assert applied > 0
    assert sorted(delta_rows(f"file://{to}", COLS), key=repr) == old

    # The same through trep-warehouse, in this process: each command opens its own Connect
    # session beside the test's (pyspark bound checkpoints to the thread's first session:
    # session.checkpointed).
    cli = CliRunner()
    done = cli.invoke(warehouse_cli, ["-c", str(crafted.config_path), "version", "-table",
                                      "shop.items", "-seqno", str(middle), "--history"])
    assert done.exit_code == 0, done.output
    # (The table was emptied and replayed since: its history is the last replay's, whose
    # generation counts every reset and --from-seqno.)
    assert f"seqno {middle}: version " in done.output, done.output
    assert f"(generation {generations}, covers seqnos" in done.output, done.output
    again = f"{crafted.location}/rebuilt-cli"
    done = cli.invoke(warehouse_cli, ["-c", str(crafted.config_path), "rebuild", "-table",
                                      "shop.items", "-seqno", str(middle), "-to", again])
    assert done.exit_code == 0, done.output
    assert sorted(delta_rows(f"file://{again}", COLS), key=repr) == old
