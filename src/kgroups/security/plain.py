"""SASL PLAIN (RFC 4616) as Kafka's PlainSaslServer serves it.

One message, `authzid NUL authcid NUL passwd` in UTF-8, answered with nothing or a
refusal. The password crosses the wire, so PLAIN belongs on a TLS listener; it is here
because every Kafka client speaks it. The messages are Kafka's, word for word, so tools
and runbooks written against a broker read the same; a wrong password and an unknown user
get the same one.
"""

from __future__ import annotations

from kgroups.security.credentials import Credentials
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Principal

INVALID = "Authentication failed: Invalid username or password"
OTHER_AUTHZID = (
    "Authentication failed: Client requested an authorization id that is different from username"
)


class PlainServer:
    """The server side of one PLAIN exchange (a fresh instance per authentication)."""

    name: str = "PLAIN"

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self._used = False

    def step(self, token: bytes, now_ms: int) -> Authenticated:
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
        if user is None or not user.verify_password(password):
            raise AuthenticationFailed(INVALID)
        # Checked after the password, as Kafka does: only a real user learns this.
        if authzid and authzid != username:
            raise AuthenticationFailed(OTHER_AUTHZID)
        return Authenticated(Principal(username))
