"""Certificates for tests: a CA, server certificates for loopback, client certificates.

Real X.509 made with `cryptography` (EC P-256, short-lived), written as PEM files the way a
Kubernetes Secret of type kubernetes.io/tls mounts them (tls.crt, tls.key, ca.crt).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _name(cn: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))  # fmt: skip


class Pki:
    """A CA in `directory`; `issue_*` sign certificates with it."""

    def __init__(self, directory: Path, name: str = "kgroups-test-ca") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca = directory / f"{name}.crt"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
               sans: list[x509.GeneralName]) -> Issued:  # fmt: skip
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        issued = Issued(self.dir / f"{stem}.crt", self.dir / f"{stem}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, issued.key)
        return issued

    def issue_server(self, stem: str = "server", cn: str = "localhost") -> Issued:
        """For 127.0.0.1 and localhost."""
        sans: list[x509.GeneralName] = [
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]  # fmt: skip
        return self._issue(stem, _name(cn), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def issue_client(self, cn: str, org: str | None = None) -> Issued:
        return self._issue(f"client-{cn}", _name(cn, org), ExtendedKeyUsageOID.CLIENT_AUTH, [])
