"""Bad input for change topics: a table name no topic can carry (strict names), a schema the
registry refuses, a registry that is down. Each stops (or retries) with an error naming the
table and the seqno, and nothing of the failing transaction is published: a transaction that also
changed a good table leaves no record of it either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from consumers.changes.readback import messages
from consumers.changes.records import SEQNO_HEADER
from stack.settings import REPO_ROOT

from .conftest import ChangeService


def _seqnos(svc: ChangeService, table: str) -> list[int]:
    """Seqnos of the committed change records (headers only: no registry needed)."""
    return [int(dict(msg.headers() or [])[SEQNO_HEADER] or b"-1")
            for msg in messages({"bootstrap.servers": svc.bootstrap}, [svc.topic(table)])
            if msg.value() is not None]


def test_a_table_name_that_is_no_topic_name_stops_a_strict_group_at_its_seqno(
        make_service: Callable[..., ChangeService]) -> None:
    """With ``names: strict`` (the default maps the name: the conformance suite)."""
    svc = make_service({"g": {"format": "json", "names": "strict"}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.good (id INT PRIMARY KEY)",
            f"CREATE TABLE {s}.`bad name` (id INT PRIMARY KEY)")
    svc.start()
    svc.src(f"INSERT INTO {s}.good VALUES (1)")
    before = svc.wait_source_applied()
    svc.src(f"INSERT INTO {s}.good VALUES (2)", f"INSERT INTO {s}.`bad name` VALUES (1)")
    status = svc.wait_state("g", "OFFLINE:ERROR")
    message = status["pendingExceptionMessage"]
    assert status["pendingErrorSeqno"] == before + 1, status
    assert f"table {s}.bad name: a Kafka topic name cannot contain ' '" in message, message
    assert f"(seqno {before + 1}," in message and "topics:" in message, message
    assert status["appliedLastSeqno"] == before
    # Nothing of that transaction is visible: not even the good table's row.
    assert len(_seqnos(svc, "good")) == 1 and before + 1 not in _seqnos(svc, "good")


def test_a_schema_the_registry_refuses_stops_at_its_seqno_and_a_new_column_evolves(
        make_service: Callable[..., ChangeService]) -> None:
    svc = make_service({"g": {"format": "avro"}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.good (id INT PRIMARY KEY)",
            f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v INT)")
    svc.start()
    svc.src(f"INSERT INTO {s}.t VALUES (1, 10)")
    svc.wait_source_applied()
    # A new column: a new, backward-compatible version of the value schema.
    svc.src(f"ALTER TABLE {s}.t ADD COLUMN note VARCHAR(20) NULL")
    svc.src(f"INSERT INTO {s}.t VALUES (2, 20, 'ü')")
    before = svc.wait_source_applied()
    registry = SchemaRegistryClient({"url": svc.registry_url})
    subject = f"{svc.topic('t')}-value"
    assert len(registry.get_versions(subject)) == 2
    assert registry.get_compatibility(subject) == "BACKWARD"
    latest = json.loads(registry.get_latest_version(subject).schema.schema_str or "{}")
    value = next(f for f in latest["fields"] if f["name"] == "before")["type"][1]
    assert [f["name"] for f in value["fields"]] == ["id", "v", "note"]
    # An incompatible change: INT -> VARCHAR. The registry refuses the schema (409).
    svc.src(f"ALTER TABLE {s}.t MODIFY v VARCHAR(10)")
    svc.src(f"INSERT INTO {s}.good VALUES (1)", f"INSERT INTO {s}.t VALUES (3, 'x', NULL)")
    status = svc.wait_state("g", "OFFLINE:ERROR")
    message = status["pendingExceptionMessage"]
    bad = status["pendingErrorSeqno"]
    assert bad > before and status["appliedLastSeqno"] == bad - 1, status
    assert f"table {s}.t, seqno {bad}" in message and "incompatible" in message, message
    assert status["pendingErrorCode"] == "DATA"
    assert bad not in _seqnos(svc, "good") and bad not in _seqnos(svc, "t")
    assert len(_seqnos(svc, "t")) == 2


@pytest.mark.exclusive("apicurio")  # stops the registry
def test_a_registry_that_is_down_is_retried_and_nothing_is_published_half(
        make_service: Callable[..., ChangeService]) -> None:
    svc = make_service({"g": {"format": "avro"}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.good (id INT PRIMARY KEY)",
            f"CREATE TABLE {s}.fresh (id INT PRIMARY KEY, v VARCHAR(10))")
    svc.start()
    svc.src(f"INSERT INTO {s}.good VALUES (1)")
    svc.wait_source_applied()
    svc.registry.stop()
    try:
        # The good table's schema is known; the fresh one's must be registered: retried.
        svc.src(f"INSERT INTO {s}.good VALUES (2)", f"INSERT INTO {s}.fresh VALUES (1, 'a')")
        seqno = svc.thl_marker() - 1
        deadline = time.monotonic() + 60
        while "schema registry" not in (status := svc.status("g")).get(
                "pendingExceptionMessage", ""):
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert status["state"] == "GOING-ONLINE:SYNCHRONIZING", status
        message = status["pendingExceptionMessage"]
        assert f"table {s}.fresh, seqno {seqno}" in message, message
        assert status["appliedLastSeqno"] == seqno - 1
        assert seqno not in _seqnos(svc, "good")
    finally:
        svc.registry.start()
    svc.wait_source_applied(timeout=180)
    assert _seqnos(svc, "good").count(seqno) == 1 and _seqnos(svc, "fresh") == [seqno]


def test_a_check_meeting_a_transaction_left_open_in_the_topic_is_retried(
        make_service: Callable[..., ChangeService]) -> None:
    """Another producer's transaction open in a change topic hides what follows it from a
    read_committed reader: the group's consistency check waits for it, says so while it
    retries, and compares once the transaction is decided (never "different" meanwhile)."""
    svc = make_service({"g": {"format": "json", "transaction_timeout_s": 6}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.t (id INT PRIMARY KEY, v VARCHAR(10))")
    svc.start()
    svc.src(f"INSERT INTO {s}.t VALUES (1, 'a'), (2, 'b')")
    svc.wait_source_applied()
    stray = Producer({"bootstrap.servers": svc.bootstrap, "transactional.id": f"{s}-stray"})
    stray.init_transactions(30)
    stray.begin_transaction()
    stray.produce(svc.topic("t"), key=b"stray", value=None, partition=0)
    stray.flush(30)
    check = subprocess.Popen([sys.executable, "-m", "trep.trepctl", "-c", str(svc.config_path),
                              "check", f"{s}.t", "-timeout", "120"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT,
                             env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    try:
        deadline = time.monotonic() + 60
        while "transaction is still open" not in (status := svc.status("g")).get(
                "pendingExceptionMessage", ""):
            assert time.monotonic() < deadline, status
            assert check.poll() is None, check.communicate()[0]
            time.sleep(0.2)
        assert f"{svc.topic('t')} partition 0" in status["pendingExceptionMessage"], status
    finally:
        stray.abort_transaction(30)
    out = check.communicate(timeout=120)[0]
    assert check.returncode == 0, out
    assert f"{s}.t" in out and "equal (2 rows" in out, out
    assert svc.status("g")["state"] == "ONLINE"
