"""The client side of PLAIN and SCRAM, for kgroups' own clients (`security/client.py`).

Sans-IO like the server side: `first()` is the first token to send; `step(server)` takes
the server's answer and returns the next token, or None when the exchange is complete.
The SCRAM client checks the server's signature before calling the exchange complete: a
server that cannot produce it does not hold our credential (an impostor, or a relay).
Any refusal or malformed answer raises AuthenticationFailed.
"""

from __future__ import annotations

import base64
import enum
import hmac

from kgroups.security.credentials import (
    MIN_ITERATIONS,
    SCRAM_HASHES,
    client_key,
    salted_password,
    scram_hash,
    scram_hmac,
)
from kgroups.security.sasl import AuthenticationFailed
from kgroups.security.scram import decode_base64, escape_saslname, is_nonce, random_nonce, xor

MAX_ITERATIONS = 1_000_000
"""More than a server needs (Kafka allows 16384); a bound on what a hostile one costs us."""


class PlainClient:
    """RFC 4616 PLAIN: the password in one message (use it over TLS)."""

    def __init__(self, username: str, password: str) -> None:
        self._message = f"\0{username}\0{password}".encode()

    def first(self) -> bytes:
        return self._message

    def step(self, server: bytes) -> bytes | None:
        if server:
            raise AuthenticationFailed("PLAIN: the server answered with unexpected data")
        return None


class _State(enum.Enum):
    FIRST_SENT = "first-sent"
    FINAL_SENT = "final-sent"
    DONE = "done"


class ScramClient:
    """RFC 5802 SCRAM without channel binding (GS2 header `n,,`)."""

    def __init__(
        self, username: str, password: str, mechanism: str, *, nonce: str | None = None
    ) -> None:
        """`nonce`: the client nonce (tests); a random one by default."""
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"{mechanism!r} is not a SCRAM mechanism ({', '.join(SCRAM_HASHES)})")
        self._mechanism = mechanism
        self._password = password
        self._nonce = random_nonce() if nonce is None else nonce
        if not is_nonce(self._nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without commas")
        self._bare = f"n={escape_saslname(username)},r={self._nonce}"
        self._server_signature = b""
        self._state = _State.FIRST_SENT

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def step(self, server: bytes) -> bytes | None:
        if self._state is _State.DONE:
            raise self._fail("the exchange is already complete")
        try:
            text = server.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("the server's message is not UTF-8") from None
        if text.startswith("e="):
            raise self._fail(f"the server refused: {text[2:]}")
        if self._state is _State.FIRST_SENT:
            final = self._client_final(text)
            self._state = _State.FINAL_SENT
            return final
        verifier = decode_base64(text.split(",")[0][2:]) if text.startswith("v=") else None
        if verifier is None or not hmac.compare_digest(verifier, self._server_signature):
            raise self._fail("the server's signature is wrong: it does not hold our credential")
        self._state = _State.DONE
        return None

    def _fail(self, reason: str) -> AuthenticationFailed:
        self._state = _State.DONE  # nothing more is accepted after a failure
        return AuthenticationFailed(f"{self._mechanism}: {reason}")

    def _client_final(self, server_first: str) -> bytes:
        attributes = server_first.split(",")
        if attributes[0].startswith("m="):
            raise self._fail("the server requires an extension we do not support")
        if len(attributes) < 3 or [a[:2] for a in attributes[:3]] != ["r=", "s=", "i="]:
            raise self._fail("malformed server-first message")
        nonce, salt_text, iterations_text = (a[2:] for a in attributes[:3])
        if not (is_nonce(nonce) and nonce.startswith(self._nonce) and nonce != self._nonce):
            raise self._fail("the server's nonce does not extend ours")
        salt = decode_base64(salt_text)
        if not salt:
            raise self._fail("malformed salt")
        digits = iterations_text.isascii() and iterations_text.isdigit()
        if not digits or len(iterations_text) > 9:  # int() refuses thousands of digits
            raise self._fail("malformed iteration count")
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise self._fail(
                f"iteration count {iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        mechanism = self._mechanism
        salted = salted_password(self._password, mechanism, salt, iterations)
        key = client_key(mechanism, salted)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        proof = xor(key, scram_hmac(mechanism, scram_hash(mechanism, key), auth_message))
        server_key = scram_hmac(mechanism, salted, b"Server Key")
        self._server_signature = scram_hmac(mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
