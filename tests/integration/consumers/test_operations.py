"""Operator flows: poison transaction and skip, reset and replay, heartbeat lag, Kafka lag."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from thl_topics.reader import ThlReader

from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    ACCOUNTS_PG,
    NOPK_MYSQL,
    NOPK_NAMES,
    NOPK_PG,
    compare,
    create_tables,
)
from .workload import MixedWorkload


def _tail_seqno_of_text(rep: Replication, text: str) -> int:
    """Seqno of the THL event carrying ``text`` in a row (waits for it to be extracted)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with ThlReader(rep.cfg.kafka.client(), rep.cfg.thl_topic) as reader:
            for rec in reader.records(reader.watermarks()[0]):
                assert rec.event is not None
                if text in repr(rec.event.data):
                    return rec.seqno
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in the THL")


def test_poison_transaction_stops_at_its_seqno_and_skip_goes_past(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    s = rep.schema
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (1, 'fine')")
    # PostgreSQL text cannot hold U+0000: a value the target column cannot hold.
    rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES (2, 'nul \\0 inside')")
    for i in range(3, 30):
        rep.src(f"INSERT INTO {s}.accounts (id, name) VALUES ({i}, 'after')")
    poison = _tail_seqno_of_text(rep, "nul \\x00 inside")

    status = rep.wait_state("pg", "OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == poison
    assert status["appliedLastSeqno"] == poison - 1  # everything before it is applied
    assert f"seqno={poison}" in status["pendingError"]
    assert "0x00" in status["pendingExceptionMessage"] or "NUL" in \
        status["pendingExceptionMessage"].upper()
    assert rep.pgsql(f'SELECT max(id) FROM "{s}".accounts') == [(1,)]
    out = rep.trepctl("status", "-group", "pg")
    assert out.returncode == 0 and "OFFLINE:ERROR" in out.stdout, out

    bad = rep.trepctl("online", "-group", "pg", "--skip-seqno", "x")
    assert bad.returncode == 2 and "not a seqno" in bad.stderr
    ok = rep.trepctl("online", "-group", "pg", "--skip-seqno", str(poison))
    assert ok.returncode == 0, ok.stderr
    last = rep.wait_source_applied()
    status = rep.status("pg")
    assert status["state"] == "ONLINE" and poison in status["skippedSeqnos"]
    assert status["appliedLastSeqno"] == last
    ids = [r[0] for r in rep.pgsql(f'SELECT id FROM "{s}".accounts ORDER BY id')]
    assert ids == [1, *range(3, 30)]
    # MariaDB took the row and never stopped.
    assert rep.tgt(f"SELECT name FROM {s}.accounts WHERE id = 2") == [("nul \x00 inside",)]


def test_reset_and_replay_from_a_seqno_into_an_emptied_target(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    first = rep.thl_tail() + 1
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=11)
    work.run(500)
    rep.wait_source_applied()

    assert rep.trepctl("offline").returncode == 0
    rep.wait_state("mariadb", "OFFLINE:NORMAL")
    rep.wait_state("pg", "OFFLINE:NORMAL")
    assert _group_offset(rep, "mariadb") > 0 and _group_offset(rep, "pg") > 0
    refused = rep.trepctl("reset", input="n\n")
    assert refused.returncode != 0 and "Aborted" in refused.stderr
    done = rep.trepctl("reset", "-y")
    assert done.returncode == 0, done.stderr
    assert rep.tgt(f"SELECT COUNT(*) FROM {rep.cfg.tracking_schema}.trep_commit_seqno") \
        == [(0,)]
    # Lag tools no longer show the cleared position.
    assert _group_offset(rep, "mariadb") < 0 and _group_offset(rep, "pg") < 0
    # Empty both targets: MariaDB gets its tables back from the replayed DDL.
    rep.tgt(f"DROP TABLE {rep.schema}.accounts, {rep.schema}.nopk",
            f"DELETE FROM {rep.schema}.ready")
    rep.pgsql(f'TRUNCATE "{rep.schema}".accounts, "{rep.schema}".nopk, "{rep.schema}".ready')

    assert rep.trepctl("online", "--from-seqno", str(first)).returncode == 0
    rep.wait_source_applied()
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5


def test_heartbeat_lag_and_kafka_group_offsets_agree_with_status(
        replication: Replication) -> None:
    rep = replication
    rep.start()
    out = rep.trepctl("heartbeat", "-name", "hb-test")
    assert out.returncode == 0, out.stderr
    last = rep.wait_source_applied()
    hb = rep.tgt(f"SELECT name, source_tstamp, target_tstamp, lag_millis "
                 f"FROM {rep.cfg.tracking_schema}.heartbeat")
    assert len(hb) == 1 and hb[0][0] == "hb-test"
    assert hb[0][2] >= hb[0][1] and 0 <= hb[0][3] < 60_000
    pg_hb = rep.pgsql(f'SELECT name, lag_millis FROM "{rep.cfg.tracking_schema}".heartbeat')
    assert pg_hb[0][0] == "hb-test" and 0 <= pg_hb[0][1] < 60_000

    status = json.loads(rep.trepctl("status", "--json").stdout)
    for group in ("mariadb", "pg"):
        applied = status["consumers"][group]["appliedLastSeqno"]
        assert applied == last
        committed = _group_offset(rep, group)
        with ThlReader(rep.cfg.kafka.client(), rep.cfg.thl_topic) as reader:
            # The committed offset is just past the last record of the applied seqno.
            assert reader.offset_of(applied + 1) >= committed
            records = list(reader.records(reader.offset_of(applied), committed))
        assert records and records[-1].seqno == applied and records[-1].event is not None
        assert records[-1].event.last_frag
    assert status["extractor"]["state"] == "ONLINE"
    assert status["extractor"]["appliedLastSeqno"] >= last


def test_runner_serves_prometheus_metrics(replication: Replication) -> None:
    rep = replication
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rep.start(metrics_port=port)
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG))
    rep.src(*(f"INSERT INTO {rep.schema}.accounts (id, name) VALUES ({i}, 'm')"
              for i in range(1, 6)))
    last = rep.wait_source_applied()
    time.sleep(0.5)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for group in ("mariadb", "pg"):
        labels = f'group="{group}",service="{rep.name}"'
        assert f"trep_applied_last_seqno{{{labels}}} {float(last)}" in text, text
        assert f"trep_consumer_online{{{labels}}} 1.0" in text
        rows = re.search(rf"trep_applied_rows_total{{{labels}}} (\S+)", text)
        assert rows is not None and float(rows.group(1)) >= 6  # 5 accounts + markers
    assert f'trep_extracted_last_seqno{{service="{rep.name}"}} {float(last)}' in text
    assert f'trep_extractor_online{{service="{rep.name}"}} 1.0' in text
    assert f'trep_extractor_retries_total{{service="{rep.name}"}} 0.0' in text
    assert f'trep_extractor_leadership_losses_total{{service="{rep.name}"}} 0.0' in text


def _group_offset(rep: Replication, group: str) -> int:
    """The group's committed Kafka offset on the THL partition (negative: none)."""
    admin = AdminClient(rep.cfg.kafka.client())
    request = [ConsumerGroupTopicPartitions(rep.cfg.group_id(group),
                                            [TopicPartition(rep.cfg.thl_topic, 0)])]
    result = admin.list_consumer_group_offsets(request)[rep.cfg.group_id(group)].result(30)
    return int(result.topic_partitions[0].offset)
