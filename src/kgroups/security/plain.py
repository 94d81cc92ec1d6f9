"""SASL PLAIN (RFC 4616) as Kafka's PlainSaslServer serves it.

One message, `authzid NUL authcid NUL passwd` in UTF-8, answered with nothing or a
refusal. The password crosses the wire, so PLAIN belongs on a TLS listener; it is here
because every Kafka client speaks it. The messages are Kafka's, word for word, so tools
and runbooks written against a broker read the same; a wrong password and an unknown user
get the same one, after the same work: the password is checked by deriving a SCRAM
StoredKey from it (PBKDF2), for an unknown user against a decoy shaped like most users'
credentials, and that derivation is handed back as `Compute` so that the server runs it
off its event loop.
"""

from __future__ import annotations

import secrets

from kgroups.security.credentials import Credentials, decoy, plain_mechanism
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Compute, Principal

INVALID = "Authentication failed: Invalid username or password"
OTHER_AUTHZID = (
    "Authentication failed: Client requested an authorization id that is different from username"
)


class PlainServer:
    """The server side of one PLAIN exchange (a fresh instance per authentication)."""

    name: str = "PLAIN"

    def __init__(self, credentials: Credentials, *, secret: bytes | None = None) -> None:
        """`secret` keys the decoys of unknown users (see `credentials.decoy`)."""
        self._credentials = credentials
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._used = False

    def step(self, token: bytes, now_ms: int) -> Compute:
        if self._used:
            raise AuthenticationFailed("Authentication failed: the PLAIN exchange is over")
        self._used = True
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, username, password = tokens
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        user = self._credentials.get(username)
        found = user.plain_credential() if user is not None else None
        if found is None:  # unknown: the same derivation, against a decoy no password matches
            mechanism = plain_mechanism(self._credentials)
            found = mechanism, decoy(self._credentials, mechanism, self._secret, username)
        mechanism, credential = found

        def then(matched: object) -> Authenticated:
            if not matched:
                raise AuthenticationFailed(INVALID)
            # Checked after the password, as Kafka does: only a real user learns this.
            if authzid and authzid != username:
                raise AuthenticationFailed(OTHER_AUTHZID)
            return Authenticated(Principal(username))

        return Compute(lambda: credential.matches(password, mechanism), then)
