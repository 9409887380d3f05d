"""Purged binlogs and undecodable THL records give clear, actionable errors."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from pymysqlreplication import BinLogStreamReader

from extractor.errors import BinlogPurgedError
from stack.services.mariadb import MariaDB
from thl_topics.event import RowChange
from thl_topics.records import record_key
from trep.thl import cli

from .conftest import ServiceUnderTest, wait_leading


@pytest.mark.exclusive("mariadb_scratch")  # purges the binary logs of its source
def test_resume_position_purged_from_the_binlog(
        make_service: Callable[..., ServiceUnderTest], mariadb_scratch: MariaDB) -> None:
    svc = make_service(source=mariadb_scratch)
    ex, thread = svc.start_thread()
    wait_leading(svc, ex, thread)
    svc.sql(f"CREATE TABLE {svc.schema}.t (id INT PRIMARY KEY)")
    (event,) = svc.wait_for_seqno(0)
    ex.stop()
    thread.join(30)
    resume_file = event.event_id.split(":")[0]
    rows = svc.sql("FLUSH BINARY LOGS", "SHOW MASTER STATUS")
    # MariaDB silently keeps a file that a binlog dump thread still reads, and the stopped
    # extractor's dump thread may linger for a moment: purge until the file is gone.
    deadline = time.monotonic() + 60
    while resume_file in [r[0] for r in svc.sql("SHOW BINARY LOGS")]:
        assert time.monotonic() < deadline, f"{resume_file} could not be purged"
        svc.sql(f"PURGE BINARY LOGS TO '{rows[0][0]}'")
        time.sleep(0.5)

    ex2, thread2 = svc.start_thread()
    thread2.join(60)
    if thread2.is_alive():
        ex2.stop()
        thread2.join(30)
        pytest.fail("the extractor resumed from a purged binlog instead of stopping")
    (error,) = thread2.errors  # type: ignore[attr-defined]
    assert isinstance(error, BinlogPurgedError), error
    message = str(error)
    assert resume_file in message
    offset = int(event.event_id.split(":")[1].split(";")[0])
    assert f"position {offset}" in message
    assert "purged" in message


def test_thl_list_reports_an_undecodable_record_and_goes_on(
        running: ServiceUnderTest) -> None:
    running.sql(f"CREATE TABLE {running.schema}.t (id INT PRIMARY KEY)")
    running.wait_for_seqno(0)
    # A foreign writer puts garbage where seqno 1 would be, bypassing the extractor.
    producer = Producer(running.cfg.kafka.client())
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


def test_a_client_announcing_the_extractors_server_id_is_named_and_nothing_is_lost(
        running: ServiceUnderTest, caplog: pytest.LogCaptureFixture) -> None:
    """Another binlog client with the extractor's server_id (a misconfigured replica) makes
    the source drop the extractor's connection: the extractor says which id and what to
    change, starts again from the THL tail once the other client is gone, and every row
    committed before, during and after is in the THL once."""
    svc = running
    svc.sql(f"CREATE TABLE {svc.schema}.t (id INT PRIMARY KEY)",
            f"INSERT INTO {svc.schema}.t VALUES (1)")
    svc.wait_for_seqno(svc.wait_streaming())
    caplog.set_level(logging.WARNING, logger="extractor.service")
    file, pos = svc.sql("SHOW MASTER STATUS")[0][:2]
    intruder = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": svc.source.port, "user": "root",
                             "passwd": ""},
        server_id=svc.cfg.extractor.server_id, log_file=file, log_pos=int(pos),
        resume_stream=True, blocking=False, enable_logging=False)
    try:
        svc.sql(f"INSERT INTO {svc.schema}.t VALUES (2)")
        list(intruder)  # its binlog dump ends at the binlog's end: it disconnects by itself
    finally:
        intruder.close()
    svc.sql(f"INSERT INTO {svc.schema}.t VALUES (3)")
    deadline = time.monotonic() + 60
    while not any("give each its own (extractor.server_id)" in r.getMessage()
                  for r in caplog.records):
        assert time.monotonic() < deadline, "the extractor never said its connection was taken"
        time.sleep(0.1)
    warning = next(r.getMessage() for r in caplog.records if "server_id" in r.getMessage())
    assert f"server_id {svc.cfg.extractor.server_id}" in warning, warning
    svc.sql(f"INSERT INTO {svc.schema}.t VALUES (4)")
    seqno = svc.wait_streaming(svc.tail_seqno())
    ids = [row[0] for event in svc.wait_for_seqno(seqno) for item in event.data
           if isinstance(item, RowChange) and item.table == "t" for row in item.column_values]
    assert ids == [1, 2, 3, 4], ids
