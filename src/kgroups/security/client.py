"""How kgroups' own clients (members, the sidecar, Spark members, the admin client and the
operator) reach a secured coordinator: TLS, then SASL, with Kafka's client settings.

`ClientSecurity` holds what a Kafka client's `security.protocol`, `ssl.*` and `sasl.*`
settings hold. It gives the protocol client a `connect` (TLS over TCP) and an
`authenticate` (SaslHandshake v1, then SaslAuthenticate v2 rounds), which
`KafkaConnection` runs on every new connection and again before the session ends. Secrets
may be files: a password file or a token file is read at every authentication, so a rotated
Secret or a refreshed projected ServiceAccount token is picked up without a restart.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from kgroups.protocol.client import Authenticate, Connector, KafkaConnection, Streams
from kgroups.protocol.errors import ErrorCode
from kgroups.security.sasl import AuthenticationFailed
from kgroups.security.sasl_client import PlainClient, ScramClient

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslAuthenticationError(ConnectionError):
    """The server refused our credentials (or we refused its proof); the message says why."""


class BearerClient:
    """OAUTHBEARER's client side (RFC 7628): one message carrying the token."""

    def __init__(self, token: str) -> None:
        self._token = token

    def first(self) -> bytes:
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode()

    def step(self, server: bytes) -> bytes | None:
        if server:  # an error challenge: RFC 7628 says answer \x01, then the server fails
            return b"\x01"
        return None


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """A Kafka client's security settings (defaults: PLAINTEXT, no authentication)."""

    protocol: str = "PLAINTEXT"
    ca_file: Path | None = None
    """ssl.truststore: the CA bundle that signs the coordinator's certificate (None: the
    system's)."""
    cert_file: Path | None = None
    key_file: Path | None = None
    """A client certificate and key, for listeners that require one (mutual TLS)."""
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    password_file: Path | None = None
    token_file: Path | None = None
    """OAUTHBEARER: a file holding the token (a projected ServiceAccount token)."""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security protocol {self.protocol!r}: one of {', '.join(PROTOCOLS)}")
        sasl = self.protocol.startswith("SASL_")
        if sasl and self.mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r}: one of {', '.join(MECHANISMS)}")
        if not sasl and self.mechanism is not None:
            raise ValueError(
                f"a SASL mechanism needs SASL_PLAINTEXT or SASL_SSL, not {self.protocol}"
            )
        if self.mechanism == "OAUTHBEARER" and self.token_file is None:
            raise ValueError("OAUTHBEARER needs a token file")
        passwords = (self.password is None) != (self.password_file is None)
        if sasl and self.mechanism != "OAUTHBEARER" and not (self.username and passwords):
            raise ValueError(f"{self.mechanism} needs a username and a password (or file)")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs its key (and the key its certificate)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSecurity:
        """The settings in KGROUPS_* environment variables (how the CLIs, the sidecar and
        the operator take them, e.g. from a Secret): KGROUPS_SECURITY_PROTOCOL,
        KGROUPS_SSL_CA_FILE, KGROUPS_SSL_CERT_FILE, KGROUPS_SSL_KEY_FILE,
        KGROUPS_SSL_CHECK_HOSTNAME (true), KGROUPS_SASL_MECHANISM, KGROUPS_SASL_USERNAME,
        KGROUPS_SASL_PASSWORD or KGROUPS_SASL_PASSWORD_FILE, KGROUPS_SASL_TOKEN_FILE."""
        env = os.environ if env is None else env

        def path(name: str) -> Path | None:
            value = env.get(f"KGROUPS_{name}")
            return Path(value) if value else None

        return cls(
            protocol=env.get("KGROUPS_SECURITY_PROTOCOL", "PLAINTEXT").upper(),
            ca_file=path("SSL_CA_FILE"),
            cert_file=path("SSL_CERT_FILE"),
            key_file=path("SSL_KEY_FILE"),
            check_hostname=env.get("KGROUPS_SSL_CHECK_HOSTNAME", "true").lower() != "false",
            mechanism=(env.get("KGROUPS_SASL_MECHANISM") or "").upper() or None,
            username=env.get("KGROUPS_SASL_USERNAME") or None,
            password=env.get("KGROUPS_SASL_PASSWORD"),
            password_file=path("SASL_PASSWORD_FILE"),
            token_file=path("SASL_TOKEN_FILE"),
        )

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = self.check_hostname
        if self.cert_file is not None and self.key_file is not None:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def connector(self, base: Connector | None = None) -> Connector | None:
        """TCP with TLS when the protocol says so; `base` otherwise."""
        if not self.tls:
            return base
        ctx = self.ssl_context()

        async def connect(host: str, port: int) -> Streams:
            return await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)

        return connect

    def authenticator(self) -> Authenticate | None:
        if not self.protocol.startswith("SASL_"):
            return None
        return self._authenticate

    def _mechanism_client(self) -> Any:
        if self.mechanism == "OAUTHBEARER":
            assert self.token_file is not None
            return BearerClient(self.token_file.read_text().strip())
        password = self.password
        if password is None:
            assert self.password_file is not None
            password = self.password_file.read_text().rstrip("\n")
        assert self.username is not None
        assert self.mechanism is not None
        if self.mechanism == "PLAIN":
            return PlainClient(self.username, password)
        return ScramClient(self.username, password, self.mechanism)

    async def _authenticate(self, conn: KafkaConnection) -> float:
        assert self.mechanism is not None
        hs = await conn.request(SaslHandshakeRequest(mechanism=self.mechanism))
        assert isinstance(hs, SaslHandshakeResponse)
        if hs.error_code is not ErrorCode.none:
            raise SaslAuthenticationError(
                f"SaslHandshake for {self.mechanism}: {hs.error_code.name} "
                f"(the server offers {', '.join(hs.mechanisms) or 'none'})"
            )
        client = self._mechanism_client()
        token: bytes | None = client.first()
        while token is not None:
            answer = await conn.request(SaslAuthenticateRequest(auth_bytes=token))
            assert isinstance(answer, SaslAuthenticateResponse)
            if answer.error_code is not ErrorCode.none:
                raise SaslAuthenticationError(answer.error_message or answer.error_code.name)
            try:
                token = client.step(bytes(answer.auth_bytes))
            except AuthenticationFailed as exc:  # the server's proof is wrong: not our server
                raise SaslAuthenticationError(str(exc)) from exc
            if token is None:
                return float(answer.session_lifetime.total_seconds())
        return 0.0
