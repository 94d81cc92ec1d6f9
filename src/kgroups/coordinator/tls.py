"""TLS for the coordinator's listeners: certificates from files, reloaded when they change.

Certificates on Kubernetes are files a Secret (or cert-manager) rewrites in place, often
every few weeks or hours. The listener keeps one outer SSL context whose SNI callback
(OpenSSL calls it on every ClientHello, with or without a server name) hands each new
handshake the newest context built from the files; connections already open keep theirs.
`reload()` rebuilds only when a file's content changed, and a broken new file (a half
written Secret, a key that does not match) keeps the last good context and says why.

Client certificates: `client_auth` "required" refuses a handshake without a certificate
signed by `client_ca`, "requested" asks for one and accepts none (the principal is then
ANONYMOUS or whatever SASL says). The principal of a certificate is Kafka's default, the
subject's distinguished name in RFC 2253 order: `User:CN=alice,O=acme`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kgroups.files import Reloading
from kgroups.security.sasl import Principal

ClientAuth = Literal["none", "requested", "required"]

# RFC 2253 attribute names for what Python's getpeercert() spells out in long form.
_SHORT = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
    "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth: ClientAuth = "none"

    def validate(self) -> None:
        if self.client_auth != "none" and self.client_ca_file is None:
            raise ValueError(f"client authentication {self.client_auth!r} needs a client CA file")


class TlsError(ValueError):
    """The certificate files cannot be used (missing, unreadable, not a matching pair)."""


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out


def certificate_principal(peercert: dict[str, Any] | None) -> Principal | None:
    """Kafka's principal for a client certificate: `CN=...,O=...` (RFC 2253: the subject's
    relative names from the last to the first); None without a certificate."""
    if not peercert or not peercert.get("subject"):
        return None
    rdns = []
    for rdn in reversed(peercert["subject"]):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return Principal(",".join(rdns))


class ReloadingTls:
    """The SSL context a TLS listener serves with; `reload()` picks up changed files."""

    def __init__(self, settings: TlsSettings) -> None:
        settings.validate()
        self.settings = settings
        s = settings
        files = [s.cert_file, s.key_file, *([s.client_ca_file] if s.client_ca_file else [])]
        try:
            self._files = Reloading(f"TLS certificate {s.cert_file}", files, self._build)
        except OSError as exc:
            raise TlsError(f"cannot read {exc.filename}: {exc.strerror or exc}") from exc
        self.outer = self._build()
        self.outer.sni_callback = self._choose

    def _build(self) -> ssl.SSLContext:
        s = self.settings
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(s.cert_file, s.key_file)
            if s.client_ca_file is not None:
                ctx.load_verify_locations(cafile=s.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot load {s.cert_file} / {s.key_file}: {exc}") from exc
        ctx.verify_mode = {
            "none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED,
        }[s.client_auth]  # fmt: skip
        return ctx

    def _choose(self, sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        sslobj.context = self._files.value

    def reload(self) -> bool:
        """Rebuild the context if a file changed; True if new handshakes now use new files.
        A failure keeps the last good context (logged): serving on does less harm than
        refusing every client over a half-written Secret."""
        return self._files.reload()

    @property
    def reloads(self) -> int:
        return self._files.reloads
