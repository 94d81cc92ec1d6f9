"""Listeners: where the coordinator accepts connections, and how each is secured.

Kafka's four security protocols, spelled as Kafka spells them in `listeners=`:
PLAINTEXT (no TLS, no authentication: every client is User:ANONYMOUS), SSL (TLS; with
client certificates the principal is the certificate's subject), SASL_PLAINTEXT and
SASL_SSL (SASL authentication, without or with TLS). A coordinator may listen on several at
once, say PLAINTEXT on loopback for a sidecar and SASL_SSL for the rest of the cluster;
leaving PLAINTEXT out turns unauthenticated access off. Each listener advertises its own
address in FindCoordinator and Metadata, as Kafka's `advertised.listeners` does, so a
client is never sent to a listener it cannot speak.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from kgroups.coordinator.tls import TlsSettings
from kgroups.coordinator.tokens import OAuthBearerSettings
from kgroups.protocol.addresses import parse_host_port


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    protocol: SecurityProtocol
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def name(self) -> str:
        return self.protocol.value


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    """What the TLS and SASL listeners need."""

    tls: TlsSettings | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    credentials_file: Path | None = None
    """Users and passwords (or SCRAM hashes) for PLAIN and SCRAM, e.g. a mounted Secret."""
    max_reauth_ms: int = 0
    """Kafka's connections.max.reauth.ms: a SASL session's longest life (0: unbounded
    but for a credential's own expiry)."""
    oauthbearer: OAuthBearerSettings | None = None
    """How OAUTHBEARER tokens are verified (needed when OAUTHBEARER is offered)."""

    def check(self, listeners: tuple[ListenerSettings, ...]) -> None:
        """Refuse settings that cannot serve the listeners, naming what is missing."""
        protocols = {listener.protocol for listener in listeners}
        if len(protocols) != len(listeners):
            raise ValueError("one listener per security protocol")
        if any(p.tls for p in protocols) and self.tls is None:
            raise ValueError("an SSL or SASL_SSL listener needs a certificate and key")
        if any(p.sasl for p in protocols) and not self.sasl_mechanisms:
            raise ValueError("a SASL listener needs at least one SASL mechanism")
        password_based = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        if password_based & set(self.sasl_mechanisms) and self.credentials_file is None:
            raise ValueError("PLAIN and SCRAM need a credentials file")
        if "OAUTHBEARER" in self.sasl_mechanisms:
            if self.oauthbearer is None:
                raise ValueError("OAUTHBEARER needs to know the audiences tokens must be for")
            self.oauthbearer.check()
        if self.max_reauth_ms < 0:
            raise ValueError("max reauthentication time must be 0 or more")
        if self.tls is not None:
            self.tls.validate()


def parse_listener(value: str) -> ListenerSettings:
    """`PROTOCOL://HOST:PORT` (Kafka's listeners= syntax) or a bare `HOST:PORT`
    (PLAINTEXT)."""
    protocol_name, sep, address = value.partition("://")
    if not sep:
        protocol_name, address = "PLAINTEXT", value
    try:
        protocol = SecurityProtocol(protocol_name.upper())
    except ValueError:
        names = ", ".join(p.value for p in SecurityProtocol)
        raise ValueError(f"{value!r}: unknown security protocol (one of {names})") from None
    host, port = parse_address(address)
    return ListenerSettings(protocol, host, port)


def parse_address(value: str, default_port: int = 9092) -> tuple[str, int]:
    """`HOST:PORT` (or `HOST`, or `[v6]:PORT`) to listen on: port 0 is any free port."""
    return parse_host_port(value, default_port=default_port, any_port=True)
