"""Unknown users look like real ones, and a password check never runs on the caller's
thread (issue 23, finding 3).

Before: an unknown user's SCRAM server-first said `i=4096` while real users had their own
count (8192 here), and PLAIN checked an unknown user with no key derivation at all while a
hash-only user cost ~10 ms of PBKDF2 on the event loop: both told an attacker who exists,
and the second let unauthenticated clients stall every heartbeat.
"""

from __future__ import annotations

import base64
from types import MappingProxyType

import pytest

from kgroups.coordinator.limits import FailureBudget
from kgroups.protocol.errors import ErrorCode
from kgroups.security.credentials import (
    UserCredentials,
    decoy,
    plain_mechanism,
    scram_credential,
    typical,
)
from kgroups.security.mechanisms import server_mechanisms
from kgroups.security.plain import INVALID, PlainServer
from kgroups.security.sasl import Authenticated, AuthenticationFailed, Challenge, Compute
from kgroups.security.scram import ScramServer
from kgroups.security.session import SaslConfig, Session

NOW = 1_700_000_000_000
SECRET = b"k" * 32


def hashed(password: str, iterations: int) -> UserCredentials:
    return UserCredentials(
        MappingProxyType(
            {m: scram_credential(password, m, iterations=iterations)
             for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        )
    )  # fmt: skip


USERS = MappingProxyType({"alice": hashed("a", 8192), "bob": hashed("b", 8192),
                          "odd": hashed("c", 4096)})  # fmt: skip


def server_first(user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    server = ScramServer(mechanism, USERS, secret=SECRET)
    first = server.step(f"n,,n={user},r=abc".encode(), NOW)
    assert isinstance(first, Challenge)
    return dict(part.split("=", 1) for part in first.data.decode().split(","))


def test_an_unknown_user_gets_the_iterations_and_salt_length_most_users_have() -> None:
    known, unknown = server_first("alice"), server_first("mallory")
    assert unknown["i"] == known["i"] == "8192"
    assert len(base64.b64decode(unknown["s"])) == len(base64.b64decode(known["s"]))
    assert server_first("mallory")["s"] == unknown["s"]  # stable across attempts
    assert typical(USERS, "SCRAM-SHA-512") == (8192, 16)
    assert typical({}, "SCRAM-SHA-512") == (4096, 16)


def test_plain_hands_every_check_to_the_caller_as_the_same_derivation() -> None:
    """Known, unknown, right or wrong: the step does no key derivation itself; it asks
    for one, of the same cost (iterations) for an unknown user as for most users."""
    for user, password, expected in (("alice", "a", True), ("alice", "x", False),
                                     ("mallory", "a", False)):  # fmt: skip
        step = PlainServer(USERS, secret=SECRET).step(f"\0{user}\0{password}".encode(), NOW)
        assert isinstance(step, Compute)
        if expected:
            assert isinstance(step.then(step.work()), Authenticated)
        else:
            with pytest.raises(AuthenticationFailed, match=INVALID):
                step.then(step.work())
    mechanism = plain_mechanism(USERS)
    assert decoy(USERS, mechanism, SECRET, "mallory").iterations == 8192


def test_a_session_answers_a_computed_step_only_when_finished() -> None:
    mechanisms = server_mechanisms(["PLAIN"], lambda: USERS, secret=SECRET)
    session = Session(SaslConfig(mechanisms))
    session.handshake("PLAIN", 1)
    pending = session.authenticate(b"\0alice\0a", NOW)
    assert pending.compute is not None and session.principal is None
    done = session.finish(pending.compute.work(), NOW)
    assert done.authenticated is not None and session.principal is not None
    refused = Session(SaslConfig(mechanisms))
    refused.handshake("PLAIN", 1)
    pending = refused.authenticate(b"\0mallory\0a", NOW)
    assert pending.compute is not None
    answer = refused.finish(pending.compute.work(), NOW)
    assert answer.close and answer.message == INVALID


def test_failed_attempts_from_one_address_wait_their_turn_and_successes_do_not() -> None:
    budget = FailureBudget(rate=1.0, burst=3)
    assert [budget.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert budget.take("a", 0.0) == pytest.approx(1.0)  # the fourth waits a second...
    assert budget.take("a", 0.0) == pytest.approx(2.0)  # ...the fifth two: queued, spread
    assert budget.take("a", 0.0) == pytest.approx(3.0)
    assert budget.take("a", 0.0) is None  # `burst` already wait: refused at once
    assert budget.take("b", 0.0) == 0.0  # another address is not affected
    for _ in range(10):  # a client that logs in every time never waits
        assert budget.take("c", 0.0) == 0.0
        budget.succeeded("c", 0.0)
    assert budget.take("a", 10.0) == 0.0  # refilled


def test_an_exchange_starts_once_however_many_steps_it_takes() -> None:
    """The server charges its failed-authentication budget when an exchange starts
    (`Session.starting`): SCRAM's second SaslAuthenticate is the same attempt."""
    mechanisms = server_mechanisms(["SCRAM-SHA-512"], lambda: USERS, secret=SECRET)
    session = Session(SaslConfig(mechanisms))
    assert not session.starting  # before the handshake
    session.handshake("SCRAM-SHA-512", 1)
    assert session.starting
    first = session.authenticate(b"n,,n=alice,r=abc", NOW)
    assert first.error is ErrorCode.none and not session.starting
    refused = session.authenticate(b"c=biws,r=abc-not-the-nonce,p=AAAA", NOW)
    assert refused.close and not session.starting
