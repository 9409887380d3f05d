"""Kafka client wiring: hidden secrets, refusals told apart from outages, one-line errors."""

from __future__ import annotations

import socket
import time
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from thl_topics import client
from thl_topics.client import (
    LIBRDKAFKA_LOG,
    BrokerWatch,
    ClientSettings,
    access_error,
    check_access,
    client_settings,
    is_access_error,
    quick_first_answer,
    watched,
)
from thl_topics.errors import KafkaAccessError, KafkaSettingsError, ThlUnavailable

SECURE = {"bootstrap.servers": "k1:9094,k2:9094", "security.protocol": "SASL_SSL",
          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "trep",
          "sasl.password": "hunter2-secret", "ssl.key.password": "key-secret",
          "sasl.oauthbearer.client.secret": "oauth-secret"}

SASL_FAILED = KafkaError(
    KafkaError._AUTHENTICATION,
    "sasl_ssl://k2:9094/2: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after "
    "310ms in state AUTH_REQ)")
UNTRUSTED = KafkaError(
    KafkaError._SSL,
    "sasl_ssl://k1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified")


def test_settings_hide_every_secret_in_repr() -> None:
    settings = ClientSettings(SECURE)
    for shown in (repr(settings), str(settings), f"{settings}", repr([settings])):
        for secret in ("hunter2-secret", "key-secret", "oauth-secret"):
            assert secret not in shown
        assert "'sasl.username': 'trep'" in shown
    assert settings["sasl.password"] == "hunter2-secret"
    assert settings.bootstrap == "k1:9094,k2:9094"


def test_client_settings_copy_and_accept_bare_bootstrap_servers() -> None:
    assert dict(client_settings("k1:9092")) == {"bootstrap.servers": "k1:9092"}
    source = dict(SECURE)
    copied = client_settings(source)
    copied["group.id"] = "g"
    assert "group.id" not in source


@pytest.mark.parametrize(("err", "refused"), [
    (SASL_FAILED, True),
    (UNTRUSTED, True),
    (KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), True),
    (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), True),
    (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), True),
    (KafkaError(KafkaError.UNSUPPORTED_SASL_MECHANISM), True),
    # A broker that goes away mid-handshake is an SSL error too, and it passes.
    (KafkaError(KafkaError._SSL, "k1:9094/1: SSL handshake failed: Disconnected: SSL "
                                 "connection closed by peer"), False),
    (KafkaError(KafkaError._TRANSPORT), False),
    (KafkaError(KafkaError._ALL_BROKERS_DOWN), False),
    (KafkaError(KafkaError._TIMED_OUT), False),
])
def test_refusals_are_told_apart_from_outages(err: KafkaError, refused: bool) -> None:
    assert is_access_error(err) is refused


def test_a_wrong_password_is_one_line_naming_the_broker_and_user() -> None:
    message = str(access_error(ClientSettings(SECURE), SASL_FAILED))
    assert message == (
        "Kafka broker k2:9094 (SASL_SSL) refused authentication as user 'trep' "
        "(SCRAM-SHA-512): SASL authentication error: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after "
        "310ms in state AUTH_REQ); check kafka.sasl.username and the password "
        "(kafka.sasl.password, kafka.sasl.password_file or TREP_KAFKA__SASL__PASSWORD)")
    assert access_error(SECURE, SASL_FAILED).broker == "k2:9094"


def test_an_untrusted_certificate_points_at_the_ca_setting() -> None:
    error = access_error(SECURE, UNTRUSTED)
    assert str(error).startswith("Kafka broker k1:9094 (SASL_SSL) TLS failed: SSL handshake "
                                 "failed: error:0A000086")
    assert str(error).endswith("check kafka.tls.ca_location: it must hold the CA that signed "
                               "the broker's certificate")


def test_an_error_without_a_broker_names_the_bootstrap_servers() -> None:
    error = access_error({"bootstrap.servers": "k1:9092"},
                         KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied\nby ACL"))
    assert str(error).startswith("Kafka broker k1:9092 (PLAINTEXT) denied access: denied by "
                                 "ACL; grant this user")
    assert "\n" not in str(error)


def test_the_watch_keeps_the_first_refusal_and_ignores_outages() -> None:
    watch = BrokerWatch(SECURE)
    watch(KafkaError(KafkaError._TRANSPORT))
    watch.check()  # an outage is not a refusal
    watch(SASL_FAILED)
    watch(UNTRUSTED)
    with pytest.raises(KafkaAccessError, match=r"k2:9094 .* refused authentication"):
        watch.check()
    assert watch.last is UNTRUSTED


def test_watched_settings_carry_the_watch_and_the_logger() -> None:
    source = dict(SECURE)
    settings, watch = watched(source)
    assert settings["error_cb"] is watch
    assert settings["logger"] is LIBRDKAFKA_LOG
    assert "error_cb" not in source
    assert "hunter2" not in repr(settings)


def test_a_quick_first_answer_keeps_a_configured_backoff() -> None:
    assert quick_first_answer(client_settings("k1:9092"))["reconnect.backoff.ms"] == 20
    configured = client_settings({"bootstrap.servers": "k1:9092", "reconnect.backoff.ms": 500})
    assert quick_first_answer(configured)["reconnect.backoff.ms"] == 500


def test_unknown_properties_fail_at_once_naming_the_section() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaSettingsError, match=r'No such configuration property: '
                                                 r'"socket\.keepalive"; check kafka\.properties'):
        check_access({"bootstrap.servers": "127.0.0.1:1", "socket.keepalive": "true"})
    assert time.monotonic() - started < 1


def test_a_broker_that_does_not_answer_is_unavailable_naming_it() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ThlUnavailable) as info:
        check_access({"bootstrap.servers": f"127.0.0.1:{port}",
                      "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                      "sasl.username": "u", "sasl.password": "pw-secret"}, timeout=1.0)
    assert time.monotonic() - started < 3
    message = str(info.value)
    assert message.startswith(f"Kafka at 127.0.0.1:{port} (SASL_SSL) does not answer within "
                              "1 s: ")
    assert "pw-secret" not in message and "\n" not in message


class _BrokersOnlyAdmin:
    """A stand-in admin client: answers describe_cluster, refuses a full metadata request."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def describe_cluster(self, request_timeout: float) -> Future[object]:
        self.asked.append(request_timeout)
        answer: Future[object] = Future()
        answer.set_result(SimpleNamespace(nodes=[object(), object()]))
        return answer

    def list_topics(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the access check asked for the metadata of every topic")

    def poll(self, timeout: float) -> int:
        return 0


def test_the_access_check_asks_for_the_brokers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """librdkafka sends describe_cluster as a brokers-only metadata request; list_topics()
    would ask for every topic of the cluster at every session start."""
    admin = _BrokersOnlyAdmin()

    def stand_in(kafka: object) -> tuple[_BrokersOnlyAdmin, BrokerWatch]:
        _settings, watch = watched(kafka)  # type: ignore[arg-type]
        return admin, watch

    monkeypatch.setattr(client, "new_admin", stand_in)
    assert check_access({"bootstrap.servers": "127.0.0.1:9092"}, timeout=5) == 2
    assert len(admin.asked) == 1 and 0.05 <= admin.asked[0] <= 0.5
