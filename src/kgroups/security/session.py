"""One connection's authentication, the way a Kafka broker's SASL authenticator runs it.

A connection on a SASL listener may send only ApiVersions and SaslHandshake until it has
authenticated; anything else closes it (Kafka: "Unexpected Kafka request of type X during
SASL handshake"), because answering would serve an unknown client. SaslHandshake names a
mechanism; SaslAuthenticate rounds carry that mechanism's tokens until it says who the
client is, or refuses it: then the client is told SASL_AUTHENTICATION_FAILED with a message
and the connection is closed (a client retries on a new one).

KIP-368: the last SaslAuthenticate answer says how long the session lasts: the shorter
of `max_reauth_ms` (connections.max.reauth.ms) and the credential's own lifetime (a
token's expiry); 0 when neither bounds it. Before then the client re-authenticates on the
same connection (SaslHandshake again, same mechanism, same principal), its other requests
flowing meanwhile; a request other than SaslHandshake after the session has expired closes
the connection, so a revoked token or password stops working within one session.

Where kgroups differs from a Kafka broker, it tells the client more, never less: a
re-authentication that changes mechanism gets SASL_AUTHENTICATION_FAILED saying so (Kafka
closes without a word), and requests may keep flowing during a re-authentication (the
server answers in order per connection, so nothing is ambiguous).

States and their legal predecessors are one table, checked on every move.

HANDSHAKE
    Waiting for SaslHandshake (the first, or a re-authentication's).
AUTHENTICATE
    A mechanism is chosen; SaslAuthenticate rounds go to it.
AUTHENTICATED
    A principal is known; requests are served until `expires_ms`.
FAILED
    Refused: the answer is being sent, then the connection closes.

Sans-IO: the caller passes the time and does the sending and closing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from kgroups.protocol.apis import ApiKey, api_name
from kgroups.protocol.errors import ErrorCode
from kgroups.security.sasl import (
    ANONYMOUS,
    Authenticated,
    AuthenticationFailed,
    Challenge,
    Compute,
    MechanismFactory,
    Principal,
    ServerMechanism,
)


class AuthState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


VALID_PREVIOUS: Mapping[AuthState, frozenset[AuthState]] = {
    AuthState.HANDSHAKE: frozenset(),  # only where a connection starts
    AuthState.AUTHENTICATE: frozenset({AuthState.HANDSHAKE, AuthState.AUTHENTICATED}),
    AuthState.AUTHENTICATED: frozenset({AuthState.AUTHENTICATE}),
    AuthState.FAILED: frozenset({AuthState.HANDSHAKE, AuthState.AUTHENTICATE}),
}


class IllegalAuthTransition(RuntimeError):
    """A bug: the authenticator tried a move its table does not allow."""


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """A listener's SASL: the mechanisms offered (name -> a fresh exchange) and the
    longest a session may last without re-authenticating (0: only a credential's own
    expiry bounds it)."""

    mechanisms: Mapping[str, MechanismFactory]
    max_reauth_ms: int = 0


@dataclass(frozen=True, slots=True)
class HandshakeAnswer:
    error: ErrorCode
    mechanisms: tuple[str, ...]
    close: bool = False
    """Close the connection once this answer is sent."""


@dataclass(frozen=True, slots=True)
class AuthenticateAnswer:
    error: ErrorCode
    message: str | None = None
    data: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False
    authenticated: Principal | None = None
    """Set when this answer completes an (re-)authentication."""
    compute: Compute | None = None
    """Not an answer yet: run `compute.work()` off the event loop, then `Session.finish`."""


class Session:
    """The authentication of one connection. `sasl` None: the listener has no SASL and
    the connection is `principal` from the start (ANONYMOUS, or its TLS certificate's)."""

    def __init__(self, sasl: SaslConfig | None, principal: Principal = ANONYMOUS) -> None:
        self._sasl = sasl
        self._mechanism: ServerMechanism | None = None
        self._mechanism_name: str | None = None
        self.principal: Principal | None = None if sasl else principal
        self.expires_ms: int | None = None
        self.state = AuthState.HANDSHAKE if sasl else AuthState.AUTHENTICATED
        self.reauthentications = 0
        self._computing: Compute | None = None
        self._steps = 0
        """SaslAuthenticate requests since the handshake that began this exchange."""

    @property
    def mechanism(self) -> str | None:
        """The SASL mechanism the client authenticated with (None without SASL)."""
        return self._mechanism_name if self.principal is not None else None

    def _move(self, target: AuthState) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalAuthTransition(f"{self.state.value} -> {target.value}")
        self.state = target

    @property
    def starting(self) -> bool:
        """The next SaslAuthenticate begins an exchange (a SCRAM exchange takes two: a
        budget of attempts counts exchanges, not their steps)."""
        return self.state is AuthState.AUTHENTICATE and self._steps == 0

    @property
    def authenticating_with(self) -> str | None:
        """The mechanism of the exchange in progress (None between exchanges)."""
        if self.state is not AuthState.AUTHENTICATE or self._mechanism is None:
            return None
        return self._mechanism_name

    @property
    def reauthenticating(self) -> bool:
        return self.principal is not None and self.state is AuthState.AUTHENTICATE

    def admit(self, api_key: int, now_ms: int) -> str | None:
        """Why a request with this key closes the connection now; None to serve it."""
        if api_key == ApiKey.API_VERSIONS:
            return None
        if self.state is AuthState.FAILED:
            return "authentication failed"
        if self.principal is None:  # first authentication in progress
            handshaking = self.state is AuthState.HANDSHAKE
            if api_key != (ApiKey.SASL_HANDSHAKE if handshaking else ApiKey.SASL_AUTHENTICATE):
                return f"Unexpected Kafka request of type {api_name(api_key)} during SASL handshake"
            return None
        if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            return None  # a re-authentication (the session may have just expired)
        if self.expires_ms is not None and now_ms >= self.expires_ms:
            return f"the SASL session of {self.principal} expired; it did not re-authenticate"
        return None

    def handshake(self, mechanism: str, version: int) -> HandshakeAnswer:
        offered = tuple(self._sasl.mechanisms) if self._sasl else ()
        if self._sasl is None:
            return HandshakeAnswer(ErrorCode.illegal_sasl_state, ())
        if self.state is AuthState.AUTHENTICATED and (self.expires_ms is None or version < 1):
            # Kafka: a handshake on an authenticated connection whose session never
            # expires is not a re-authentication, just illegal (the connection stays).
            return HandshakeAnswer(ErrorCode.illegal_sasl_state, ())
        if self.state is not AuthState.HANDSHAKE and self.state is not AuthState.AUTHENTICATED:
            return HandshakeAnswer(ErrorCode.illegal_sasl_state, offered, close=True)
        factory = self._sasl.mechanisms.get(mechanism)
        reauth = self.principal is not None
        if factory is None or (reauth and mechanism != self._mechanism_name):
            # A re-authentication must keep its mechanism (Kafka answers the handshake,
            # then fails the authenticate); a first one offers what the listener has.
            if reauth:
                self._mechanism = None
                self._steps = 0
                self._move(AuthState.AUTHENTICATE)
                return HandshakeAnswer(ErrorCode.none, offered)
            self._move(AuthState.FAILED)
            return HandshakeAnswer(ErrorCode.unsupported_sasl_mechanism, offered, close=True)
        self._mechanism = factory()
        self._mechanism_name = mechanism
        self._steps = 0
        self._move(AuthState.AUTHENTICATE)
        return HandshakeAnswer(ErrorCode.none, offered)

    def authenticate(self, token: bytes, now_ms: int) -> AuthenticateAnswer:
        if self.state is not AuthState.AUTHENTICATE:
            message = (
                "SaslAuthenticate request received after successful authentication"
                if self.principal is not None
                else "SaslAuthenticate request received before SaslHandshake"
            )
            return AuthenticateAnswer(ErrorCode.illegal_sasl_state, message,
                                      close=self.principal is None)  # fmt: skip
        self._steps += 1
        mechanism = self._mechanism
        if mechanism is None:  # a re-authentication that asked for another mechanism
            return self._fail("SASL mechanism cannot change during re-authentication")
        try:
            step = mechanism.step(token, now_ms)
        except AuthenticationFailed as exc:
            return self._fail(str(exc))
        if isinstance(step, Compute):
            self._computing = step
            return AuthenticateAnswer(ErrorCode.none, compute=step)
        return self._conclude(step, now_ms)

    def finish(self, result: object, now_ms: int) -> AuthenticateAnswer:
        """The answer to the SaslAuthenticate whose answer was `compute`, once the work
        is done (`result` is what `compute.work()` returned)."""
        computing, self._computing = self._computing, None
        if computing is None or self.state is not AuthState.AUTHENTICATE:
            raise IllegalAuthTransition("finish() without an authentication computing")
        try:
            step = computing.then(result)
        except AuthenticationFailed as exc:
            return self._fail(str(exc))
        return self._conclude(step, now_ms)

    def _conclude(self, step: Challenge | Authenticated, now_ms: int) -> AuthenticateAnswer:
        if not isinstance(step, Authenticated):
            return AuthenticateAnswer(ErrorCode.none, data=step.data)
        if self.principal is not None and step.principal != self.principal:
            old, new = self.principal, step.principal
            return self._fail(  # Kafka's words, to the character
                "Cannot change principals during re-authentication from "
                f"{old.type}.{old.name}: {new.type}.{new.name}"
            )
        if step.expires_ms is not None and step.expires_ms <= now_ms:
            return self._fail("Authentication failed: the credential has expired")
        if self.principal is not None:
            self.reauthentications += 1
        self.principal = step.principal
        self._move(AuthState.AUTHENTICATED)
        lifetime = self._lifetime(step.expires_ms, now_ms)
        self.expires_ms = now_ms + lifetime if lifetime else None
        return AuthenticateAnswer(ErrorCode.none, data=step.data, session_lifetime_ms=lifetime,
                                  authenticated=step.principal)  # fmt: skip

    def refuse(self, message: str) -> AuthenticateAnswer:
        """Fail the authentication in progress without asking its mechanism (the
        server's reason: too many failures from the client's address)."""
        if self.state is not AuthState.AUTHENTICATE:
            return AuthenticateAnswer(ErrorCode.illegal_sasl_state, message, close=True)
        return self._fail(message)

    def _lifetime(self, credential_expires_ms: int | None, now_ms: int) -> int:
        assert self._sasl is not None
        bounds = [b for b in (self._sasl.max_reauth_ms or None,) if b]
        if credential_expires_ms is not None:
            bounds.append(credential_expires_ms - now_ms)
        return max(1, min(bounds)) if bounds else 0

    def _fail(self, message: str) -> AuthenticateAnswer:
        self._mechanism = None
        if self.state is not AuthState.FAILED:
            self._move(AuthState.FAILED)
        return AuthenticateAnswer(ErrorCode.sasl_authentication_failed, message, close=True)
