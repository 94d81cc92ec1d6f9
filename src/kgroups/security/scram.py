"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka brokers serve them.

SCRAM proves the client knows the password without sending it, and proves the server
holds the user's credential (the server signature), so neither a passive listener nor a
server that merely relays can log in later. Two rounds:

    client-first   n,,n=alice,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<proof>
    server-final   v=<server signature>

An unknown user gets a server-first like any other, with a salt derived from the user name
and a per-server secret, so the salt is stable across attempts, and with the iteration
count and salt length most users have (`credentials.decoy`); the exchange fails only at
the proof, with the message a wrong password gets: the reply never says who exists.
As in Kafka, channel binding is not offered, an authorization id must be the user itself,
and the `tokenauth` extension (delegation tokens) is refused here because kgroups has none.
Anything malformed fails the exchange with a short reason; no other exception escapes.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable

from kgroups.security.credentials import (
    SCRAM_HASHES,
    Credentials,
    ScramCredential,
    decoy,
    scram_hash,
    scram_hmac,
)
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge, Principal

NonceFactory = Callable[[], str]
"""Makes the server's half of the nonce: printable ASCII without commas."""


def random_nonce() -> str:
    """24 random bytes as URL-safe base64 (printable, no comma)."""
    return secrets.token_urlsafe(24)


def invalid_credentials(mechanism: str) -> str:
    """Kafka's message for every credential failure (wrong password, unknown user,
    forged proof): the client learns nothing about which."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def escape_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' and '=' are written =2C and =3D."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(text: str) -> str | None:
    """The name in a saslname, or None if it is not one (a bare '=', a NUL, empty)."""
    head, *rest = text.split("=")
    parts = [head]
    for part in rest:
        if part[:2] not in ("2C", "3D"):
            return None
        parts.append(("," if part[:2] == "2C" else "=") + part[2:])
    name = "".join(parts)
    return name if name and "\0" not in name else None


def is_nonce(text: str) -> bool:
    """RFC 5802 `printable`: %x21-7E except ','."""
    return bool(text) and all("!" <= ch <= "~" and ch != "," for ch in text)


def decode_base64(text: str) -> bytes | None:
    """Strict and canonical base64 (no stray bits in the last character), so that a
    message that decodes to the same proof is also the same message."""
    try:
        data = base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):  # non-ASCII, or bad characters or padding
        return None
    return data if base64.b64encode(data).decode() == text else None


def xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


class _State(enum.Enum):
    CLIENT_FIRST = "client-first"
    CLIENT_FINAL = "client-final"
    DONE = "done"
    FAILED = "failed"


class ScramServer:
    """The server side of one SCRAM exchange (a fresh instance per authentication)."""

    name: str

    def __init__(
        self,
        mechanism: str,
        credentials: Credentials,
        *,
        secret: bytes,
        nonce: NonceFactory = random_nonce,
    ) -> None:
        """`secret` keys the fake salts of unknown users: keep one per server, so an
        unknown user's salt does not change between attempts (a real user's does not)."""
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"{mechanism!r} is not a SCRAM mechanism")
        self.name = mechanism
        self._credentials = credentials
        self._secret = secret
        self._nonce_factory = nonce
        self._state = _State.CLIENT_FIRST
        self._size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
        # Set by the client-first message, used by the client-final one.
        self._username = ""
        self._gs2_header = b""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def step(self, token: bytes, now_ms: int) -> Challenge | Authenticated:
        if self._state in (_State.DONE, _State.FAILED):
            raise AuthenticationFailed(f"Authentication failed: the {self.name} exchange is over")
        try:
            if self._state is _State.CLIENT_FIRST:
                challenge = Challenge(self._client_first(token))
                self._state = _State.CLIENT_FINAL
                return challenge
            authenticated = self._client_final(token)
            self._state = _State.DONE
            return authenticated
        except AuthenticationFailed:
            self._state = _State.FAILED
            raise

    def _fail(self, reason: str) -> AuthenticationFailed:
        return AuthenticationFailed(f"Authentication failed: {self.name}: {reason}")

    def _text(self, token: bytes, what: str) -> str:
        try:
            return token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"the {what} message is not UTF-8") from None

    def _client_first(self, token: bytes) -> bytes:
        text = self._text(token, "client-first")
        fields = text.split(",", 2)
        if len(fields) != 3:
            raise self._fail("malformed client-first message")
        flag, authzid_field, bare = fields
        if flag.startswith("p="):
            raise self._fail("channel binding is not supported")
        if flag not in ("n", "y"):
            raise self._fail("malformed GS2 header")
        authzid = None
        if authzid_field:
            if authzid_field[:2] == "a=":
                authzid = unescape_saslname(authzid_field[2:])
            if authzid is None:
                raise self._fail("malformed authorization id")
        attributes = bare.split(",")
        if attributes[0].startswith("m="):
            raise self._fail("mandatory extensions are not supported")
        if len(attributes) < 2 or attributes[0][:2] != "n=" or attributes[1][:2] != "r=":
            raise self._fail("the client-first message needs n=user,r=nonce")
        username = unescape_saslname(attributes[0][2:])
        if username is None:
            raise self._fail("malformed user name")
        client_nonce = attributes[1][2:]
        if not is_nonce(client_nonce):
            raise self._fail("malformed client nonce")
        extensions = dict(a.partition("=")[::2] for a in attributes[2:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise self._fail("delegation tokens (tokenauth) are not supported")
        if authzid is not None and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        credential = self._credential_of(username)
        self._nonce = client_nonce + self._nonce_factory()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._username, self._credential = username, credential
        self._gs2_header = f"{flag},{authzid_field},".encode()
        self._client_first_bare = bare
        return self._server_first.encode()

    def _credential_of(self, username: str) -> ScramCredential:
        user = self._credentials.get(username)
        credential = user.scram.get(self.name) if user is not None else None
        if credential is not None:
            return credential
        # Unknown (or without this mechanism): a stable decoy that no proof matches.
        return decoy(self._credentials, self.name, self._secret, username)

    def _client_final(self, token: bytes) -> Authenticated:
        text = self._text(token, "client-final")
        without_proof, separator, proof_text = text.rpartition(",p=")
        attributes = without_proof.split(",")
        if not separator or len(attributes) < 2:
            raise self._fail("the client-final message needs c=,r=,p=")
        if attributes[0][:2] != "c=" or attributes[1][:2] != "r=":
            raise self._fail("the client-final message needs c=,r=,p=")
        channel_binding = decode_base64(attributes[0][2:])
        proof = decode_base64(proof_text)
        if channel_binding is None or proof is None:
            raise self._fail("malformed base64 in the client-final message")
        credential = self._credential
        assert credential is not None  # set with the state by _client_first
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        signature = scram_hmac(self.name, credential.stored_key, auth_message.encode())
        proven = len(proof) == self._size and hmac.compare_digest(
            scram_hash(self.name, xor(proof, signature)), credential.stored_key
        )
        # The nonce ties this proof to this exchange (a replayed one carries another's).
        if not (
            proven and channel_binding == self._gs2_header and attributes[1][2:] == self._nonce
        ):
            raise AuthenticationFailed(invalid_credentials(self.name))
        verifier = scram_hmac(self.name, credential.server_key, auth_message.encode())
        return Authenticated(Principal(self._username), b"v=" + base64.b64encode(verifier))
