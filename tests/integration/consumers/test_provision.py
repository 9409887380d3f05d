"""Provisioning existing rows through the THL while a workload writes to them: in chunks by
key, each at the binlog position of its consistent snapshot, restart-safe, and every target
equal to the source at the end."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from replicator.requests import read_request
from stack.settings import REPO_ROOT
from thl_topics.event import RowChange
from thl_topics.reader import ThlReader
from thl_topics.records import META_PROVISION

from ..harness.processes import bare_env, run_trep
from ..soak import SOAK, kills
from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    ACCOUNTS_PG,
    NOPK_MYSQL,
    NOPK_NAMES,
    NOPK_PG,
    TYPES_MYSQL,
    TYPES_NAMES,
    TYPES_PG,
    TYPES_ROWS,
    compare,
)
from .test_outages import _extractor_status, _until
from .workload import MixedWorkload

#: Rows the provisioning test seeds: enough for every kill to land mid-table (and, in soak,
#: for long chunked runs); the path is the same at either size.
SEEDED = 500_000 if SOAK else 100_000


def _seed(rep: Replication, accounts: int) -> None:
    """Rows that exist before replication starts (never in the THL as changes)."""
    s = rep.schema
    for ddl in (ACCOUNTS_MYSQL, NOPK_MYSQL, TYPES_MYSQL):
        rep.src(ddl.format(s=s))
    for ddl in (ACCOUNTS_PG, NOPK_PG, TYPES_PG):
        rep.pgsql(ddl.format(s=s))
    # MariaDB cannot report ENUM members with 4-byte characters (its data dictionary is
    # utf8mb3): provisioning sends no CREATE TABLE for such a table, the operator makes it.
    rep.tgt(TYPES_MYSQL.format(s=s))
    rng = random.Random(1)
    step = 20_000
    for start in range(1, accounts + 1, step):
        rows = [(i, f"name {i} ü😀", f"{rng.randint(-10**9, 10**9)}.{i % 10000:04d}",
                 None if i % 7 else "note", f"2024-01-01 00:00:{i % 60:02d}.{i % 999999:06d}",
                 i % 3) for i in range(start, min(start + step, accounts + 1))]
        rep.src(f"INSERT INTO {s}.accounts VALUES (%s, %s, %s, %s, %s, %s)",
                params=rows, many=True)
    rep.src(f"INSERT INTO {s}.nopk VALUES (%s, %s, %s)",
            params=[(i % 20, None if i % 5 else "x", 0.5) for i in range(300)], many=True)
    marks = ", ".join(["%s"] * len(TYPES_NAMES))
    rep.src("SET sql_mode = ''", f"INSERT INTO {s}.types VALUES ({marks})",
            params=TYPES_ROWS, many=True)


def _chunk_keys(rep: Replication) -> Counter[tuple[str, object]]:
    """How many provisioned chunks carried each (table, key)."""
    seen: Counter[tuple[str, object]] = Counter()
    with ThlReader(rep.cfg.kafka.bootstrap_servers, rep.cfg.thl_topic) as reader:
        for rec in reader.records(reader.watermarks()[0]):
            assert rec.event is not None
            if META_PROVISION not in rec.event.metadata:
                continue
            for item in rec.event.data:
                if isinstance(item, RowChange) and item.table != "nopk":
                    for row in item.column_values:
                        seen[(item.table, row[0])] += 1
    return seen


@pytest.mark.slow
def test_provision_under_load_with_extractor_kills(replication: Replication) -> None:
    rep = replication
    # A new service over tables that have rows already: it provisions them first, while
    # the workload writes to the same tables.
    data = yaml.safe_load(rep.config_path.read_text())
    data["extractor"].update(provision="initial", provision_chunk_rows=2000,
                             provision_rows_per_s=40_000 if SOAK else 20_000)
    rep.config_path.write_text(yaml.safe_dump(data))
    _seed(rep, SEEDED)
    runner = rep.spawn()
    work = MixedWorkload(rep.source.port, rep.schema, seed=31, rate=50)
    work._next_id = 1_000_000  # new rows above the seeded ones
    work.start()
    try:
        for kill in range(kills(quick=2, soak=5)):
            def progressed(kill: int = kill) -> bool:
                return (_rows_done(rep) or 0) > SEEDED // 8 * (kill + 1)
            _until("provisioning progress", progressed, 180)
            assert _state(rep) != "done", "the kill would land after provisioning"
            runner.send_signal(signal.SIGKILL)
            runner.wait(30)
            if kill == 0:
                # A second request while one runs is refused.
                again = run_trep("trep.trepctl", rep.config_path, "provision", "--no-wait",
                                 timeout=60, env=bare_env())
                assert again.returncode == 1 and "running already" in again.stderr, again
            runner = rep.spawn()
        _until("provisioning done", lambda: _state(rep) == "done", 600)
    finally:
        committed = work.stop()
    assert committed > 50
    rep.wait_source_applied(timeout=600)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(60) == 0, rep.log_path.read_text()[-3000:]

    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > SEEDED
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") >= 300
    assert compare(rep, "types", TYPES_NAMES, "id") == 3
    twice = [k for k, n in _chunk_keys(rep).items() if n > 1]
    assert not twice, f"rows published by more than one chunk: {twice[:5]}"
    log = rep.log_path.read_text()
    assert "no primary key; the whole table goes in one chunk" in log
    assert "ENUM/SET members of e with '?'" in log


def _rows_done(rep: Replication) -> int | None:
    req = read_request(rep.zk, rep.cfg)
    return None if req is None else req.rows_done


def _state(rep: Replication) -> str | None:
    req = read_request(rep.zk, rep.cfg)
    return None if req is None else req.state


def test_reprovision_one_table_repairs_a_target_while_streaming(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(ACCOUNTS_MYSQL.format(s=s))
    rep.pgsql(ACCOUNTS_PG.format(s=s))
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (%s, %s)",
            params=[(i, f"n{i}") for i in range(1, 2001)], many=True)
    rep.wait_source_applied()
    # The targets drift: rows lost, a row that never existed, a changed value.
    rep.tgt(f"DELETE FROM {s}.accounts WHERE id < 100",
            f"INSERT INTO {s}.accounts (id, name) VALUES (99999, 'ghost')",
            f"UPDATE {s}.accounts SET name = 'wrong' WHERE id = 500")
    rep.pgsql(f'DELETE FROM "{s}".accounts WHERE id > 1900')
    work = MixedWorkload(rep.source.port, rep.schema, seed=33, rate=40)
    work._next_id = 5000
    rep.src(NOPK_MYSQL.format(s=s))
    rep.pgsql(NOPK_PG.format(s=s))
    follow = subprocess.Popen([sys.executable, "-m", "trep.trepctl", "-c",
                               str(rep.config_path), "provision", "-table", f"{s}.accounts",
                               "-limit", "300"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT,
                              env=bare_env())
    # Changes to the drifted rows from here on are provisioning's: they must not fail.
    _until("provisioning running", lambda: _state(rep) in ("running", "done"), 60)
    work.start()
    try:
        out, _ = follow.communicate(timeout=400)
    finally:
        work.stop()
    assert follow.returncode == 0, out
    # Not a terminal: plain progress lines, then done.
    assert "rows/s" in out and "done" in out
    rep.wait_source_applied()
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") >= 2000
    status = _extractor_status(rep)
    assert status["provisioning"] == "NONE" and status["state"] == "ONLINE"
    again = run_trep("trep.trepctl", rep.config_path, "provision", "-table", "nodot",
                     timeout=60, env=bare_env())
    assert again.returncode == 2 and "use schema.table" in again.stderr
    marks = [m for m in map(json.loads, _provision_marks(rep)) if "table" in m]
    assert marks[0]["first"] and marks[-1]["end"]
    assert {tuple(m["table"]) for m in marks if "table" in m} == {(s, "accounts")}


def _provision_marks(rep: Replication) -> list[str]:
    out = []
    with ThlReader(rep.cfg.kafka.bootstrap_servers, rep.cfg.thl_topic) as reader:
        for rec in reader.records(reader.watermarks()[0]):
            assert rec.event is not None
            if META_PROVISION in rec.event.metadata and rec.event.last_frag:
                out.append(rec.event.metadata[META_PROVISION])
    return out


def test_a_table_the_source_lacks_fails_the_request_not_the_extractor(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(ACCOUNTS_MYSQL.format(s=s))
    rep.pgsql(ACCOUNTS_PG.format(s=s))
    asked = run_trep("trep.trepctl", rep.config_path, "provision", "-table", f"{s}.accounts",
                     "-table", f"{s}.missing", timeout=120, env=bare_env())
    assert asked.returncode != 0
    assert f"{s}.missing: no such table" in asked.stderr + asked.stdout
    assert _state(rep) == "failed"
    # A check that would compare nothing (a table outside the replicated ones) is refused too.
    checked = run_trep("trep.trepctl", rep.config_path, "check", "mysql.db", "-timeout", "60",
                       timeout=120, env=bare_env())
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "no replicated table to check" in checked.stderr, checked.stdout + checked.stderr
    assert "mysql.db" in checked.stderr
    # The extractor goes on streaming, and took nothing of the failed request into the THL.
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (1, 'after')")
    rep.wait_source_applied()
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") == 1
    assert _extractor_status(rep)["state"] == "ONLINE"
    assert _provision_marks(rep) == []


def test_a_group_stopped_on_a_drifted_table_is_repaired_by_provisioning_it(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(ACCOUNTS_MYSQL.format(s=s))
    rep.pgsql(ACCOUNTS_PG.format(s=s))
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (%s, %s)",
            params=[(i, f"n{i}") for i in range(1, 101)], many=True)
    rep.wait_source_applied()
    rep.tgt(f"DELETE FROM {s}.accounts WHERE id = 5")
    rep.pgsql(f'DELETE FROM "{s}".accounts WHERE id = 5')
    # A change meets the drifted row: each group stops on it, as it must.
    rep.src(f"UPDATE {s}.accounts SET name = 'changed' WHERE id = 5",
            f"UPDATE {s}.accounts SET name = 'also' WHERE id = 6")
    for group in ("mariadb", "pg"):
        stopped = rep.wait_state(group, "OFFLINE:ERROR")
        assert "diverged" in stopped["pendingExceptionMessage"]
    # The operator re-provisions the table and puts the groups back online: the stopped
    # transaction comes before the provisioning, whose first chunk empties and reloads the
    # table, so it applies leniently; nothing of it is skipped (id 6 changes too).
    asked = rep.trepctl("provision", "-table", f"{s}.accounts")
    assert asked.returncode == 0, asked.stderr
    for group in ("mariadb", "pg"):
        assert rep.trepctl("online", "-group", group).returncode == 0
    rep.src(f"UPDATE {s}.accounts SET name = 'later' WHERE id = 7")
    rep.wait_source_applied()
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") == 100
    assert rep.tgt(f"SELECT name FROM {s}.accounts WHERE id IN (5, 6, 7) ORDER BY id") == [
        ("changed",), ("also",), ("later",)]
