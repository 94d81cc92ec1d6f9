"""SASL PLAIN (kgroups.security.plain) against kafka-python's PLAIN client and our own.

kafka-python sends `username NUL username NUL password` (an authzid equal to the user),
so its logins also exercise the authorization-id rule.
"""

from __future__ import annotations

import contextlib

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain

from kgroups.security.credentials import UserCredentials, scram_credential
from kgroups.security.plain import INVALID, OTHER_AUTHZID, PlainServer
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Principal, step_now
from kgroups.security.sasl_client import PlainClient

NOW = 1_700_000_000_000
CREDENTIALS = {
    "alice": UserCredentials.from_password("alice-pw"),
    # Hashes only: PLAIN derives the StoredKey from the offered password and compares.
    "bob": UserCredentials({"SCRAM-SHA-512": scram_credential("bob-pw", "SCRAM-SHA-512")}),
    "carol": UserCredentials(
        {"SCRAM-SHA-256": scram_credential("carol-pw", "SCRAM-SHA-256", iterations=8192)}
    ),
}


def kafka_python_login(user: str, password: str) -> Authenticated:
    client = SaslMechanismPlain(sasl_plain_username=user, sasl_plain_password=password)
    result = step_now(PlainServer(CREDENTIALS), client.auth_bytes(), NOW)
    client.receive(result.data)
    assert client.is_done() and client.is_authenticated()
    return result


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "alice-pw"), ("bob", "bob-pw"), ("carol", "carol-pw")]
)
def test_kafka_python_logs_in(user: str, password: str) -> None:
    result = kafka_python_login(user, password)
    assert result.principal == Principal(user)
    assert result.data == b"" and result.expires_ms is None


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong"), ("bob", "alice-pw"), ("nobody", "alice-pw"), ("alice", "alice-pw ")],
)
def test_a_wrong_password_and_an_unknown_user_get_the_same_message(
    user: str, password: str
) -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        kafka_python_login(user, password)
    assert str(refused.value) == INVALID == "Authentication failed: Invalid username or password"


def test_our_client_logs_in() -> None:
    client = PlainClient("alice", "alice-pw")
    assert client.first() == b"\0alice\0alice-pw"
    result = step_now(PlainServer(CREDENTIALS), client.first(), NOW)
    assert isinstance(result, Authenticated)
    assert client.step(result.data) is None


def test_our_client_refuses_data_from_the_server() -> None:
    with pytest.raises(AuthenticationFailed, match="unexpected data"):
        PlainClient("alice", "alice-pw").step(b"surprise")


def test_an_authorization_id_must_be_the_user() -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        step_now(PlainServer(CREDENTIALS), b"bob\0alice\0alice-pw", NOW)
    assert str(refused.value) == OTHER_AUTHZID
    assert "different from username" in OTHER_AUTHZID


def test_the_authorization_id_is_checked_after_the_password() -> None:
    """As in Kafka: someone without the password learns nothing from the authzid rule."""
    with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
        step_now(PlainServer(CREDENTIALS), b"bob\0alice\0wrong", NOW)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0\0alice-pw", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"alice-pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"\0alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0alice\0alice-pw\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0alice\0\xff\xfe", "Invalid SASL/PLAIN response: not UTF-8"),
    ],
)
def test_malformed_messages_are_refused_with_a_reason(token: bytes, message: str) -> None:
    with pytest.raises(AuthenticationFailed) as refused:
        step_now(PlainServer(CREDENTIALS), token, NOW)
    assert str(refused.value) == message


def test_a_non_ascii_password_is_utf8() -> None:
    credentials = {"zoë": UserCredentials.from_password("pässwörd")}
    token = "\0zoë\0pässwörd".encode()
    assert step_now(PlainServer(credentials), token, NOW).principal == Principal("zoë")


@pytest.mark.parametrize("first", [b"\0alice\0alice-pw", b"\0alice\0wrong"])
def test_nothing_is_accepted_after_the_exchange(first: bytes) -> None:
    server = PlainServer(CREDENTIALS)
    with contextlib.suppress(AuthenticationFailed):
        step_now(server, first, NOW)
    with pytest.raises(AuthenticationFailed, match="exchange is over"):
        step_now(server, b"\0alice\0alice-pw", NOW)
