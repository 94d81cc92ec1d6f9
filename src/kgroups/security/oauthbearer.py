"""SASL OAUTHBEARER (RFC 7628) as Kafka's OAuthBearerSaslServer serves it.

The client's one message is a GS2 header (`n,` and an optional `a=authzid`), then
key=value pairs separated by 0x01, one of them `auth=Bearer TOKEN`; the others are SASL
extensions, which kgroups accepts and ignores (Kafka's default). The token is handed to
a verifier (a JWT checked against a key set, possibly a TokenReview too) which returns its
subject and expiry or says why not. Then, as Kafka does:

* accepted: empty answer; the principal is `User:` + the subject; the session lasts no
  longer than the token (KIP-368 re-authentication with a fresh token before `exp`);
* refused: the answer is a JSON error, `{"status":"invalid_token"}` (RFC 7628 3.2.2); the
  client sends 0x01 back, and only then is the authentication failed. kgroups' failure
  message says why the token was refused (expired, wrong audience, unknown signing key...),
  where Kafka repeats the JSON; it never echoes the token.

An authorization id other than the token's subject is refused, in Kafka's words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from kgroups.security.jwt import InvalidToken, VerifiedToken
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge, Principal

NAME = "OAUTHBEARER"
SEPARATOR = "\x01"
_HEADER = re.compile(r"n,(?:a=(?P<authzid>(?:[^=,\x00]|=2C|=3D)+))?,")
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")

TokenVerifier = Callable[[str, int], VerifiedToken]
"""(token, now_ms) -> the verified token; raises InvalidToken."""


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def parse_initial_response(data: bytes) -> tuple[str, str, dict[str, str]]:
    """(token, authzid, extensions) from the client's message; ValueError if malformed."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    header = _HEADER.match(text)
    if header is None:
        raise ValueError("no GS2 header (n,[a=authzid],)")
    rest = text[header.end() :]
    if not rest.startswith(SEPARATOR) or not rest.endswith(SEPARATOR * 2):
        raise ValueError("key=value pairs are framed by 0x01 and end with 0x01 0x01")
    pairs: dict[str, str] = {}
    for item in rest[1:-2].split(SEPARATOR) if rest != SEPARATOR * 2 else []:
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise ValueError("a key=value pair is malformed")
        if key in pairs:
            raise ValueError(f"key {key!r} appears twice")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise ValueError("no auth=Bearer TOKEN pair")
    scheme = _AUTH.fullmatch(auth)
    if scheme is None or scheme["scheme"].lower() != "bearer":
        raise ValueError("the auth pair is not 'Bearer TOKEN'")
    return scheme["token"], _unescape(header["authzid"] or ""), pairs


def error_challenge(status: str = "invalid_token") -> bytes:
    """RFC 7628's server error message, as Kafka writes it."""
    return json.dumps({"status": status}, separators=(",", ":")).encode()


class OAuthBearerServer:
    """The server side of one OAUTHBEARER exchange (a fresh instance per authentication)."""

    name: str = NAME

    def __init__(self, verifier: TokenVerifier) -> None:
        self._verify = verifier
        self._refused: str | None = None
        self._done = False

    def step(self, token: bytes, now_ms: int) -> Authenticated | Challenge:
        if self._refused is not None:
            # The client's 0x01 after our error (or anything else: the exchange is over).
            raise AuthenticationFailed(self._refused)
        if self._done:
            raise AuthenticationFailed("Authentication failed: the OAUTHBEARER exchange is over")
        self._done = True
        try:
            bearer, authzid, _extensions = parse_initial_response(token)
        except ValueError as exc:
            raise AuthenticationFailed(f"Invalid OAUTHBEARER client first message: {exc}") from None
        try:
            verified = self._verify(bearer, now_ms)
        except InvalidToken as exc:
            self._refused = f"Authentication failed: invalid token: {exc}"
            return Challenge(error_challenge())
        if authzid and authzid != verified.subject:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({verified.subject})"
            )
        return Authenticated(Principal(verified.subject), expires_ms=verified.expires_ms)
