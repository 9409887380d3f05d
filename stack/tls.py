"""Certificates for the local stack's TLS listeners: a private CA and the certificates it signs.

Made with the ``cryptography`` package (no keytool, no openssl command): everything is PEM,
which both Kafka (``ssl.keystore.type=PEM``) and librdkafka read directly. Tests use the same
helpers to make CAs and client certificates of their own.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Long enough that a developer's run directory never sees its certificates expire.
VALIDITY = dt.timedelta(days=3650)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tungsten-kafka local stack"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: a key in microseconds where RSA takes tens of milliseconds; Kafka and
    # librdkafka both accept it.
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self, password: str | None = None) -> bytes:
        """The key as PKCS#8 PEM, encrypted with ``password`` if given."""
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode()) if password
            else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8, encryption)


@dataclass(frozen=True)
class Authority(Issued):
    """A certificate authority that signs server and client certificates."""

    def issue(self, common_name: str, *, hosts: Sequence[str] = (),
              client: bool = False) -> Issued:
        """A certificate for ``common_name``; ``hosts`` (names or IPs) become its SANs."""
        key = _new_key()
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (x509.CertificateBuilder()
                   .subject_name(_name(common_name)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [_san(h) for h in hosts]), False)
        return Issued(builder.sign(self.key, hashes.SHA256()), key)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def new_authority(common_name: str) -> Authority:
    """A fresh self-signed CA."""
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), True)
            .sign(key, hashes.SHA256()))
    return Authority(cert, key)


def load_authority(cert_path: Path, key_path: Path) -> Authority:
    """A CA saved by ``write_private``/``write_public``."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: not an EC private key")
    return Authority(cert, key)


def write_private(path: Path, data: bytes) -> Path:
    """Write key material readable by its owner only (written whole, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)
    return path


def write_public(path: Path, data: bytes) -> Path:
    """Write a certificate (written whole, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path
