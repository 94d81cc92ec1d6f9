"""No bytes make the OAUTHBEARER mechanism (message parser and JWT verification) raise
anything but AuthenticationFailed, or authenticate without a token the issuer signed.

Anyone may send anything before authenticating. Messages are built from the RFC 7628
framing's own pieces around real, forged and mutated tokens, and a real token is mutated
a byte at a time: only the untouched token may authenticate, as its own subject."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.security.jwt import KeySet, TokenPolicy, verify
from kgroups.security.oauthbearer import OAuthBearerServer
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge
from tests.tokens import Issuer, b64, segment

NOW_S = 1_800_000_000
ISSUER = Issuer()
KEYS = KeySet.of(ISSUER.jwks())
POLICY = TokenPolicy(frozenset({"kgroups"}), ISSUER.iss)
SUB = "system:serviceaccount:shop:billing"
GOOD = ISSUER.token(SUB, now=NOW_S)
BUDGET = settings(max_examples=300, deadline=None, derandomize=True)
HEADER, CLAIMS, SIGNATURE = GOOD.split(".")
FORGED = (
    f"{segment({'alg': 'none', 'kid': ISSUER.kid})}.{CLAIMS}.",
    f"{segment({'alg': 'HS256', 'kid': ISSUER.kid})}.{CLAIMS}.{SIGNATURE}",
    f"{HEADER}.{segment({'sub': 'system:masters', 'aud': 'kgroups', 'exp': NOW_S + 60})}.{SIGNATURE}",
    f"{HEADER}.{CLAIMS}.{b64(b'x' * 256)}",
    f"{HEADER}.{b64(b'[1,2]')}.{SIGNATURE}",
    Issuer(kid=ISSUER.kid, iss=ISSUER.iss).token(SUB, now=NOW_S),
)  # fmt: skip
TOKENS = st.one_of(st.sampled_from([GOOD, *FORGED]), st.text(max_size=40))
PIECES = st.sampled_from(["n,", "y,", "a=x,", ",", "\x01", "auth=", "Bearer ", "bearer ",
                          "host=h", "=", "=2C", "\x00", "\xff", " "])  # fmt: skip
FRAMED = st.tuples(
    st.sampled_from(["n,,", "n,a=x,", f"n,a={SUB},", "y,,", ""]),
    st.sampled_from(["\x01", "", "\x01x=1\x01"]),
    st.sampled_from(["auth=Bearer ", "auth=", ""]),
    TOKENS,
    st.sampled_from(["\x01\x01", "\x01", ""]),
).map("".join)
SHAPED = st.one_of(
    FRAMED,
    st.lists(st.one_of(PIECES, TOKENS), max_size=8).map("".join),
).map(lambda text: text.encode("utf-8", "surrogatepass"))


def server() -> OAuthBearerServer:
    return OAuthBearerServer(lambda token, now_ms: verify(token, KEYS, POLICY, now_ms))


def exchange(first: bytes, second: bytes = b"\x01") -> Authenticated | None:
    mechanism = server()
    try:
        result = mechanism.step(first, NOW_S * 1000)
        if isinstance(result, Challenge):
            assert json.loads(result.data) == {"status": "invalid_token"}
            mechanism.step(second, NOW_S * 1000)
            pytest.fail("the exchange went on after an error challenge")
    except AuthenticationFailed:
        return None
    return result


@BUDGET
@given(st.one_of(st.binary(max_size=300), SHAPED))
def test_any_message_is_refused_cleanly_or_is_the_real_token(message: bytes) -> None:
    result = exchange(message)
    if result is not None:
        assert GOOD.encode() in message
        assert str(result.principal) == f"User:{SUB}"


@BUDGET
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 255))
def test_a_token_changed_anywhere_is_refused(at: int, byte: int) -> None:
    token = bytearray(GOOD.encode())
    if token[at] == byte:
        return
    token[at] = byte
    message = b"n,,\x01auth=Bearer " + bytes(token) + b"\x01\x01"
    result = exchange(message)
    # base64url's last character may carry unused bits: a change there can decode the same.
    assert result is None or bytes(token).split(b".")[:2] == GOOD.encode().split(b".")[:2]
