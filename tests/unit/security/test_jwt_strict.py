"""Token parsing is strict, and every refusal is an `invalid_token` answer (issue 23,
finding 4).

Before: a token with `sub` twice authenticated as the last one; a `crit` header was
ignored; NaN, Infinity, 1e400 or a list of objects as claims, and a deeply nested payload,
raised OverflowError, TypeError or RecursionError out of the mechanism (the connection
dropped unanswered, with a traceback per attempt). Each case below fails on that code.
"""

from __future__ import annotations

import json

import pytest

from kgroups.security.jwt import InvalidToken, KeySet, TokenPolicy, verify
from kgroups.security.oauthbearer import OAuthBearerServer
from kgroups.security.sasl import AuthenticationFailed, Challenge
from tests.tokens import Issuer

NOW_S = 1_800_000_000
NOW = NOW_S * 1000
ISSUER = Issuer()
KEYS = KeySet.of(ISSUER.jwks())
POLICY = TokenPolicy(frozenset({"kgroups"}), ISSUER.iss)
HEADER = json.dumps({"alg": ISSUER.alg, "kid": ISSUER.kid, "typ": "JWT"})
ISS, AUD, EXP = f'"iss":"{ISSUER.iss}"', '"aud":"kgroups"', f'"exp":{NOW_S + 600}'


def raw(*members: str) -> str:
    """A JSON object written member by member, exactly as given."""
    return "{" + ",".join(members) + "}"


def claims(*members: str) -> str:
    return raw(ISS, AUD, EXP, *members)


def header(**fields: object) -> str:
    return json.dumps({"alg": ISSUER.alg, "kid": ISSUER.kid, **fields})


REFUSED = {
    "duplicate sub": (HEADER, claims('"sub":"app"', '"sub":"admin"')),
    "duplicate exp": (HEADER, raw(ISS, AUD, '"sub":"a"', '"exp":1', EXP)),
    "crit": (header(crit=["exp"]), claims('"sub":"app"')),
    "kid not a string": (header(kid=7), claims('"sub":"app"')),
    "alg not a string": (header(alg=["RS256"]), claims('"sub":"a"')),
    "NaN exp": (HEADER, raw(ISS, AUD, '"sub":"a"', '"exp":NaN')),
    "Infinity exp": (HEADER, raw(ISS, AUD, '"sub":"a"', '"exp":Infinity')),
    "1e400 exp": (HEADER, raw(ISS, AUD, '"sub":"a"', '"exp":1e400')),
    "huge exp": (HEADER, raw(ISS, AUD, '"sub":"a"', f'"exp":{10**300}')),
    "negative nbf": (HEADER, claims('"sub":"a"', '"nbf":-5')),
    "string exp": (HEADER, raw(ISS, AUD, '"sub":"a"', '"exp":"soon"')),
    "aud of objects": (HEADER, raw(ISS, '"aud":[{"a":1}]', '"sub":"a"', EXP)),
    "iss a list": (HEADER, raw(f'"iss":["{ISSUER.iss}"]', AUD, '"sub":"a"', EXP)),
    "sub a number": (HEADER, claims('"sub":42')),
    "nested": (HEADER, claims('"sub":"a"', '"x":' + "[" * 5000 + "]" * 5000)),
    "nested a little": (HEADER, claims('"sub":"a"', '"x":' + "[" * 12 + "]" * 12)),
    "not an object": (HEADER, '["sub","a"]'),
    "not JSON": (HEADER, '{"sub": a}'),
}


def token(case: str) -> str:
    header, body = REFUSED[case]
    return ISSUER.sign_text(header, body)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_token_with_odd_json_is_refused_saying_why(case: str) -> None:
    with pytest.raises(InvalidToken):
        verify(token(case), KEYS, POLICY, NOW)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_every_refusal_is_an_invalid_token_answer_never_an_exception(case: str) -> None:
    mechanism = OAuthBearerServer(lambda t, now: verify(t, KEYS, POLICY, now))
    first = mechanism.step(f"n,,\x01auth=Bearer {token(case)}\x01\x01".encode(), NOW)
    assert isinstance(first, Challenge)
    assert json.loads(first.data) == {"status": "invalid_token"}
    with pytest.raises(AuthenticationFailed, match="invalid token"):
        mechanism.step(b"\x01", NOW)


def test_stray_characters_in_a_part_are_refused_not_skipped() -> None:
    good = ISSUER.token("app", now=NOW_S)
    assert verify(good, KEYS, POLICY, NOW).subject == "app"
    header, body, signature = good.split(".")
    for bad in (f"{header}.{body}!.{signature}", f"{header}.{body}.{signature}==",
                f"{header}.{body[:-1]}+.{signature}"):  # fmt: skip
        with pytest.raises(InvalidToken):
            verify(bad, KEYS, POLICY, NOW)
    with pytest.raises(InvalidToken, match="characters"):
        verify(good + "A" * 40_000, KEYS, POLICY, NOW)
