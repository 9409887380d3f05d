"""The local broker's SASL_SSL listener: its port, its certificates, its configuration."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from stack import settings, tls
from stack.services.kafka import Kafka


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Kafka:
    monkeypatch.setattr(settings, "RUN_DIR", tmp_path)
    monkeypatch.setenv("TREP_KAFKA_PORT", "31092")
    monkeypatch.delenv("TREP_KAFKA_SASL_PORT", raising=False)
    return Kafka()


def test_the_secure_port_follows_the_client_port_unless_set(
        broker: Kafka, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two stacks with their own TREP_KAFKA_PORT never collide on the secure listener.
    assert broker.sasl_port == 31094
    assert broker.sasl_bootstrap == "127.0.0.1:31094"
    monkeypatch.setenv("TREP_KAFKA_SASL_PORT", "31555")
    assert broker.sasl_port == 31555


def _verify(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    public = issuer.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(issuer)


def test_certificates_are_made_once_and_chain_to_the_ca(broker: Kafka) -> None:
    broker._ensure_certificates()
    ca_pem = broker.ca_file.read_bytes()
    ca = x509.load_pem_x509_certificate(ca_pem)
    server_pem = broker.server_pem.read_bytes()
    # Kafka's PEM keystore: the key first, then the chain (server certificate, CA).
    assert server_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    chain = x509.load_pem_x509_certificates(server_pem)
    assert len(chain) == 2 and chain[1] == ca
    _verify(chain[0], ca)
    sans = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    for private in (broker.server_pem, broker.ca_key_file):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    broker._ensure_certificates()  # a restart keeps the CA clients already trust
    assert broker.ca_file.read_bytes() == ca_pem


def test_the_configuration_adds_a_scram_listener_beside_plaintext(broker: Kafka) -> None:
    props = Path(broker._write_config()).read_text().splitlines()
    assert ("listeners=PLAINTEXT://127.0.0.1:31092,SASL_SSL://127.0.0.1:31094,"
            f"CONTROLLER://127.0.0.1:{broker.controller_port}") in props
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:31092,SASL_SSL://127.0.0.1:31094" \
        in props
    assert "inter.broker.listener.name=PLAINTEXT" in props
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512" in props
    assert f"listener.name.sasl_ssl.ssl.truststore.location={broker.ca_file}" in props
    assert f"listener.name.sasl_ssl.ssl.keystore.location={broker.server_pem}" in props
    assert "listener.name.sasl_ssl.ssl.keystore.type=PEM" in props


def test_client_certificates_and_encrypted_keys(tmp_path: Path) -> None:
    ca = tls.new_authority("test CA")
    client = ca.issue("alice", client=True)
    _verify(client.cert, ca.cert)
    usage = client.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usage
    encrypted = client.key_pem("pw")
    assert encrypted.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    tls.write_private(tmp_path / "ca-key.pem", ca.key_pem())
    tls.write_public(tmp_path / "ca.pem", ca.cert_pem())
    again = tls.load_authority(tmp_path / "ca.pem", tmp_path / "ca-key.pem")
    assert again.cert == ca.cert
    _verify(again.issue("bob", client=True).cert, ca.cert)
