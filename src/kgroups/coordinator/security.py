"""The coordinator's security at run time: TLS contexts and SASL mechanisms per listener,
kept current with the files (and, for OAUTHBEARER, the issuer's keys) they come from.

Certificates and the credentials Secret are polled every `reload_interval_s`; a change
applies to the next handshake or authentication, and connections already authenticated
keep their session until it expires (KIP-368 bounds how long that is).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from dataclasses import dataclass

from kgroups.coordinator.listeners import ListenerSettings, SecuritySettings
from kgroups.coordinator.tls import ReloadingTls
from kgroups.coordinator.tokens import BearerTokens
from kgroups.files import Reloading
from kgroups.security.credentials import Credentials, load_credentials
from kgroups.security.mechanisms import server_mechanisms
from kgroups.security.session import SaslConfig


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What one listener's connections start with."""

    sasl: SaslConfig | None
    tls: ReloadingTls | None


class Security:
    """Built once at start (refusing unusable files then), reloaded while serving."""

    def __init__(self, settings: SecuritySettings, listeners: tuple[ListenerSettings, ...]) -> None:
        settings.check(listeners)
        self.settings = settings
        # Client certificates are asked for on SSL listeners only: on SASL_SSL, SASL says
        # who the client is (Kafka's default, ssl.client.auth without a listener prefix).
        tls = settings.tls
        self.tls = ReloadingTls(tls) if tls is not None else None
        self.sasl_tls = self.tls
        if tls is not None and tls.client_auth != "none":
            self.sasl_tls = ReloadingTls(dataclasses.replace(tls, client_auth="none"))
        self.credentials: Reloading[Credentials] | None = None
        path = settings.credentials_file
        if path is not None:
            self.credentials = Reloading(f"credentials {path}", [path],
                                         lambda: load_credentials(path.read_text()))  # fmt: skip
        self.bearer: BearerTokens | None = None
        if "OAUTHBEARER" in settings.sasl_mechanisms:
            assert settings.oauthbearer is not None  # check() says so
            self.bearer = BearerTokens(settings.oauthbearer)
        self.sasl: SaslConfig | None = None
        if settings.sasl_mechanisms:
            verifier = self.bearer.verify if self.bearer is not None else None
            mechanisms = server_mechanisms(
                settings.sasl_mechanisms, self._current_credentials, token_verifier=verifier
            )
            self.sasl = SaslConfig(mechanisms, max_reauth_ms=settings.max_reauth_ms)

    def _current_credentials(self) -> Credentials:
        assert self.credentials is not None
        return self.credentials.value

    def for_listener(self, listener: ListenerSettings) -> ListenerSecurity:
        protocol = listener.protocol
        tls = (self.sasl_tls if protocol.sasl else self.tls) if protocol.tls else None
        return ListenerSecurity(self.sasl if protocol.sasl else None, tls)

    def prepare(self, mechanism: str | None, auth_bytes: bytes) -> Awaitable[None] | None:
        """What a SaslAuthenticate must wait for before its mechanism can answer (a key
        fetch, a TokenReview); None: nothing."""
        if self.bearer is None:
            return None
        return self.bearer.prepare(mechanism, auth_bytes)

    @property
    def watches_files(self) -> bool:
        bearer_file = self.bearer is not None and self.bearer.from_file
        return self.tls is not None or self.credentials is not None or bearer_file

    def reload(self) -> None:
        for tls in {id(t): t for t in (self.tls, self.sasl_tls) if t is not None}.values():
            tls.reload()
        if self.credentials is not None:
            self.credentials.reload()
        if self.bearer is not None:
            self.bearer.reload()
