"""PostgreSQL tables made and evolved from the THL (``create_tables``), and the value
policies for what PostgreSQL cannot hold (zero dates, U+0000), against the real servers."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable

import pytest

from replicator.crashpoints import EXIT_STATUS

from ..harness.processes import spawn_trep
from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    TYPES_MYSQL,
    TYPES_NAMES,
    TYPES_ROWS,
    compare,
    create_tables,
)
from .test_operations import _tail_seqno_of_text

#: What the type map makes of the type matrix on PostgreSQL (README: "Type map").
TYPES_ON_PG = [
    ("id", "integer"), ("u_big", "numeric(20,0)"), ("s_big", "bigint"), ("tiny", "smallint"),
    ("u_tiny", "smallint"), ("small", "smallint"), ("u_med", "integer"), ("i", "integer"),
    ("u_i", "bigint"), ("dec65", "numeric(65,30)"), ("dec_small", "numeric(10,4)"),
    ("f", "real"), ("d", "double precision"), ("b64", "bit(64)"), ("b1", "bit(1)"),
    ("b9", "bit(9)"), ("y", "smallint"), ("t6", "interval(6)"), ("t0", "interval(0)"),
    ("dt6", "timestamp(6) without time zone"), ("dt0", "timestamp(0) without time zone"),
    ("ts6", "timestamp(6) with time zone"), ("ts0", "timestamp(0) with time zone"),
    ("dte", "date"), ("e", "text"), ("st", "text"), ("j", "text"),
    ("vc", "character varying(66)"), ("ch", "character varying(6)"), ("txt", "text"),
    ("ltxt", "text"), ("vb", "bytea"), ("bn", "bytea"), ("bl", "bytea"),
]


def _pg_columns(rep: Replication, table: str) -> list[tuple[str, str, str | None]]:
    """(name, type, comment) of each column of a PostgreSQL table, in order."""
    return [(r[0], r[1], r[2]) for r in rep.pgsql(
        "SELECT attname, format_type(atttypid, atttypmod), col_description(attrelid, attnum) "
        "FROM pg_attribute WHERE attrelid = format('%I.%I', "
        f"'{rep.schema}', '{table}')::regclass AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum")]


def _pg_key(rep: Replication, table: str) -> list[str]:
    rows = rep.pgsql(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indisprimary AND i.indrelid = "
        f"format('%I.%I', '{rep.schema}', '{table}')::regclass ORDER BY a.attnum")
    return [r[0] for r in rows]


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _consumers(rep: Replication, *args: str, crash: str | None = None
               ) -> subprocess.Popen[bytes]:
    """trep-run with the consumer groups only, in its own process (armed if ``crash``)."""
    proc = spawn_trep("trep.runner", rep.config_path, rep.log_path, "--no-extractor", *args,
                      crash=crash or None)
    rep.procs.append(proc)
    return proc


def _stop(rep: Replication, proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(60) == 0, rep.log_path.read_text()[-3000:]


def test_type_matrix_lands_exactly_in_a_table_made_from_the_thl(
        make_replication: Callable[..., Replication]) -> None:
    rep = make_replication(pg_by_hand=False)
    rep.start()
    create_tables(rep, (TYPES_MYSQL, None))
    marks = ", ".join(["%s"] * len(TYPES_NAMES))
    rep.src("SET sql_mode = ''",
            f"INSERT INTO {rep.schema}.types ({', '.join(TYPES_NAMES)}) VALUES ({marks})",
            params=TYPES_ROWS, many=True)
    rep.src(f"UPDATE {rep.schema}.types SET txt = 'ü😀', vb = x'00ff00', b9 = 257, "
            f"dt6 = '2001-02-03 04:05:06.000007', t6 = '-12:00:00.5' WHERE id = 2")
    rep.src(f"DELETE FROM {rep.schema}.types WHERE id = 3")
    rep.src(f"INSERT INTO {rep.schema}.types (id) VALUES (3)")
    rep.wait_source_applied()
    assert compare(rep, "types", TYPES_NAMES, "id") == 3
    columns = _pg_columns(rep, "types")
    assert [(name, type_) for name, type_, _ in columns] == TYPES_ON_PG
    assert columns[1][2] == "tungsten source type: BIGINT UNSIGNED"
    assert columns[27][2] == "tungsten source type: VARCHAR(200 bytes)"
    assert _pg_key(rep, "types") == ["id"]
    assert _pg_columns(rep, "ready") == [("n", "integer", "tungsten source type: INT")]


def test_new_and_widened_source_columns_follow_on_postgresql(
        make_replication: Callable[..., Replication]) -> None:
    rep = make_replication(pg_by_hand=False)
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, None))
    s = rep.schema
    rep.src(*(f"INSERT INTO {s}.accounts (id, name, balance) VALUES ({i}, 'before', {i}.5)"
              for i in range(1, 6)))
    rep.wait_source_applied()
    rep.src(f"ALTER TABLE {s}.accounts ADD COLUMN extra VARCHAR(10) NULL, "
            "MODIFY name VARCHAR(100), MODIFY balance DECIMAL(30,6), MODIFY flag INT")
    rep.src(f"INSERT INTO {s}.accounts VALUES (6, '{'n' * 100}', 12345678901234567890.123456, "
            "NULL, '2024-01-01 00:00:00', 100000, 'new col')")
    rep.src(f"UPDATE {s}.accounts SET extra = 'later' WHERE id < 3")
    rep.wait_source_applied()
    assert compare(rep, "accounts", [*ACCOUNTS_NAMES, "extra"], "id") == 6
    assert rep.pgsql(f'SELECT id, extra FROM "{s}".accounts ORDER BY id') == [
        (1, "later"), (2, "later"), (3, None), (4, None), (5, None), (6, "new col")]
    assert _pg_columns(rep, "accounts") == [
        ("id", "integer", "tungsten source type: INT"),
        ("name", "character varying(133)", "tungsten source type: VARCHAR(400 bytes)"),
        ("balance", "numeric(30,6)", "tungsten source type: DECIMAL(30,6)"),
        ("note", "text", "tungsten source type: TEXT"),
        ("updated", "timestamp(6) without time zone", "tungsten source type: DATETIME(6)"),
        ("flag", "integer", "tungsten source type: INT"),
        ("extra", "character varying(13)", "tungsten source type: VARCHAR(40 bytes)")]


def test_a_dropped_source_column_is_kept_and_a_narrowed_one_keeps_its_wider_type(
        make_replication: Callable[..., Replication], caplog: pytest.LogCaptureFixture) -> None:
    rep = make_replication(pg_by_hand=False)
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, None))
    s = rep.schema
    rep.src(f"INSERT INTO {s}.accounts (id, name, note) VALUES (1, 'a', 'kept on the target')")
    rep.wait_source_applied()

    # schema_changes: lenient (the default): the target keeps the column, NULL from now on.
    rep.src(f"ALTER TABLE {s}.accounts DROP COLUMN note")
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (2, 'after the drop')")
    rep.wait_source_applied()
    assert rep.status("pg")["state"] == "ONLINE"
    assert rep.pgsql(f'SELECT id, note FROM "{s}".accounts ORDER BY id') == [
        (1, "kept on the target"), (2, None)]

    # Not strict: MariaDB cuts 'after the drop' to 'after', with no row event for it. The
    # target keeps its wider column and the old value, says so, and the check finds it.
    rep.src("SET sql_mode = ''", f"ALTER TABLE {s}.accounts MODIFY name VARCHAR(5)")
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (3, 'short')")
    narrowed = _tail_seqno_of_text(rep, "'short'")
    rep.wait_source_applied()
    assert rep.status("pg")["state"] == "ONLINE"
    assert rep.pgsql(f'SELECT id, name FROM "{s}".accounts ORDER BY id') == [
        (1, "a"), (2, "after the drop"), (3, "short")]
    assert (f"column name of {s}.accounts narrowed on the source from VARCHAR(256 bytes) to "
            f"VARCHAR(20 bytes) (seqno {narrowed})") in caplog.text, caplog.text


def test_zero_dates_become_null_and_nul_is_stripped_counted_in_metrics(
        make_replication: Callable[..., Replication], caplog: pytest.LogCaptureFixture) -> None:
    rep = make_replication(pg_by_hand=False, pg_target={"nul_characters": "strip"})
    port = _free_port()
    rep.start(metrics_port=port)
    text = _metrics(port)
    assert f'trep_values_changed_total{{group="pg",kind="zero_date",service="{rep.name}"}} ' \
        "0.0" in text, text
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.dates (id INT PRIMARY KEY, d DATE, dt DATETIME(6), "
            "ts TIMESTAMP NULL, txt VARCHAR(20)) DEFAULT CHARSET=utf8mb4")
    rep.src("SET sql_mode = ''",
            f"INSERT INTO {s}.dates VALUES (1, '0000-00-00', '0000-00-00 00:00:00', "
            "'0000-00-00 00:00:00', 'a\\0b'), (2, '2024-02-29', '2024-02-29 01:02:03.000004', "
            "'2024-02-29 01:02:03', 'plain'), (3, NULL, '0000-00-00 00:00:00', NULL, '\\0'), "
            "(4, '2024-00-00', '2024-03-00 10:00:00.5', NULL, 'partial')")
    rep.wait_source_applied()
    assert rep.tgt(f"SELECT CAST(d AS CHAR), CAST(dt AS CHAR), txt FROM {s}.dates "
                   "WHERE id = 1") == [("0000-00-00", "0000-00-00 00:00:00.000000", "a\x00b")]
    # Partial dates: exact on MariaDB, the zero-date policy on PostgreSQL.
    assert rep.tgt(f"SELECT CAST(d AS CHAR), CAST(dt AS CHAR) FROM {s}.dates WHERE id = 4") \
        == [("2024-00-00", "2024-03-00 10:00:00.500000")]
    pg = rep.pgsql(f'SELECT id, d, dt, ts, txt FROM "{s}".dates ORDER BY id')
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in pg if r[0] != 2] == [
        (1, None, None, None, "ab"), (3, None, None, None, ""),
        (4, None, None, None, "partial")]
    assert pg[1][1].isoformat() == "2024-02-29" and pg[1][4] == "plain"
    time.sleep(0.5)  # the counters move after the commit
    text = _metrics(port)
    for kind, count in (("zero_date", 6), ("nul_character", 2)):
        found = re.search(rf'trep_values_changed_total{{group="pg",kind="{kind}",'
                          rf'service="{rep.name}"}} (\S+)', text)
        assert found is not None and float(found.group(1)) == count, text
    warned = caplog.text
    assert f"{s}.dates.d: 2 zero date(s) stored as NULL" in warned, warned
    assert f"{s}.dates.dt: 3 zero date(s) stored as NULL" in warned, warned
    assert f"{s}.dates.txt: 2 value(s) stored without their U+0000 characters" in warned


def _log(rep: Replication) -> str:
    return rep.log_path.read_text() if rep.log_path.exists() else ""


def test_zero_dates_and_nul_stop_with_error_after_a_rollback_of_the_tables_ddl(
        make_replication: Callable[..., Replication]) -> None:
    """The table is made in the block that meets the bad value: the block rolls back, the
    applier forgets the table it made, makes it again replaying the block seqno by seqno, and
    stops at the bad seqno with everything before it committed."""
    rep = make_replication(pg_by_hand=False, pg_target={"zero_dates": "error"})
    rep.start(consumers=[])
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.dates (id INT PRIMARY KEY, d DATE, txt TEXT) "
            "DEFAULT CHARSET=utf8mb4")
    rep.src(f"INSERT INTO {s}.dates VALUES (1, '2024-01-01', 'fine')")
    rep.src("SET sql_mode = ''", f"INSERT INTO {s}.dates VALUES (2, '0000-00-00', 'zero')")
    rep.src(f"INSERT INTO {s}.dates VALUES (3, NULL, 'also fine')")
    rep.src(f"INSERT INTO {s}.dates VALUES (4, NULL, 'nul \\0 inside')")
    rep.src(f"INSERT INTO {s}.dates VALUES (5, NULL, 'last')")
    zero = _tail_seqno_of_text(rep, "'zero'")
    nul = _tail_seqno_of_text(rep, "nul \\x00 inside")
    rep.wait_thl_tail(nul + 1)
    proc = _consumers(rep)  # every seqno above in the first block
    try:
        status = rep.wait_state("pg", "OFFLINE:ERROR")
        assert status["pendingErrorSeqno"] == zero and status["appliedLastSeqno"] == zero - 1
        assert (f"{s}.dates, column d, seqno {zero}: zero date '0000-00-00' cannot be "
                "stored on postgresql (zero_dates: error") in status["pendingExceptionMessage"]
        assert rep.pgsql(f'SELECT id FROM "{s}".dates') == [(1,)]
        assert rep.trepctl("online", "-group", "pg", "--skip-seqno", str(zero)).returncode == 0
        status = rep.wait_state("pg", "OFFLINE:ERROR")
        assert status["pendingErrorSeqno"] == nul and status["appliedLastSeqno"] == nul - 1
        assert (f"{s}.dates, column txt, seqno {nul}: PostgreSQL text cannot hold U+0000"
                in status["pendingExceptionMessage"])
        assert rep.trepctl("online", "-group", "pg", "--skip-seqno", str(nul)).returncode == 0
        rep.wait_source_applied()
        assert rep.pgsql(f'SELECT id FROM "{s}".dates ORDER BY id') == [(1,), (3,), (5,)]
        assert [r[0] for r in rep.tgt(f"SELECT id FROM {s}.dates ORDER BY id")] == \
            [1, 2, 3, 4, 5]
    finally:
        _stop(rep, proc)


def test_crash_before_the_position_leaves_no_table_or_column_behind(
        make_replication: Callable[..., Replication]) -> None:
    audit = {"audit_seqnos": True}
    rep = make_replication(pg_by_hand=False, pg_target=audit, mariadb_target=audit)
    rep.start(consumers=[])
    create_tables(rep, (ACCOUNTS_MYSQL, None))
    s = rep.schema
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (1, 'one'), (2, 'two')")
    rep.src(f"ALTER TABLE {s}.accounts ADD COLUMN extra INT NULL")
    rep.src(f"INSERT INTO {s}.accounts (id, name, extra) VALUES (3, 'three', 3)")
    last = _tail_seqno_of_text(rep, "'three'")
    # The pg group alone, killed right before its first block writes its position: that
    # block made the schema, the table and the added column.
    crashed = _consumers(rep, "--consumer", "pg", crash="apply-before-position:1")
    assert crashed.wait(120) == EXIT_STATUS, _log(rep)[-3000:]
    assert "crash point apply-before-position reached" in _log(rep)
    assert rep.pgsql("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                     params=(s,)) == [(0,)]
    assert rep.pgsql("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                     params=(rep.cfg.tracking_schema,)) == [(1,)]
    proc = _consumers(rep)
    try:
        rep.wait_applied(last)
        rep.wait_source_applied()
    finally:
        _stop(rep, proc)
    assert compare(rep, "accounts", [*ACCOUNTS_NAMES, "extra"], "id") == 3
    assert [c[0] for c in _pg_columns(rep, "accounts")] == [*ACCOUNTS_NAMES, "extra"]
    counts = rep.pgsql(f'SELECT seqno, count(*) FROM "{rep.cfg.tracking_schema}".'
                       "trep_apply_audit GROUP BY seqno HAVING count(*) <> 1")
    assert counts == []
