"""Source tables with triggers: the row images carry what a trigger did, so a MariaDB target
gets no copy of the trigger (``triggers: skip``) and applies each row once."""

from __future__ import annotations

import logging
import urllib.request

import pytest

from .conftest import Replication


def test_a_trigger_writing_an_audit_row_is_applied_once(
        replication: Replication, caplog: pytest.LogCaptureFixture, unused_port: int) -> None:
    caplog.set_level(logging.INFO, "consumers.sql.applier")
    rep = replication
    rep.start(metrics_port=unused_port)
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.orders (id INT PRIMARY KEY, total INT) DEFAULT CHARSET=utf8mb4",
            f"CREATE TABLE {s}.audit (id INT AUTO_INCREMENT PRIMARY KEY, order_id INT, "
            "what VARCHAR(10)) DEFAULT CHARSET=utf8mb4",
            f"CREATE TRIGGER {s}.orders_ai AFTER INSERT ON {s}.orders FOR EACH ROW "
            f"INSERT INTO {s}.audit (order_id, what) VALUES (NEW.id, 'insert')",
            f"CREATE TRIGGER {s}.orders_bu BEFORE UPDATE ON {s}.orders FOR EACH ROW "
            "SET NEW.total = NEW.total + 1000")
    rep.wait_source_applied()
    # One made on the target by hand, harmless here: the group names it in a warning.
    rep.tgt(f"CREATE TRIGGER {s}.target_noop BEFORE INSERT ON {s}.orders FOR EACH ROW "
            "SET @seen = 1")
    rep.src(f"INSERT INTO {s}.orders VALUES (1, 10), (2, 20)",
            f"UPDATE {s}.orders SET total = 5 WHERE id = 2")
    rep.src(f"DROP TRIGGER {s}.orders_bu")
    rep.src(f"INSERT INTO {s}.orders VALUES (3, 30)",
            f"UPDATE {s}.orders SET total = 7 WHERE id = 1")
    rep.wait_source_applied()
    for table in ("orders", "audit"):
        rows = rep.src(f"SELECT * FROM {s}.{table} ORDER BY 1")
        assert rep.tgt(f"SELECT * FROM {s}.{table} ORDER BY 1") == rows, table
        assert rep.pgsql(f'SELECT * FROM "{s}".{table} ORDER BY 1') == rows, table
    assert rep.src(f"SELECT total FROM {s}.orders ORDER BY id") == [(7,), (1005,), (30,)]
    # No source trigger was made on the target: it would have fired on every applied row.
    assert rep.tgt("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE "
                   f"TRIGGER_SCHEMA = '{s}'") == [("target_noop",)]
    assert "trigger statement left out (triggers: skip)" in caplog.text
    assert f"table {s}.orders has trigger target_noop (BEFORE INSERT)" in caplog.text
    # ... and shows it in trepctl status and a metric, for as long as the process runs.
    assert rep.status("mariadb")["targetTriggers"] == \
        f"{s}.orders: target_noop (BEFORE INSERT)"
    assert rep.status("pg")["targetTriggers"] == "NONE"
    shown = rep.trepctl("status")
    assert f"targetTriggers           : {s}.orders: target_noop (BEFORE INSERT)" in shown.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{unused_port}/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    assert f'trep_target_triggers{{group="mariadb",service="{rep.name}"}} 1.0' in metrics, \
        [line for line in metrics.splitlines() if "triggers" in line]
