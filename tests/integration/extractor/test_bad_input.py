"""Purged binlogs and undecodable THL records give clear, actionable errors."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from extractor.errors import BinlogPurgedError
from extractor.service import Extractor
from replicator.cli.thl import cli
from thl_topics.records import record_key

from .conftest import ServiceUnderTest


def test_resume_position_purged_from_the_binlog(
        make_service: Callable[..., ServiceUnderTest]) -> None:
    svc = make_service()
    ex, thread = svc.start_thread()
    while not ex.streaming.is_set():
        thread.join(0.1)
    svc.sql(f"CREATE TABLE {svc.schema}.t (id INT PRIMARY KEY)")
    (event,) = svc.wait_for_seqno(0)
    ex.stop()
    thread.join(30)
    resume_file = event.event_id.split(":")[0]
    rows = svc.sql("FLUSH BINARY LOGS", "SHOW MASTER STATUS")
    svc.sql(f"PURGE BINARY LOGS TO '{rows[0][0]}'")

    with pytest.raises(BinlogPurgedError) as err:
        Extractor(svc.cfg).run()
    message = str(err.value)
    assert resume_file in message
    offset = int(event.event_id.split(":")[1].split(";")[0])
    assert f"position {offset}" in message
    assert "purged" in message


def test_thl_list_reports_an_undecodable_record_and_goes_on(
        running: ServiceUnderTest) -> None:
    running.sql(f"CREATE TABLE {running.schema}.t (id INT PRIMARY KEY)")
    running.wait_for_seqno(0)
    # A foreign writer puts garbage where seqno 1 would be, bypassing the extractor.
    producer = Producer({"bootstrap.servers": running.cfg.kafka.bootstrap_servers})
    producer.produce(running.cfg.thl_topic, key=record_key(1, 0), value=b"\xc3\x01garbage!",
                     partition=0, headers=[("epoch", b"0")])
    producer.flush(10)
    running.sql(f"INSERT INTO {running.schema}.t VALUES (1)")
    running.wait_for_tail(1)  # the extractor's own seqno 1 lands after the garbage

    result = CliRunner().invoke(cli, ["-c", str(running.config_path), "list", "-low", "0"])
    out = result.output
    assert result.exit_code == 1
    assert "SEQ# = 0 / FRAG# = 0 (last frag)" in out
    bad = re.search(r"SEQ# = 1 / FRAG# = 0\n- OFFSET = (\d+)\n- ERROR = (.*)", out)
    assert bad is not None, out
    assert f"THL record {running.cfg.thl_topic}[0] at offset {bad.group(1)}" in bad.group(2)
    assert "cannot decode" in bad.group(2)
    # ... and it went on to the next record, the extractor's real seqno 1
    assert out.index("- ACTION = INSERT") > bad.end()
    assert "1 record(s) could not be decoded" in out
