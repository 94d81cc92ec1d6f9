"""OAUTHBEARER: the client's message (RFC 7628), JWT verification against a key set, and
Kafka's exchange (an error challenge, the client's 0x01, then the failure), with
kafka-python's OAUTHBEARER client and our own as peers."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from kgroups.security.client import BearerClient
from kgroups.security.jwt import InvalidToken, KeySet, TokenPolicy, UnknownKey, verify
from kgroups.security.oauthbearer import OAuthBearerServer, parse_initial_response
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge, Principal
from tests.tokens import Issuer, b64, segment

NOW_S = 1_800_000_000
NOW = NOW_S * 1000
ISSUER = Issuer()
EC_ISSUER = Issuer(ec.generate_private_key(ec.SECP256R1()))
KEYS = KeySet.of({"keys": [ISSUER.jwk(), EC_ISSUER.jwk()]})
POLICY = TokenPolicy(frozenset({"kgroups"}), ISSUER.iss)
SUB = "system:serviceaccount:shop:billing"


def check(token: str, policy: TokenPolicy = POLICY, now_ms: int = NOW) -> str:
    return verify(token, KEYS, policy, now_ms).subject


def refusal(token: str, policy: TokenPolicy = POLICY, now_ms: int = NOW) -> str:
    with pytest.raises(InvalidToken) as caught:
        verify(token, KEYS, policy, now_ms)
    return str(caught.value)


# -- the JWT ---------------------------------------------------------------------------


@pytest.mark.parametrize("issuer", [ISSUER, EC_ISSUER], ids=["RS256", "ES256"])
def test_a_valid_token_gives_its_subject_and_expiry(issuer: Issuer) -> None:
    verified = verify(issuer.token(SUB, now=NOW_S, lifetime_s=600, iss=ISSUER.iss), KEYS,
                      POLICY, NOW)  # fmt: skip
    assert verified.subject == SUB
    assert verified.expires_ms == (NOW_S + 600) * 1000


def test_an_audience_list_needs_one_accepted_audience() -> None:
    assert check(ISSUER.token(SUB, ["https://kubernetes.default.svc", "kgroups"], now=NOW_S)) == SUB
    why = refusal(ISSUER.token(SUB, ["https://kubernetes.default.svc"], now=NOW_S))
    assert "audience" in why and "kgroups" in why


def test_expiry_and_not_before_allow_the_clock_skew_and_no_more() -> None:
    expired = ISSUER.token(SUB, now=NOW_S - 600, lifetime_s=580)  # exp 20 s ago
    assert check(expired) == SUB  # within 30 s of skew
    assert "expired 40 s ago" in refusal(ISSUER.token(SUB, now=NOW_S - 640, lifetime_s=600))
    assert check(ISSUER.token(SUB, now=NOW_S + 20)) == SUB
    assert "not valid yet" in refusal(ISSUER.token(SUB, now=NOW_S + 60))
    no_exp = ISSUER.sign({"alg": "RS256", "kid": ISSUER.kid},
                         {"iss": ISSUER.iss, "sub": SUB, "aud": "kgroups"})  # fmt: skip
    assert "no expiry" in refusal(no_exp)


def test_issuer_and_subject_are_required() -> None:
    assert "issuer" in refusal(ISSUER.token(SUB, now=NOW_S, iss="https://other"))
    assert check(ISSUER.token(SUB, now=NOW_S, iss="https://other"),
                 TokenPolicy(frozenset({"kgroups"}))) == SUB  # fmt: skip
    assert "no subject" in refusal(ISSUER.token("", now=NOW_S))


def test_a_key_the_set_lacks_is_unknown_and_a_forged_signature_fails() -> None:
    stranger = Issuer(kid=ISSUER.kid)  # another cluster's key with the same key id
    assert "signature does not verify" in refusal(stranger.token(SUB, now=NOW_S))
    with pytest.raises(UnknownKey):
        verify(Issuer().token(SUB, now=NOW_S), KEYS, POLICY, NOW)
    token = ISSUER.token(SUB, now=NOW_S)
    header, _, signature = token.split(".")
    tampered = f"{header}.{segment({'sub': 'system:masters', 'aud': 'kgroups'})}.{signature}"
    assert "signature" in refusal(tampered)


@pytest.mark.parametrize("alg", ["none", "HS256", None])
def test_unsigned_and_symmetric_algorithms_are_refused(alg: str | None) -> None:
    claims = {"iss": ISSUER.iss, "sub": SUB, "aud": "kgroups", "exp": NOW_S + 60}
    token = f"{segment({'alg': alg, 'kid': ISSUER.kid})}.{segment(claims)}."
    assert "algorithm" in refusal(token)


@pytest.mark.parametrize(
    "token", ["", "a.b", "a.b.c.d", "%%%.e30.", f"{b64(b'[1]')}.e30.", "é.e30.x"]
)
def test_garbage_is_refused_with_a_reason(token: str) -> None:
    assert refusal(token)


def test_a_jwks_document_keeps_the_keys_it_can_use() -> None:
    keys = KeySet.parse(json.dumps({"keys": [
        ISSUER.jwk(), {"kty": "oct", "kid": "s", "k": "c2VjcmV0"},
        {**EC_ISSUER.jwk(), "use": "enc"}, {"kty": "EC", "kid": "x", "crv": "P-7"},
    ]}))  # fmt: skip
    assert [k.kid for k in keys.keys] == [ISSUER.kid]
    assert len(keys.skipped) == 2
    with pytest.raises(ValueError, match="keys"):
        KeySet.parse('{"nokeys": []}')


# -- the client's message --------------------------------------------------------------


def test_the_client_message_is_parsed_as_rfc_7628_says() -> None:
    assert parse_initial_response(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01") == (
        "abc.def.ghi", "", {})  # fmt: skip
    assert parse_initial_response(
        b"n,a=user=2Cx,\x01host=h\x01auth=bearer t\x01traceId=42\x01\x01"
    ) == ("t", "user,x", {"host": "h", "traceId": "42"})
    for bad in (b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01",
                b"n,,\x01auth=Basic t\x01\x01", b"n,,\x01other=1\x01\x01",
                b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01", b"\xff",
                b"n,,\x01auth=Bearer t t\x01\x01", b"n,,\x01=x\x01\x01"):  # fmt: skip
        with pytest.raises(ValueError):
            parse_initial_response(bad)


# -- the exchange ----------------------------------------------------------------------


def server() -> OAuthBearerServer:
    return OAuthBearerServer(lambda token, now_ms: verify(token, KEYS, POLICY, now_ms))


class Provider(AbstractTokenProvider):
    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token


def test_kafka_pythons_client_authenticates_for_the_tokens_lifetime() -> None:
    client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(ISSUER.token(SUB, now=NOW_S)))
    result = server().step(client.auth_bytes(), NOW)
    assert isinstance(result, Authenticated)
    assert result.principal == Principal(SUB)
    assert result.expires_ms == (NOW_S + 600) * 1000
    client.receive(result.data)
    assert client.is_authenticated()


def test_a_refused_token_gets_kafkas_json_challenge_then_fails_on_0x01() -> None:
    """Kafka's order: the error as a challenge, the client's 0x01, then the failure."""
    client = SaslMechanismOAuth(
        sasl_oauth_token_provider=Provider(ISSUER.token(SUB, "elsewhere", now=NOW_S))
    )
    mechanism = server()
    challenge = mechanism.step(client.auth_bytes(), NOW)
    assert isinstance(challenge, Challenge)
    assert json.loads(challenge.data) == {"status": "invalid_token"}
    client.receive(challenge.data)
    with pytest.raises(AuthenticationFailed, match="invalid token: audience"):
        mechanism.step(client.auth_bytes(), NOW)
    ours = BearerClient("x.y.z")  # our client answers the challenge the same way
    assert ours.step(challenge.data) == b"\x01"


def test_an_authorization_id_must_be_the_tokens_subject() -> None:
    token = ISSUER.token(SUB, now=NOW_S)
    same = server().step(f"n,a={SUB},\x01auth=Bearer {token}\x01\x01".encode(), NOW)
    assert isinstance(same, Authenticated)
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        server().step(f"n,a=admin,\x01auth=Bearer {token}\x01\x01".encode(), NOW)


def test_a_malformed_message_fails_at_once_and_a_finished_exchange_stays_finished() -> None:
    with pytest.raises(AuthenticationFailed, match="client first message"):
        server().step(b"n,,auth=Bearer t", NOW)
    mechanism = server()
    mechanism.step(BearerClient(ISSUER.token(SUB, now=NOW_S)).first(), NOW)
    with pytest.raises(AuthenticationFailed, match="over"):
        mechanism.step(b"\x01", NOW)
