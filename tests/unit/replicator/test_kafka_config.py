"""Kafka security settings: what each client gets, contradictions refused, secrets never shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from consumers.runtime import FeedSettings
from trep.config import ConfigError, ServiceConfig, load_config

SECRET = "pa55-w0rd-!x"
KEY_SECRET = "k3y-pa55"


def _load(tmp_path: Path, kafka: dict[str, object]) -> ServiceConfig:
    path = tmp_path / "service.yml"
    path.write_text(yaml.safe_dump({"service": "alpha", "kafka": kafka}))
    return load_config(path)


def _refused(tmp_path: Path, kafka: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, kafka)
    message = str(info.value)
    assert "\n" not in message
    assert SECRET not in message and KEY_SECRET not in message
    return message


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, Path]:
    """Files that stand in for the CA, the certificate and the key (only their paths matter
    to the configuration; librdkafka reads them)."""
    files = {}
    for name in ("ca", "cert", "key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text("-----BEGIN-----\n")
    return files


def _secure(pem: dict[str, Path], **over: object) -> dict[str, object]:
    kafka: dict[str, object] = {
        "bootstrap_servers": "k1:9094,k2:9094", "security_protocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "trep", "password": SECRET},
        "tls": {"ca_location": str(pem["ca"]), "certificate_location": str(pem["cert"]),
                "key_location": str(pem["key"]), "key_password": KEY_SECRET},
    }
    kafka.update(over)
    return kafka


def test_plaintext_by_default(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"bootstrap_servers": "k1:9092"})
    assert dict(cfg.kafka.client(**{"group.id": "g"})) == {
        "bootstrap.servers": "k1:9092", "security.protocol": "PLAINTEXT", "group.id": "g"}


def test_every_security_setting_reaches_the_client(tmp_path: Path,
                                                   pem: dict[str, Path]) -> None:
    cfg = _load(tmp_path, _secure(pem, properties={"socket.keepalive.enable": True,
                                                   "socket.timeout.ms": 6000},
                                  secret_properties={"sasl.oauthbearer.client.secret": "x"}))
    assert dict(cfg.kafka.client()) == {
        "bootstrap.servers": "k1:9094,k2:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "trep",
        "sasl.password": SECRET,
        "ssl.ca.location": str(pem["ca"]),
        "ssl.certificate.location": str(pem["cert"]),
        "ssl.key.location": str(pem["key"]),
        "ssl.key.password": KEY_SECRET,
        "ssl.endpoint.identification.algorithm": "https",
        # YAML's bool and int arrive as the strings librdkafka expects.
        "socket.keepalive.enable": "true",
        "socket.timeout.ms": "6000",
        "sasl.oauthbearer.client.secret": "x",
    }


def test_names_are_case_insensitive_and_hostname_checks_can_be_turned_off(
        tmp_path: Path, pem: dict[str, Path]) -> None:
    cfg = _load(tmp_path, {"security_protocol": "sasl_ssl",
                           "sasl": {"mechanism": "scram-sha-256", "username": "u",
                                    "password": SECRET},
                           "tls": {"ca_location": str(pem["ca"]), "check_hostname": False}})
    settings = cfg.kafka.client()
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["sasl.mechanism"] == "SCRAM-SHA-256"
    assert settings["ssl.endpoint.identification.algorithm"] == "none"


def test_secrets_are_never_shown(tmp_path: Path, pem: dict[str, Path]) -> None:
    cfg = _load(tmp_path, _secure(pem, secret_properties={
        "sasl.oauthbearer.client.secret": "oauth-" + SECRET}))
    settings = cfg.kafka.client(**{"group.id": "g"})
    for shown in (repr(cfg), str(cfg), cfg.model_dump_json(), repr(cfg.model_dump()),
                  repr(settings), str(settings), f"{settings}", repr({"kafka": settings})):
        assert SECRET not in shown and KEY_SECRET not in shown
    assert "'sasl.username': 'trep'" in repr(settings)  # only the secrets are hidden
    assert settings["sasl.password"] == SECRET
    # The settings travel inside the consumer runtime's dataclasses; their repr hides too.
    feed = FeedSettings(cfg.kafka.client(), cfg.thl_topic, cfg.group_id("g"), cfg.service)
    assert SECRET not in repr(feed) and KEY_SECRET not in repr(feed)


def test_password_from_the_environment(tmp_path: Path, pem: dict[str, Path],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREP_KAFKA__SASL__PASSWORD", SECRET)
    kafka = _secure(pem)
    kafka["sasl"] = {"mechanism": "SCRAM-SHA-512", "username": "trep"}
    cfg = _load(tmp_path, kafka)
    assert cfg.kafka.client()["sasl.password"] == SECRET
    assert SECRET not in repr(cfg)


def test_passwords_from_files(tmp_path: Path, pem: dict[str, Path]) -> None:
    (tmp_path / "sasl.txt").write_text(SECRET + "\n")
    (tmp_path / "key.txt").write_text(KEY_SECRET)
    kafka = _secure(pem)
    kafka["sasl"] = {"username": "trep", "password_file": str(tmp_path / "sasl.txt")}
    kafka["tls"] = {"ca_location": str(pem["ca"]), "certificate_location": str(pem["cert"]),
                    "key_location": str(pem["key"]),
                    "key_password_file": str(tmp_path / "key.txt")}
    cfg = _load(tmp_path, kafka)
    settings = cfg.kafka.client()
    assert settings["sasl.password"] == SECRET  # the file's newline is not part of it
    assert settings["ssl.key.password"] == KEY_SECRET
    assert SECRET not in repr(cfg) and SECRET not in cfg.model_dump_json()


@pytest.mark.parametrize(("sasl", "expected"), [
    ({"username": "trep", "password_file": "missing.txt"},
     r"kafka\.sasl\.password_file: cannot read .*missing\.txt"),
    ({"username": "trep", "password_file": "empty.txt"},
     r"kafka\.sasl\.password_file: .*empty\.txt is empty"),
    ({"username": "trep", "password": SECRET, "password_file": "empty.txt"},
     r"set kafka\.sasl\.password or kafka\.sasl\.password_file, not both"),
    ({"username": "trep"}, r"SASL SCRAM-SHA-512 needs a password: kafka\.sasl\.password"),
    ({"password": SECRET}, r"SASL SCRAM-SHA-512 needs kafka\.sasl\.username"),
    ({"mechanism": "GSSAPI", "username": "trep"},
     r"SASL GSSAPI takes no username/password here; give its settings in kafka\.properties"),
    ({"mechanism": "SCRAM-SHA-1", "username": "trep", "password": SECRET},
     r"kafka\.sasl\.mechanism: Input should be 'PLAIN', 'SCRAM-SHA-256'"),
    ({"username": "trep", "pasword": SECRET}, r"kafka\.sasl\.pasword: Extra inputs"),
])
def test_bad_sasl_settings_name_the_field(tmp_path: Path, pem: dict[str, Path],
                                          monkeypatch: pytest.MonkeyPatch,
                                          sasl: dict[str, str], expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text("\n")
    message = _refused(tmp_path, _secure(pem, sasl=sasl))
    assert message.startswith(f"{tmp_path / 'service.yml'}: kafka")
    assert re.search(expected, message), message


@pytest.mark.parametrize(("kafka", "expected"), [
    ({"security_protocol": "PLAINTEXT",
      "sasl": {"username": "trep", "password": SECRET}},
     "kafka.sasl is set but kafka.security_protocol is PLAINTEXT; use SASL_SSL"),
    ({"security_protocol": "SSL", "sasl": {"username": "trep", "password": SECRET}},
     "kafka.sasl is set but kafka.security_protocol is SSL"),
    ({"security_protocol": "SASL_SSL"},
     "kafka.security_protocol SASL_SSL needs kafka.sasl (mechanism, username, password)"),
    ({"security_protocol": "SASL_PLAINTEXT",
      "sasl": {"username": "trep", "password": SECRET}, "tls": {}},
     "kafka.tls is set but kafka.security_protocol is SASL_PLAINTEXT"),
    ({"security_protocol": "TLS"}, "kafka.security_protocol: Input should be 'PLAINTEXT'"),
    ({"security_protocol": "SSL", "tls": {"ca_location": "/nonexistent/ca.pem"}},
     "kafka.tls.ca_location: /nonexistent/ca.pem does not exist"),
    ({"security_protocol": "SSL", "tls": {"certificate_location": "{cert}"}},
     "kafka.tls.certificate_location and kafka.tls.key_location go together"),
    ({"security_protocol": "SSL", "tls": {"key_password": KEY_SECRET}},
     "kafka.tls.key_password is set but kafka.tls.key_location is not"),
    ({"security_protocol": "SSL", "tls": {"certificate_location": "{cert}",
                                          "key_location": "{key}", "key_password": KEY_SECRET,
                                          "key_password_file": "{ca}"}},
     "set kafka.tls.key_password or kafka.tls.key_password_file, not both"),
    ({"properties": {"sasl.password": SECRET}},
     "kafka.properties['sasl.password']: set kafka.sasl.password instead"),
    ({"properties": {"security.protocol": "SSL"}},
     "kafka.properties['security.protocol']: set kafka.security_protocol instead"),
    ({"properties": {"ssl.ca.location": "/x"}},
     "kafka.properties['ssl.ca.location']: set kafka.tls.ca_location instead"),
    ({"properties": {"isolation.level": "read_uncommitted"}},
     "kafka.properties['isolation.level']: the replicator sets it itself"),
    ({"secret_properties": {"transactional.id": "x"}},
     "kafka.secret_properties['transactional.id']: the replicator sets it itself"),
    ({"properties": {"sasl.oauthbearer.client.secret": SECRET}},
     "kafka.properties['sasl.oauthbearer.client.secret'] holds a secret: put it in "
     "kafka.secret_properties"),
    ({"properties": {"client.id": "a"}, "secret_properties": {"client.id": "b"}},
     "kafka.properties['client.id'] is also in kafka.secret_properties"),
    ({"properties": {"socket.timeout.ms": [1, 2]}},
     "kafka.properties.socket.timeout.ms: Input should be a valid string"),
    ({"bootstrap": "k1:9092"}, "kafka.bootstrap: Extra inputs are not permitted"),
])
def test_contradictions_are_refused_naming_the_field(
        tmp_path: Path, pem: dict[str, Path], kafka: dict[str, object], expected: str) -> None:
    text = yaml.safe_dump(kafka)
    for name, path in pem.items():
        text = text.replace(f"'{{{name}}}'", str(path))
    message = _refused(tmp_path, yaml.safe_load(text))
    assert expected in message, message
