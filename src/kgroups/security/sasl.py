"""The shape every server-side SASL mechanism has, whatever it checks.

Kafka's SaslAuthenticate carries one opaque token each way per round; a mechanism sees the
client's token and the time, and answers with one of: a `Challenge` (send these bytes and
expect another token), `Authenticated` (the principal, the last bytes to send, and how long
the credential itself stays valid), or raises `AuthenticationFailed` with a message the
client may see (never a secret, never which half of a user/password pair was wrong). A
mechanism whose check is slow (PLAIN's key derivation) answers `Compute` instead: the
caller runs the work off the event loop and finishes the step with its result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Principal:
    """Kafka's KafkaPrincipal: a type and a name, shown as `User:alice`."""

    name: str
    type: str = "User"

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal("ANONYMOUS")
"""Kafka's principal for a connection on a listener without authentication."""


@dataclass(frozen=True, slots=True)
class Challenge:
    """Send `data` to the client and wait for its next token."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The exchange succeeded: `data` is the last server message (may be empty)."""

    principal: Principal
    data: bytes = b""
    expires_ms: int | None = None
    """When the credential itself stops being valid (a token's `exp`), epoch ms; None for
    passwords. The session lasts no longer than this (KIP-368)."""


@dataclass(frozen=True, slots=True)
class Compute:
    """Work too slow for the event loop (a password's key derivation): the caller runs
    `work()` elsewhere (a thread, with bounded concurrency), then hands its result to
    `then`, which answers as `step` would (a Challenge, Authenticated, or raises
    AuthenticationFailed)."""

    work: Callable[[], object]
    then: Callable[[object], Challenge | Authenticated]


class AuthenticationFailed(Exception):
    """The client failed to authenticate; str(exc) is what the client is told."""


class ServerMechanism(Protocol):
    """One authentication exchange on one connection (a new instance for every
    (re-)authentication)."""

    name: str

    def step(self, token: bytes, now_ms: int) -> Challenge | Authenticated | Compute:
        """Take the client's next token. Raises AuthenticationFailed."""
        ...


MechanismFactory = Callable[[], ServerMechanism]


def step_now(mechanism: ServerMechanism, token: bytes, now_ms: int) -> Challenge | Authenticated:
    """`mechanism.step`, with any `Compute` work done at once, in this thread: for callers
    with no event loop to keep free (tests, a one-shot check)."""
    step = mechanism.step(token, now_ms)
    if isinstance(step, Compute):
        return step.then(step.work())
    return step
