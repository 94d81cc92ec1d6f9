"""A connection's authentication, step by step (kgroups.security.session): what may be sent
before authenticating, failures that close, KIP-368 session lifetimes and re-authentication.
The mechanism here is a stand-in whose answers the test picks; the real mechanisms have
their own tests (tests/unit/security)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kgroups.protocol.apis import ApiKey
from kgroups.protocol.errors import ErrorCode
from kgroups.security.sasl import (
    Authenticated,
    AuthenticationFailed,
    Challenge,
    Principal,
    ServerMechanism,
)
from kgroups.security.session import AuthState, SaslConfig, Session

ALICE = Principal("alice")


@dataclass
class Scripted:
    """Accepts b"alice" (one step, or two with b"hello" first), refuses anything else."""

    name: str = "TEST"
    expires_ms: int | None = None

    def step(self, token: bytes, now_ms: int) -> Challenge | Authenticated:
        if token == b"hello":
            return Challenge(b"who?")
        if token.startswith(b"alice") or token == b"bob":
            return Authenticated(Principal(token.decode()), b"ok", self.expires_ms)
        raise AuthenticationFailed("Authentication failed: no")


def session(max_reauth_ms: int = 0, expires_ms: int | None = None) -> Session:
    def factory() -> ServerMechanism:
        return Scripted(expires_ms=expires_ms)

    return Session(SaslConfig({"TEST": factory, "OTHER": factory}, max_reauth_ms))


def authenticated(s: Session, now_ms: int = 0) -> None:
    assert s.handshake("TEST", 1).error is ErrorCode.none
    assert s.authenticate(b"alice", now_ms).error is ErrorCode.none


@pytest.mark.parametrize("key", [ApiKey.METADATA, ApiKey.JOIN_GROUP, ApiKey.SASL_AUTHENTICATE])
def test_before_the_handshake_only_api_versions_and_the_handshake_are_served(key: int) -> None:
    s = session()
    assert s.admit(ApiKey.API_VERSIONS, 0) is None
    assert s.admit(ApiKey.SASL_HANDSHAKE, 0) is None
    reason = s.admit(key, 0)
    assert reason is not None and "during SASL handshake" in reason


def test_between_handshake_and_success_only_authenticate_is_served() -> None:
    s = session()
    s.handshake("TEST", 1)
    assert s.admit(ApiKey.SASL_AUTHENTICATE, 0) is None
    assert s.admit(ApiKey.HEARTBEAT, 0) is not None
    assert s.authenticate(b"hello", 0).data == b"who?"  # a challenge round
    assert s.admit(ApiKey.HEARTBEAT, 0) is not None
    answer = s.authenticate(b"alice", 0)
    assert (answer.error, answer.authenticated, answer.data) == (ErrorCode.none, ALICE, b"ok")
    assert s.admit(ApiKey.HEARTBEAT, 0) is None
    assert s.principal == ALICE and s.mechanism == "TEST"


def test_an_unknown_mechanism_is_refused_with_what_is_offered_and_closes() -> None:
    s = session()
    answer = s.handshake("GSSAPI", 1)
    assert answer.error is ErrorCode.unsupported_sasl_mechanism
    assert answer.mechanisms == ("TEST", "OTHER") and answer.close
    assert s.admit(ApiKey.SASL_HANDSHAKE, 0) is not None


def test_a_refused_credential_says_why_and_closes() -> None:
    s = session()
    s.handshake("TEST", 1)
    answer = s.authenticate(b"mallory", 0)
    assert answer.error is ErrorCode.sasl_authentication_failed
    assert answer.message == "Authentication failed: no" and answer.close
    assert s.state is AuthState.FAILED and s.principal is None
    assert s.admit(ApiKey.SASL_HANDSHAKE, 0) is not None


def test_without_sasl_the_connection_is_its_principal_and_a_handshake_is_illegal() -> None:
    s = Session(None, Principal("CN=svc,O=acme"))
    assert s.admit(ApiKey.JOIN_GROUP, 0) is None
    assert str(s.principal) == "User:CN=svc,O=acme"
    assert s.handshake("PLAIN", 1).error is ErrorCode.illegal_sasl_state
    assert s.authenticate(b"x", 0).error is ErrorCode.illegal_sasl_state


def test_the_session_lasts_the_shorter_of_max_reauth_and_the_credential() -> None:
    s = session(max_reauth_ms=10_000, expires_ms=4_000)
    s.handshake("TEST", 1)
    assert s.authenticate(b"alice", 1_000).session_lifetime_ms == 3_000
    s = session(max_reauth_ms=10_000)
    s.handshake("TEST", 1)
    assert s.authenticate(b"alice", 1_000).session_lifetime_ms == 10_000
    s = session()
    s.handshake("TEST", 1)
    assert s.authenticate(b"alice", 1_000).session_lifetime_ms == 0  # unbounded
    assert s.admit(ApiKey.HEARTBEAT, 10**12) is None


def test_an_expired_credential_is_refused() -> None:
    s = session(expires_ms=500)
    s.handshake("TEST", 1)
    assert s.authenticate(b"alice", 500).error is ErrorCode.sasl_authentication_failed


def test_after_the_session_expires_only_a_reauthentication_is_served() -> None:
    s = session(max_reauth_ms=1_000)
    authenticated(s, now_ms=0)
    assert s.admit(ApiKey.HEARTBEAT, 999) is None
    reason = s.admit(ApiKey.HEARTBEAT, 1_000)
    assert reason is not None and "expired" in reason
    assert s.admit(ApiKey.SASL_HANDSHAKE, 1_000) is None
    assert s.handshake("TEST", 1).error is ErrorCode.none
    answer = s.authenticate(b"alice", 1_500)
    assert answer.error is ErrorCode.none and answer.session_lifetime_ms == 1_000
    assert s.admit(ApiKey.HEARTBEAT, 2_000) is None and s.reauthentications == 1


def test_requests_flow_while_a_reauthentication_is_in_progress() -> None:
    s = session(max_reauth_ms=1_000)
    authenticated(s)
    s.handshake("TEST", 1)
    assert s.reauthenticating
    assert s.admit(ApiKey.HEARTBEAT, 500) is None


def test_a_reauthentication_cannot_change_the_principal() -> None:
    s = session(max_reauth_ms=1_000)
    authenticated(s)
    s.handshake("TEST", 1)
    answer = s.authenticate(b"bob", 100)
    assert answer.error is ErrorCode.sasl_authentication_failed and answer.close
    assert answer.message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )


def test_a_reauthentication_cannot_change_the_mechanism() -> None:
    s = session(max_reauth_ms=1_000)
    authenticated(s)
    assert s.handshake("OTHER", 1).error is ErrorCode.none  # Kafka fails the next step
    answer = s.authenticate(b"alice", 100)
    assert answer.error is ErrorCode.sasl_authentication_failed and answer.close
    assert "mechanism" in (answer.message or "")


def test_a_second_authenticate_after_success_is_illegal_but_harmless() -> None:
    s = session()
    authenticated(s)
    answer = s.authenticate(b"alice", 0)
    assert answer.error is ErrorCode.illegal_sasl_state and not answer.close
    assert s.principal == ALICE


def test_without_a_session_limit_a_second_handshake_is_illegal_but_harmless() -> None:
    s = session()  # no max_reauth, a password: the session never expires
    authenticated(s)
    answer = s.handshake("TEST", 1)
    assert answer.error is ErrorCode.illegal_sasl_state and not answer.close
    assert s.admit(ApiKey.HEARTBEAT, 10**12) is None and s.principal == ALICE
