"""The SASL mechanisms a listener may offer, by Kafka's names, as fresh-exchange factories.

A factory reads the credentials when it makes an exchange, not when the listener starts:
a reloaded Secret applies to the next authentication, and an exchange already running
keeps the credentials it began with (a SCRAM proof is checked against the salt it sent).

OAUTHBEARER draws on a token verifier instead (the coordinator's, which keeps the
issuer's keys current). Adding a mechanism: give `Sources` what it needs (as a keyword of
`server_mechanisms`) and add its name -> builder to `_BUILDERS`; the builder takes the
mechanism's name and the sources and returns the factory. Nothing else here changes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kgroups.security.credentials import Credentials
from kgroups.security.oauthbearer import OAuthBearerServer, TokenVerifier
from kgroups.security.plain import PlainServer
from kgroups.security.sasl import MechanismFactory
from kgroups.security.scram import NonceFactory, ScramServer, random_nonce


@dataclass(frozen=True, slots=True)
class Sources:
    """What mechanisms draw on, shared by all of a server's exchanges."""

    credentials: Callable[[], Credentials]
    """Read at every new exchange (the current Secret)."""
    nonce: NonceFactory = random_nonce
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    """Keys the decoy credentials of unknown users (SCRAM's salts, PLAIN's checks): one
    per server, so they stay stable."""
    token_verifier: TokenVerifier | None = None


def _plain(name: str, sources: Sources) -> MechanismFactory:
    return lambda: PlainServer(sources.credentials(), secret=sources.secret)


def _scram(name: str, sources: Sources) -> MechanismFactory:
    return lambda: ScramServer(
        name, sources.credentials(), secret=sources.secret, nonce=sources.nonce
    )


def _oauthbearer(name: str, sources: Sources) -> MechanismFactory:
    verifier = sources.token_verifier
    if verifier is None:
        raise ValueError("OAUTHBEARER needs a token verifier")
    return lambda: OAuthBearerServer(verifier)


_BUILDERS: Mapping[str, Callable[[str, Sources], MechanismFactory]] = {
    "PLAIN": _plain,
    "SCRAM-SHA-256": _scram,
    "SCRAM-SHA-512": _scram,
    "OAUTHBEARER": _oauthbearer,
}
SUPPORTED: tuple[str, ...] = tuple(_BUILDERS)


def server_mechanisms(
    names: Sequence[str],
    credentials_source: Callable[[], Credentials],
    *,
    nonce: NonceFactory = random_nonce,
    secret: bytes | None = None,
    token_verifier: TokenVerifier | None = None,
) -> dict[str, MechanismFactory]:
    """Mechanism name -> a factory of fresh exchanges, for `SaslConfig`. Names are
    Kafka's, exact (clients send them as such); an unknown one raises ValueError.
    `nonce` and `secret` are for tests (a fixed server nonce, a fixed fake-salt key)."""
    unknown = [name for name in names if name not in _BUILDERS]
    if unknown:
        raise ValueError(
            f"unknown SASL mechanism {', '.join(map(repr, unknown))}: "
            f"supported are {', '.join(SUPPORTED)}"
        )
    sources = Sources(credentials_source, nonce, token_verifier=token_verifier)
    if secret is not None:
        sources = Sources(credentials_source, nonce, secret, token_verifier)
    return {name: _BUILDERS[name](name, sources) for name in names}
