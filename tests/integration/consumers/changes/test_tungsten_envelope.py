"""Tungsten's Kafka message (seeds/001, "Applying to Kafka") as plain JSON without Connect's
schema block, and as Avro through the registry: the record, its metadata fields, deletes and
tombstones, a keyless update as a DELETE and an INSERT, and the topics fold back into the
source's rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

from consumers.changes.readback import ChangeReader, materialize, messages

from .conftest import ChangeService


def _plain(svc: ChangeService, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every committed record of a one-partition topic, in order."""
    return [(msg.key(), msg.value())
            for msg in messages({"bootstrap.servers": svc.bootstrap}, [topic])]


def test_tungsten_messages_in_json_and_avro(make_service: Callable[..., ChangeService]) -> None:
    svc = make_service({
        "tjson": {"envelope": "tungsten", "format": "json", "json_schemas": False,
                  "topic": "{service}.tj.{schema}.{table}"},
        "tavro": {"envelope": "tungsten", "format": "avro",
                  "topic": "{service}.ta.{schema}.{table}"},
    })
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.msg (id INT PRIMARY KEY, msg VARCHAR(40), n DECIMAL(8,3))",
            f"CREATE TABLE {s}.loose (a INT, b VARCHAR(10))")
    svc.start()
    svc.src(f"INSERT INTO {s}.msg VALUES (2384751, 'Hello World', 1.5), (2, 'ü😀', NULL)")
    svc.src(f"UPDATE {s}.msg SET msg = 'Goodbye' WHERE id = 2384751")
    svc.src(f"DELETE FROM {s}.msg WHERE id = 2")
    svc.src(f"INSERT INTO {s}.loose VALUES (1, 'x'), (1, 'x'), (2, NULL)")
    svc.src(f"UPDATE {s}.loose SET b = 'y' WHERE a = 1 LIMIT 1")
    last = svc.wait_source_applied()

    records = _plain(svc, svc.topic("msg", "tjson"))
    keys = [json.loads(k) for k, _ in records if k is not None]
    values = [json.loads(v, parse_float=Decimal) if v else None for _, v in records]
    assert keys[0] == {"id": 2384751}
    first = values[0]
    assert first is not None
    assert set(first) == {"record", "_optype", "_seqno", "_committime", "_source_schema",
                          "_source_table"}
    assert first["record"] == {"id": 2384751, "msg": "Hello World", "n": Decimal("1.500")}
    assert (first["_optype"], first["_source_schema"], first["_source_table"]) == (
        "INSERT", s, "msg")
    assert first["_committime"][:2] == "20" and first["_seqno"] < last
    ops = [v["_optype"] if v else None for v in values]
    assert ops == ["INSERT", "INSERT", "UPDATE", "DELETE", None]  # a tombstone closes
    assert values[2]["record"]["msg"] == "Goodbye"  # type: ignore[index]
    assert values[3]["record"] == {"id": 2, "msg": "ü😀", "n": None}  # type: ignore[index]

    loose = [json.loads(v) for _, v in _plain(svc, svc.topic("loose", "tjson")) if v]
    assert [v["_optype"] for v in loose] == ["INSERT"] * 3 + ["DELETE", "INSERT"]
    assert loose[3]["record"] == {"a": 1, "b": "x"} and loose[4]["record"] == {"a": 1, "b": "y"}

    reader = ChangeReader(svc.bootstrap, svc.registry_url)
    for group in ("tjson", "tavro"):
        rows = materialize(reader.records([svc.topic("msg", group)]), True)
        assert rows == [{"id": 2384751, "msg": "Goodbye", "n": Decimal("1.500")}], group
        rows = materialize(reader.records([svc.topic("loose", group)]), False)
        assert sorted(rows, key=repr) == sorted(
            [{"a": 1, "b": "y"}, {"a": 1, "b": "x"}, {"a": 2, "b": None}], key=repr), group


def test_provisioned_rows_are_snapshot_reads(make_service: Callable[..., ChangeService]
                                            ) -> None:
    svc = make_service({"g": {"envelope": "debezium", "format": "avro", "partitions": 2}})
    s = svc.schema
    # Rows that exist before the extractor starts: only provisioning brings them.
    svc.src(f"CREATE TABLE {s}.old (id INT PRIMARY KEY, v VARCHAR(10))")
    svc.src(f"INSERT INTO {s}.old VALUES (%s, %s)", params=[(i, f"v{i}") for i in range(500)],
            many=True)
    svc.start()
    svc.src(f"UPDATE {s}.old SET v = 'live' WHERE id = 7")  # streamed, not provisioned
    done = svc.trepctl("provision", "-table", f"{s}.old", "-limit", "200")
    assert done.returncode == 0, done.stdout + done.stderr
    svc.wait_source_applied()
    reader = ChangeReader(svc.bootstrap, svc.registry_url)
    changes = list(reader.records([svc.topic("old")]))
    reads = [c for c in changes if c.op == "r"]
    assert len(reads) == 500
    assert sorted(materialize(changes, True), key=lambda r: r["id"]) == [
        {"id": i, "v": "live" if i == 7 else f"v{i}"} for i in range(500)]


def test_reprovisioning_a_keyless_table_truncates_its_topic_first(
        make_service: Callable[..., ChangeService]) -> None:
    svc = make_service({"t": {"envelope": "tungsten", "format": "json",
                              "keyless_partitions": 2},
                        "d": {"envelope": "debezium", "format": "avro",
                              "topic": "{service}.d.{schema}.{table}"}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.nokey (a INT, b VARCHAR(10))")
    svc.src(f"INSERT INTO {s}.nokey VALUES (%s, %s)", params=[(i % 3, "x") for i in range(9)],
            many=True)
    svc.start()
    svc.src(f"DELETE FROM {s}.nokey WHERE a = 0")  # streamed: 3 rows go
    first = svc.trepctl("provision", "-table", f"{s}.nokey")
    assert first.returncode == 0, first.stdout + first.stderr
    svc.src(f"INSERT INTO {s}.nokey VALUES (7, 'y')")
    again = svc.trepctl("provision", "-table", f"{s}.nokey")  # the same rows, read again
    assert again.returncode == 0, again.stdout + again.stderr
    svc.wait_source_applied()
    expected = sorted([{"a": i % 3, "b": "x"} for i in range(9) if i % 3] + [{"a": 7, "b": "y"}],
                      key=repr)
    reader = ChangeReader(svc.bootstrap, svc.registry_url)
    for group in ("t", "d"):
        changes = list(reader.records([svc.topic("nokey", group)]))
        truncates = [c for c in changes if c.op == "t"]
        # One per provisioning, in every partition (two for t, one for d).
        assert len(truncates) == (4 if group == "t" else 2), group
        assert all(c.before is None and c.after is None for c in truncates)
        assert sorted(materialize(changes, False), key=repr) == expected, group
    check = svc.trepctl("check", f"{s}.nokey", "-timeout", "120")
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("equal") == 2, check.stdout
