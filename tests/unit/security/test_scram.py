"""SCRAM-SHA-256/512 (kgroups.security.scram) against kafka-python's SCRAM client, our own
client (kgroups.security.sasl_client), and RFC 7677's worked example.

Messages a real client would never send (a forged nonce, a `y` GS2 flag, a bad channel
binding) are made by `client_final` below, an independent few lines of RFC 5802.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools

import pytest
from kafka.net.sasl.scram import ScramClient as KafkaPythonScram

from kgroups.security.credentials import UserCredentials, scram_credential
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge, Principal
from kgroups.security.sasl_client import ScramClient
from kgroups.security.scram import ScramServer, invalid_credentials

NOW = 1_700_000_000_000
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SECRET = b"fake-salt key for tests"
BOB_SALT = b"bob's salt"
CREDENTIALS = {
    "alice": UserCredentials.from_password("alice-pw"),
    "bob": UserCredentials(
        {m: scram_credential("bob-pw", m, iterations=8192, salt=BOB_SALT) for m in MECHANISMS}
    ),
    "carol": UserCredentials({"SCRAM-SHA-512": scram_credential("carol-pw", "SCRAM-SHA-512")}),
    "a,b=c": UserCredentials.from_password("odd-pw"),
}
_serial = itertools.count()


def server(mechanism: str = "SCRAM-SHA-512", nonce: str | None = None) -> ScramServer:
    """A fresh exchange; server nonces differ between exchanges unless one is given."""
    return ScramServer(
        mechanism,
        CREDENTIALS,
        secret=SECRET,
        nonce=lambda: nonce if nonce is not None else f"srv{next(_serial)}",
    )


def challenge(result: Challenge | Authenticated) -> bytes:
    assert isinstance(result, Challenge)
    return result.data


def authenticated(result: Challenge | Authenticated) -> Authenticated:
    assert isinstance(result, Authenticated)
    return result


def kafka_python_login(user: str, password: str, mechanism: str) -> Authenticated:
    client = KafkaPythonScram(user, password, mechanism)
    exchange = server(mechanism)
    client.process_server_first_message(challenge(exchange.step(client.first_message(), NOW)))
    result = authenticated(exchange.step(client.final_message(), NOW))
    client.process_server_final_message(result.data)  # raises on a wrong server signature
    return result


def server_first_fields(data: bytes) -> dict[str, str]:
    return {k: v for k, _, v in (f.partition("=") for f in data.decode().split(","))}


def client_final(
    password: str, mechanism: str, bare: str, server_first: bytes, *,
    nonce: str | None = None, gs2: bytes = b"n,,",
) -> bytes:  # fmt: skip
    """RFC 5802's client proof, written out independently of the code under test."""
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = server_first_fields(server_first)
    salted = hashlib.pbkdf2_hmac(
        name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    key = hmac.new(salted, b"Client Key", name).digest()
    without_proof = f"c={base64.b64encode(gs2).decode()},r={nonce or fields['r']}"
    auth = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.new(name, key).digest(), auth, name).digest()
    proof = bytes(a ^ b for a, b in zip(key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(("user", "password"), [("alice", "alice-pw"), ("bob", "bob-pw")])
def test_kafka_python_logs_in(mechanism: str, user: str, password: str) -> None:
    result = kafka_python_login(user, password, mechanism)
    assert result.principal == Principal(user) and str(result.principal) == f"User:{user}"
    assert result.data.startswith(b"v=") and result.expires_ms is None


def test_the_server_sends_the_stored_salt_and_iterations() -> None:
    first = challenge(server().step(b"n,,n=bob,r=client-nonce", NOW))
    fields = server_first_fields(first)
    assert fields["r"].startswith("client-nonce") and len(fields["r"]) > len("client-nonce")
    assert base64.b64decode(fields["s"]) == BOB_SALT and fields["i"] == "8192"


REFUSED = [
    *((user, password, m) for m in MECHANISMS
      for user, password in [("alice", "wrong"), ("bob", "alice-pw"), ("nobody", "alice-pw")]),
    ("carol", "carol-pw", "SCRAM-SHA-256"),  # she has no SCRAM-SHA-256 credential
]  # fmt: skip


@pytest.mark.parametrize(("user", "password", "mechanism"), REFUSED)
def test_a_wrong_password_and_an_unknown_user_get_the_same_message(
    user: str, password: str, mechanism: str
) -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        kafka_python_login(user, password, mechanism)
    assert (
        str(refused.value)
        == invalid_credentials(mechanism)
        == (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}"
        )
    )


def test_an_unknown_user_gets_a_plausible_stable_salt() -> None:
    """The first answer does not tell who exists: same shape as a real user's, and the
    same salt at every attempt (a real user's salt does not change either)."""
    firsts = [server_first_fields(challenge(server().step(b"n,,n=nobody,r=abc", NOW)))
              for _ in range(2)]  # fmt: skip
    real = server_first_fields(challenge(server().step(b"n,,n=alice,r=abc", NOW)))
    assert firsts[0]["s"] == firsts[1]["s"] != real["s"]
    assert len(base64.b64decode(firsts[0]["s"])) == len(base64.b64decode(real["s"]))
    assert firsts[0]["i"] == real["i"] == "4096"
    other = server_first_fields(challenge(server().step(b"n,,n=someone,r=abc", NOW)))
    assert other["s"] != firsts[0]["s"]


def test_a_tampered_proof_fails() -> None:
    exchange = server()
    first = challenge(exchange.step(b"n,,n=alice,r=abc", NOW))
    final = client_final("alice-pw", "SCRAM-SHA-512", "n=alice,r=abc", first)
    head, proof = final.rsplit(b",p=", 1)
    forged = bytearray(base64.b64decode(proof))
    forged[0] ^= 1
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        exchange.step(head + b",p=" + base64.b64encode(forged), NOW)


def test_a_replayed_client_final_fails() -> None:
    """A recorded exchange replayed whole: the new server nonce makes the old proof void."""
    client = KafkaPythonScram("alice", "alice-pw", "SCRAM-SHA-512")
    first_message = client.first_message()
    recorded = server()
    client.process_server_first_message(challenge(recorded.step(first_message, NOW)))
    final_message = client.final_message()
    authenticated(recorded.step(final_message, NOW))
    with pytest.raises(AuthenticationFailed, match="exchange is over"):
        recorded.step(final_message, NOW)
    replayed = server()
    challenge(replayed.step(first_message, NOW))
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        replayed.step(final_message, NOW)


def test_a_wrong_nonce_fails_even_with_a_matching_proof() -> None:
    exchange = server()
    first = challenge(exchange.step(b"n,,n=alice,r=abc", NOW))
    final = client_final("alice-pw", "SCRAM-SHA-512", "n=alice,r=abc", first, nonce="abcother")
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        exchange.step(final, NOW)


def test_gs2_flag_y_is_accepted_and_bound_to_the_channel_binding() -> None:
    """`y`: the client could bind but thinks we cannot; c= must then say `y,,`."""
    exchange = server()
    first = challenge(exchange.step(b"y,,n=alice,r=abc", NOW))
    final = client_final("alice-pw", "SCRAM-SHA-512", "n=alice,r=abc", first, gs2=b"y,,")
    assert authenticated(exchange.step(final, NOW)).principal == Principal("alice")
    exchange = server()
    first = challenge(exchange.step(b"y,,n=alice,r=abc", NOW))
    final = client_final("alice-pw", "SCRAM-SHA-512", "n=alice,r=abc", first, gs2=b"n,,")
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        exchange.step(final, NOW)


def test_channel_binding_is_refused() -> None:
    with pytest.raises(AuthenticationFailed, match="channel binding is not supported"):
        server().step(b"p=tls-server-end-point,,n=alice,r=abc", NOW)


def test_an_authorization_id_must_be_the_user() -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        server().step(b"n,a=bob,n=alice,r=abc", NOW)
    assert str(refused.value) == (
        "Authentication failed: Client requested an authorization id that is different "
        "from username"
    )
    exchange = server()
    first = challenge(exchange.step(b"n,a=alice,n=alice,r=abc", NOW))
    final = client_final("alice-pw", "SCRAM-SHA-512", "n=alice,r=abc", first, gs2=b"n,a=alice,")
    assert authenticated(exchange.step(final, NOW)).principal == Principal("alice")


def test_delegation_tokens_are_refused() -> None:
    with pytest.raises(AuthenticationFailed, match=r"delegation tokens \(tokenauth\)"):
        server().step(b"n,,n=alice,r=abc,tokenauth=true", NOW)
    challenge(server().step(b"n,,n=alice,r=abc,tokenauth=false,other=1", NOW))


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"", "malformed client-first"),
        (b"n,,", "needs n=user,r=nonce"),
        (b"x,,n=alice,r=abc", "malformed GS2 header"),
        (b"n,b=alice,n=alice,r=abc", "malformed authorization id"),
        (b"n,,n=alice", "needs n=user,r=nonce"),
        (b"n,,r=abc,n=alice", "needs n=user,r=nonce"),
        (b"n,,n=al=ice,r=abc", "malformed user name"),
        (b"n,,n=,r=abc", "malformed user name"),
        (b"n,,n=alice,r=", "malformed client nonce"),
        (b"n,,n=alice,r=a b", "malformed client nonce"),
        (b"n,,m=ext,n=alice,r=abc", "mandatory extensions"),
        (b"n,,n=\xff,r=abc", "not UTF-8"),
    ],
)
def test_a_malformed_client_first_fails_with_a_short_reason(token: bytes, reason: str) -> None:
    with pytest.raises(AuthenticationFailed, match="Authentication failed: SCRAM-SHA-512: ") as e:
        server().step(token, NOW)
    assert reason in str(e.value)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"", "needs c=,r=,p="),
        (b"c=biws,r=abcsrv,p", "needs c=,r=,p="),
        (b"r=abcsrv,c=biws,p=AAAA", "needs c=,r=,p="),
        (b"c=biws,r=abcsrv,p=not*base64", "malformed base64"),
        (b"c=bi*s,r=abcsrv,p=AAAA", "malformed base64"),
    ],
)
def test_a_malformed_client_final_fails_with_a_short_reason(token: bytes, reason: str) -> None:
    exchange = server(nonce="srv")
    challenge(exchange.step(b"n,,n=alice,r=abc", NOW))
    with pytest.raises(AuthenticationFailed, match=reason):
        exchange.step(token, NOW)
    with pytest.raises(AuthenticationFailed, match="exchange is over"):
        exchange.step(b"c=biws,r=abcsrv,p=AAAA", NOW)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_our_client_logs_in_with_an_escaped_name(mechanism: str) -> None:
    client = ScramClient("a,b=c", "odd-pw", mechanism)
    assert client.first().startswith(b"n,,n=a=2Cb=3Dc,r=")
    exchange = server(mechanism)
    final = client.step(challenge(exchange.step(client.first(), NOW)))
    assert final is not None
    result = authenticated(exchange.step(final, NOW))
    assert result.principal == Principal("a,b=c")
    assert client.step(result.data) is None
    with pytest.raises(AuthenticationFailed, match="already complete"):
        client.step(result.data)


def test_our_client_refuses_a_server_that_cannot_sign() -> None:
    """A server without our credential (an impostor) cannot make the signature."""
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-512")
    impostor = ScramServer("SCRAM-SHA-512", {}, secret=b"impostor")
    final = client.step(challenge(impostor.step(client.first(), NOW)))
    assert final is not None
    genuine = ScramClient("alice", "alice-pw", "SCRAM-SHA-512")
    exchange = server()
    genuine_final = genuine.step(challenge(exchange.step(genuine.first(), NOW)))
    assert genuine_final is not None
    signature_of_another_exchange = authenticated(exchange.step(genuine_final, NOW)).data
    with pytest.raises(AuthenticationFailed, match="signature is wrong"):
        client.step(signature_of_another_exchange)


@pytest.mark.parametrize(
    ("server_first", "reason"),
    [
        (b"e=unknown-user", "the server refused: unknown-user"),
        (b"r=someone-else,s=QUJD,i=4096", "does not extend ours"),
        (b"r=abc,s=QUJD,i=4096", "does not extend ours"),
        (b"r=abcsrv,s=QUJD,i=1024", "iteration count 1024"),
        (b"r=abcsrv,s=QUJD,i=99999999999", "malformed iteration count"),
        (b"r=abcsrv,s=,i=4096", "malformed salt"),
        (b"s=QUJD,r=abcsrv,i=4096", "malformed server-first"),
        (b"m=x,r=abcsrv,s=QUJD,i=4096", "requires an extension"),
    ],
)
def test_our_client_refuses_a_bad_server_first(server_first: bytes, reason: str) -> None:
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-256", nonce="abc")
    with pytest.raises(AuthenticationFailed, match=reason):
        client.step(server_first)


# RFC 7677 section 3. The server signature is the RFC's: v=6rriTRBi23WpRR/wtup+mMhUZUn/
# dB5nLTJRsjl95G4= (kafka-python computes the same).
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_our_client_reproduces_rfc_7677() -> None:
    client = ScramClient("user", "pencil", "SCRAM-SHA-256", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.step(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.step(RFC_SERVER_FINAL) is None


def test_our_client_refuses_a_near_miss_of_the_rfc_signature() -> None:
    client = ScramClient("user", "pencil", "SCRAM-SHA-256", nonce="rOprNGfwEbeRWgbNEkqO")
    client.step(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationFailed, match="signature is wrong"):
        client.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dBpQYiS8yBVxwWE=")


def test_our_server_reproduces_rfc_7677() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram_credential("pencil", "SCRAM-SHA-256", salt=salt, iterations=4096)
    exchange = ScramServer(
        "SCRAM-SHA-256",
        {"user": UserCredentials({"SCRAM-SHA-256": credential})},
        secret=SECRET,
        nonce=lambda: RFC_SERVER_NONCE,
    )
    assert challenge(exchange.step(RFC_CLIENT_FIRST, NOW)) == RFC_SERVER_FIRST
    result = authenticated(exchange.step(RFC_CLIENT_FINAL, NOW))
    assert result.data == RFC_SERVER_FINAL and result.principal == Principal("user")
