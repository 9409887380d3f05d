"""Filters on the real path: an extract-stage chain changes the THL for every group, a
group's chain changes only its target, a failing filter stops its stage at a seqno with its
name, and `thl filter-test` shows the effect of a chain without writing anything."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import yaml

from stack.settings import REPO_ROOT
from thl_topics.event import ThlEvent

from .conftest import Replication
from .tables import ACCOUNTS_MYSQL, ACCOUNTS_NAMES, ACCOUNTS_PG, NOPK_MYSQL, create_tables
from .test_outages import _extractor_status, _until


def explode_on(**options: Any) -> Callable[[ThlEvent], ThlEvent]:
    """A user's filter that fails on events touching ``table`` (for the tests below)."""
    def run(event: ThlEvent) -> ThlEvent:
        if any(getattr(item, "table", None) == options["table"] for item in event.data):
            raise RuntimeError(f"cannot handle {options['table']}")
        return event
    return run


def _chain(rep: Replication, stage: str, chain: list[dict[str, Any]]) -> None:
    data = yaml.safe_load(rep.config_path.read_text())
    section = data["extractor"] if stage == "extract" else data["consumers"][stage]
    section.setdefault("filters", {})["chain"] = chain
    rep.config_path.write_text(yaml.safe_dump(data))
    rep.cfg = type(rep.cfg).model_validate(data)


def _hash(value: str) -> str:
    return hmac.new(b"pepper", value.encode(), hashlib.sha256).hexdigest()


def test_extract_stage_chain_changes_the_thl_for_every_group(replication: Replication) -> None:
    rep = replication
    _chain(rep, "extract", [
        {"type": "dropcolumn", "tables": [f"{rep.schema}.accounts"], "columns": ["note"]},
        {"type": "mask", "name": "hide-names", "tables": [f"{rep.schema}.accounts"],
         "columns": ["name"], "method": "hash", "salt": "pepper"},
    ])
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    rep.src(*(f"INSERT INTO {rep.schema}.accounts (id, name, balance, note, flag) VALUES "
              f"({i}, 'name {i} ü', {i}.5, 'secret note', 1)" for i in range(1, 21)))
    rep.src(f"UPDATE {rep.schema}.accounts SET name = 'renamed', note = 'x' WHERE id = 3",
            f"DELETE FROM {rep.schema}.accounts WHERE id = 4")
    rep.wait_source_applied()
    src = rep.src(f"SELECT id, name, balance, flag FROM {rep.schema}.accounts ORDER BY id")
    expected = [(i, _hash(n), b, f) for i, n, b, f in src]
    assert len(expected) == 19
    got = rep.tgt(f"SELECT id, name, balance, flag FROM {rep.schema}.accounts ORDER BY id")
    assert got == expected
    assert rep.tgt(f"SELECT COUNT(*) FROM {rep.schema}.accounts WHERE note IS NOT NULL") \
        == [(0,)]
    pg = rep.pgsql(f'SELECT id, name, balance, flag, note FROM "{rep.schema}".accounts '
                   "ORDER BY id")
    assert [r[:4] for r in pg] == expected and all(r[4] is None for r in pg)


def test_group_stage_chain_changes_only_that_target(replication: Replication) -> None:
    rep = replication
    _chain(rep, "pg", [
        {"type": "rename", "tables": {f"{rep.schema}.accounts": "accounts_copy"},
         "columns": {f"{rep.schema}.accounts": {"name": "full_name"}}},
        {"type": "pkey", "tables": {f"{rep.schema}.nopk": ["a"]}},
    ])
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    rep.src(NOPK_MYSQL.format(s=rep.schema))
    rep.pgsql(f'CREATE TABLE "{rep.schema}".accounts_copy (id INT PRIMARY KEY, '
              "full_name VARCHAR(64), balance NUMERIC(20,4), note TEXT, "
              "updated TIMESTAMP(6), flag SMALLINT)",
              f'CREATE TABLE "{rep.schema}".nopk (a INT PRIMARY KEY, b VARCHAR(20), '
              "c DOUBLE PRECISION)")
    rep.src(*(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES ({i}, 'n{i}')"
              for i in range(1, 6)))
    rep.src(f"INSERT INTO {rep.schema}.nopk VALUES (1, 'one', 1.5), (2, 'two', NULL)",
            f"UPDATE {rep.schema}.nopk SET b = 'uno' WHERE a = 1")
    rep.wait_source_applied()
    cols = ", ".join(ACCOUNTS_NAMES)
    source = rep.src(f"SELECT {cols} FROM {rep.schema}.accounts ORDER BY id")
    assert rep.tgt(f"SELECT {cols} FROM {rep.schema}.accounts ORDER BY id") == source
    renamed = rep.pgsql(f'SELECT id, full_name FROM "{rep.schema}".accounts_copy ORDER BY id')
    assert renamed == [(r[0], r[1]) for r in source]
    assert rep.pgsql(f'SELECT a, b FROM "{rep.schema}".nopk ORDER BY a') == \
        [(1, "uno"), (2, "two")]


def test_a_failing_filter_stops_its_stage_at_the_seqno_with_its_name(
        replication: Replication) -> None:
    rep = replication
    here = __name__
    _chain(rep, "pg", [{"type": "custom", "name": "picky", "path": f"{here}:explode_on",
                        "options": {"table": "accounts"}}])
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    before = rep.wait_source_applied()
    rep.src(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES (1, 'x')")
    status = rep.wait_state("pg", "OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == before + 1
    assert f"filter picky failed at seqno {before + 1}" in status["pendingExceptionMessage"]
    assert "cannot handle accounts" in status["pendingExceptionMessage"]
    assert rep.status("mariadb")["state"] == "ONLINE"  # only that group's stage stops
    assert rep.trepctl("online", "-group", "pg", "--skip-seqno", str(before + 1)).returncode == 0
    rep.wait_state("pg", "ONLINE")
    rep.stop()

    # The same filter at extraction stops the extractor there, for everyone.
    _chain(rep, "pg", [])
    _chain(rep, "extract", [{"type": "custom", "name": "picky", "path": f"{here}:explode_on",
                             "options": {"table": "accounts"}}])
    rep.start()
    rep.src(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES (2, 'y')")
    _until("extractor OFFLINE:ERROR",
           lambda: _extractor_status(rep).get("state") == "OFFLINE:ERROR", 60)
    message = _extractor_status(rep)["pendingExceptionMessage"]
    assert "filter picky failed at seqno" in message and "cannot handle accounts" in message
    assert rep.runner is not None
    rep.runner.stop()
    rep.runner.wait()
    assert any("picky" in f for f in rep.runner.failures)
    rep.runner = None


def test_filter_test_prints_diffs_and_writes_nothing(replication: Replication) -> None:
    rep = replication
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    first = rep.thl_tail() + 1
    rep.src(f"INSERT INTO {rep.schema}.accounts (id, name, note) VALUES (1, 'alice', 'n1')")
    rep.src(f"UPDATE {rep.schema}.accounts SET note = 'n2' WHERE id = 1")
    last = rep.wait_source_applied()
    positions = {g: rep.status(g)["appliedLastSeqno"] for g in ("mariadb", "pg")}
    _chain(rep, "pg", [{"type": "mask", "tables": [f"{rep.schema}.accounts"],
                        "columns": ["note"], "replacement": "[hidden]"}])
    env = {"PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-m", "trep.thl", "-c", str(rep.config_path),
                          "filter-test", "-low", str(first), "-high", str(last),
                          "-group", "pg"], capture_output=True, text=True, env=env,
                         cwd=REPO_ROOT, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "[hidden]" in text and "+" in text and "-" in text
    assert f"SEQ# = {last} / FRAG# = 0: unchanged" in text  # the marker row: no accounts
    assert "nothing was written" in text
    # Nothing moved: positions and data as before the dry run.
    assert {g: rep.status(g)["appliedLastSeqno"] for g in ("mariadb", "pg")} == positions
    assert rep.pgsql(f'SELECT note FROM "{rep.schema}".accounts') == [("n2",)]
    bad = subprocess.run([sys.executable, "-m", "trep.thl", "-c", str(rep.config_path),
                          "filter-test", "-low", "0", "-high", "1"], capture_output=True,
                         text=True, env=env, cwd=REPO_ROOT, timeout=60, check=False)
    assert bad.returncode == 2 and "-group G or -stage extract" in bad.stderr
