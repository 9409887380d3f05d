"""thl list (-seqno, -last, --json), thl info and thl index on a real THL."""

from __future__ import annotations

import json

from click.testing import CliRunner

from stack.service import Service
from trep.thl import cli

from .conftest import ServiceUnderTest


def test_thl_list_info_index(running: ServiceUnderTest) -> None:
    s = running.schema
    running.sql(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, b VARBINARY(4))")
    for i in range(5):
        running.sql(f"INSERT INTO {s}.t VALUES ({i}, 0x00ff)")
    running.wait_for_tail(5)
    runner = CliRunner()
    conf = ["-c", str(running.config_path)]

    one = runner.invoke(cli, [*conf, "list", "-seqno", "3"])
    assert one.exit_code == 0, one.output
    assert one.output.startswith("SEQ# = 3 / FRAG# = 0 (last frag)\n")
    assert "SEQ# = 2 " not in one.output and "SEQ# = 4 " not in one.output
    assert "  - COL(1: id) = 2\n  - COL(2: b) = 0x00ff" in one.output
    assert f"- METADATA = [mysql_server_id=1;dbms_type=mysql;service={running.name};" \
           f"shard={s};gtid=" in one.output

    last = runner.invoke(cli, [*conf, "list", "-last", "2", "--json"])
    events = [json.loads(line) for line in last.output.splitlines()]
    assert [e["seqno"] for e in events] == [4, 5]
    assert events[1]["data"][0]["column_values"] == [[4, {"base64": "AP8="}]]

    info = runner.invoke(cli, [*conf, "info"])
    assert info.exit_code == 0, info.output
    assert "min seqno = 0 (first seqno kept)\nmax seqno = 5\n" in info.output
    assert "cleanup.policy = compact,delete" in info.output
    assert "retention.ms = -1" in info.output
    assert "epochs = 0 (6 events)" in info.output

    index = runner.invoke(cli, [*conf, "index", "-samples", "3"])
    rows = [line.split() for line in index.output.splitlines()[1:]]
    assert rows and all(int(seqno) <= 5 for _, seqno in rows)
    assert [int(seqno) for _, seqno in rows] == sorted(int(seqno) for _, seqno in rows)


def test_thl_on_a_missing_topic_says_so(kafka: Service) -> None:
    result = CliRunner().invoke(cli, ["-service", "nosuchservice", "-bootstrap",
                                      f"127.0.0.1:{kafka.port}", "list", "-last", "1"])
    assert result.exit_code != 0
    assert "THL topic thl.nosuchservice does not exist" in str(result.exception) + result.output
