"""A whole service through the broker's SASL_SSL listener (SCRAM-SHA-512, the stack's CA).

The extractor, the MariaDB and PostgreSQL groups, the operator commands and the test's own
THL reads all connect with the ``kafka`` section below; a wrong password stops the extractor
and the groups in OFFLINE:ERROR with one line naming the broker, and no secret shows anywhere.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from trep.config import load_config
from trep.thl import cli as thl_cli

from ..conftest import SecureKafka
from ..harness.processes import run_trep
from ..harness.status import component_status
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
    compare,
    create_tables,
)
from .workload import MixedWorkload


def _secure(rep: Replication, kafka: dict[str, Any]) -> None:
    """Point the service's configuration at the SASL_SSL listener."""
    data = yaml.safe_load(rep.config_path.read_text())
    data["kafka"] = kafka
    rep.config_path.write_text(yaml.safe_dump(data))
    rep.cfg = load_config(rep.config_path)
    assert rep.cfg.kafka.security_protocol == "SASL_SSL"


def _thl(rep: Replication, *args: str) -> subprocess.CompletedProcess[str]:
    return run_trep("trep.thl", rep.config_path, *args, timeout=60)


def _component_status(rep: Replication, component: str) -> dict[str, Any]:
    return component_status(rep.zk, rep.cfg, component)


def _group_offset(rep: Replication, group: str) -> int:
    admin = AdminClient(rep.cfg.kafka.client())
    request = [ConsumerGroupTopicPartitions(rep.cfg.group_id(group),
                                            [TopicPartition(rep.cfg.thl_topic, 0)])]
    result = admin.list_consumer_group_offsets(request)[rep.cfg.group_id(group)].result(30)
    return int(result.topic_partitions[0].offset)


def _until_error(rep: Replication, component: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = _component_status(rep, component)
        if status.get("state") == "OFFLINE:ERROR":
            return status
        assert time.monotonic() < deadline, f"{component} not OFFLINE:ERROR: {status}"
        time.sleep(0.2)


def test_service_replicates_exactly_through_sasl_ssl(
        make_replication: Callable[..., Replication], kafka_sasl: SecureKafka,
        tmp_path: Any) -> None:
    rep = make_replication()
    password_file = tmp_path / "kafka-password"
    password_file.write_text(kafka_sasl.password + "\n")
    _secure(rep, kafka_sasl.settings(sasl={"mechanism": "SCRAM-SHA-512",
                                           "username": kafka_sasl.username,
                                           "password_file": str(password_file)}))
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG),
                  (TYPES_MYSQL, TYPES_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=11, types=True)
    work.seed_types()
    work.run(400)
    last = rep.wait_source_applied(timeout=300)

    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
    assert compare(rep, "nopk", NOPK_NAMES, "a, b, c") > 5
    assert compare(rep, "types", TYPES_NAMES, "id") == 3
    for group in ("mariadb", "pg"):
        assert rep.status(group)["state"] == "ONLINE"
    # The groups' Kafka offsets were committed through the secure listener too, and an
    # admin client built from the same settings reads them back.
    for group in ("mariadb", "pg"):
        assert _group_offset(rep, group) > 0
    # The operator's THL view works with the same settings.
    listed = CliRunner().invoke(thl_cli, ["-c", str(rep.config_path), "list", "-seqno",
                                          str(last)])
    assert listed.exit_code == 0, listed.output
    assert listed.output.startswith(f"SEQ# = {last} / FRAG# = 0 (last frag)\n")


def test_a_wrong_password_is_one_line_naming_the_broker_everywhere(
        make_replication: Callable[..., Replication], kafka_sasl: SecureKafka,
        monkeypatch: pytest.MonkeyPatch) -> None:
    rep = make_replication()
    wrong = "wrong-" + secrets.token_urlsafe(12)
    # The password comes from the environment, as a deployment would inject it.
    monkeypatch.setenv("TREP_KAFKA__SASL__PASSWORD", wrong)
    _secure(rep, kafka_sasl.settings(sasl={"mechanism": "SCRAM-SHA-512",
                                           "username": kafka_sasl.username}))
    expected = (f"Kafka broker {kafka_sasl.bootstrap} (SASL_SSL) refused authentication as "
                f"user {kafka_sasl.username!r} (SCRAM-SHA-512): SASL authentication error: "
                "Authentication failed during authentication due to invalid credentials")
    proc = rep.spawn()
    try:
        extractor = _until_error(rep, "extractor")
        assert extractor["pendingExceptionMessage"].startswith(expected), extractor
        assert extractor["pendingErrorCode"] == "KafkaAccessError"
        for group in ("mariadb", "pg"):
            status = _until_error(rep, f"consumers/{group}")
            message = status["pendingExceptionMessage"]
            assert message.startswith(f"THL topic {rep.cfg.thl_topic}: {expected}"), status
            assert status["pendingErrorCode"] == "TERMINAL"
        shown = rep.trepctl("status")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count("refused authentication") == 3
        # Terminal: nobody retries a refused login (the status stays, the state too).
        time.sleep(2)
        assert _component_status(rep, "consumers/mariadb")["state"] == "OFFLINE:ERROR"
        info = _thl(rep, "info")
        assert info.returncode == 1
        assert info.stdout == ""
        assert info.stderr.startswith(f"error: {expected}")
        assert info.stderr.count("\n") == 1, info.stderr
    finally:
        proc.terminate()
        proc.wait(60)
    log = rep.log_path.read_text()
    assert expected in log
    for text in (shown.stdout, shown.stderr, info.stderr, log,
                 str(extractor), str(_component_status(rep, "consumers/pg"))):
        assert wrong not in text and kafka_sasl.password not in text


def test_an_unreachable_secure_broker_is_one_line_naming_it(
        make_replication: Callable[..., Replication], kafka_sasl: SecureKafka) -> None:
    rep = make_replication()
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _secure(rep, kafka_sasl.settings(bootstrap_servers=f"127.0.0.1:{port}"))
    started = time.monotonic()
    info = _thl(rep, "-timeout", "2", "info")
    assert time.monotonic() - started < 20
    assert info.returncode == 1
    assert info.stderr.startswith(f"error: Kafka at 127.0.0.1:{port} (SASL_SSL) does not "
                                  "answer within 2 s: ")
    assert "check that the brokers are up" in info.stderr
    assert info.stderr.count("\n") == 1, info.stderr
    assert kafka_sasl.password not in info.stderr
