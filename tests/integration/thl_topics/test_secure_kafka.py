"""The THL over the broker's SASL_SSL listener (SCRAM-SHA-512): the producer, the reader and the
admin client built from ``KafkaConfig.client()``, and every refusal a one-line, terminal error
naming the broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicator.config import KafkaConfig
from stack import tls
from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.client import check_access, new_admin
from thl_topics.errors import KafkaAccessError
from thl_topics.event import Statement, ThlEvent
from thl_topics.producer import ThlProducer
from thl_topics.reader import ThlReader

from ..conftest import SecureKafka


def _event(seqno: int) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="t", event_id=f"f:{seqno:016d};0",
                    shard_id="s", tstamp=0, fragno=0, last_frag=True,
                    data=[Statement(f"-- {seqno}")])


def _config(secure: SecureKafka, **over: object) -> KafkaConfig:
    return KafkaConfig.model_validate(secure.settings(**over))


def _one_line_naming(exc: BaseException, secure: SecureKafka, *parts: str) -> str:
    message = str(exc)
    assert "\n" not in message
    assert message.startswith(f"Kafka broker {secure.bootstrap} (SASL_SSL) "), message
    for part in parts:
        assert part in message, message
    assert secure.password not in message
    return message


@pytest.fixture
def topic(kafka_sasl: SecureKafka) -> Iterator[str]:
    name = f"thl.sec{uuid.uuid4().hex[:8]}"
    admin, _ = new_admin(_config(kafka_sasl).client())
    ensure_thl_topic(admin, ThlTopicSpec(name))
    yield name
    admin.delete_topics([name])[name].result(30)


def test_thl_round_trip_with_scram_and_a_client_certificate(
        kafka_sasl: SecureKafka, topic: str, tmp_path: Path) -> None:
    # Mutual TLS on top of SCRAM: a client certificate from the broker's CA, its key
    # encrypted, the key's password and the SASL password both read from files.
    ca = tls.load_authority(kafka_sasl.ca_file, kafka_sasl.ca_key_file)
    me = ca.issue(kafka_sasl.username, client=True)
    cert = tls.write_public(tmp_path / "client.pem", me.cert_pem())
    key = tls.write_private(tmp_path / "client-key.pem", me.key_pem("key-pass-1"))
    (tmp_path / "key-pass").write_text("key-pass-1\n")
    (tmp_path / "sasl-pass").write_text(kafka_sasl.password + "\n")
    cfg = _config(kafka_sasl,
                  sasl={"username": kafka_sasl.username,
                        "password_file": str(tmp_path / "sasl-pass")},
                  tls={"ca_location": str(kafka_sasl.ca_file),
                       "certificate_location": str(cert), "key_location": str(key),
                       "key_password_file": str(tmp_path / "key-pass")},
                  properties={"client.id": "trep-secure-test"})
    producer = ThlProducer(cfg.client(), topic, f"t-{topic}")
    for seqno in range(5):
        producer.publish(_event(seqno))
    producer.commit()
    producer.close()
    with ThlReader(cfg.client(), topic) as reader:
        events = [rec.event for rec in reader.records(0)]
        assert reader.offset_of(3) == 3
    assert events == [_event(s) for s in range(5)]


def test_a_wrong_password_is_terminal_and_names_the_broker(kafka_sasl: SecureKafka,
                                                           topic: str) -> None:
    wrong = _config(kafka_sasl, sasl={"username": kafka_sasl.username,
                                      "password": "not-" + kafka_sasl.password})
    started = time.monotonic()
    with pytest.raises(KafkaAccessError) as info:
        check_access(wrong.client(), timeout=15)
    assert time.monotonic() - started < 5, "a refused login must not wait for a timeout"
    _one_line_naming(info.value, kafka_sasl,
                     f"refused authentication as user {kafka_sasl.username!r} (SCRAM-SHA-512)",
                     "invalid credentials", "check kafka.sasl.username and the password")
    assert "not-" + kafka_sasl.password not in str(info.value)
    # Clients used without the first check say the same once their requests fail.
    with ThlReader(wrong.client(), topic, poll_timeout=2) as reader, \
            pytest.raises(KafkaAccessError) as read:
        reader.watermarks()
    _one_line_naming(read.value, kafka_sasl, "refused authentication")
    with pytest.raises(KafkaAccessError) as produce:
        ThlProducer(wrong.client(), topic, f"t-{topic}", timeout=2)
    _one_line_naming(produce.value, kafka_sasl, "refused authentication")


def test_an_untrusted_broker_certificate_is_terminal(kafka_sasl: SecureKafka,
                                                     tmp_path: Path) -> None:
    # A CA made here never signed the broker's certificate: TLS must refuse the broker.
    other = tls.write_public(tmp_path / "other-ca.pem",
                             tls.new_authority("some other CA").cert_pem())
    cfg = _config(kafka_sasl, tls={"ca_location": str(other)})
    with pytest.raises(KafkaAccessError) as info:
        check_access(cfg.client(), timeout=15)
    _one_line_naming(info.value, kafka_sasl, "TLS failed", "certificate verify failed",
                     "check kafka.tls.ca_location")
