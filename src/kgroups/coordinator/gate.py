"""The gate in front of the core: SASL authentication and per-request authorization.

Both are the connection's business, not the group coordinator's. A SaslHandshake or
SaslAuthenticate is answered here; a SaslAuthenticate first waits for its address's turn
(`FailureBudget`: failed attempts per address are rate-limited) and for what its mechanism
needs (an OAUTHBEARER key not fetched yet, a TokenReview), and a password's key
derivation runs on one thread off the event loop. A request the core would handle is
first checked against the authorizer: from its answer cache at once, or by asking it
while the connection waits (later requests of that connection wait behind it, in order).

An unexpected error in either wait answers and closes that one connection (logged within
its address's budget); it never leaves a client unanswered or stops the coordinator.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from kgroups.coordinator.authorizers import Authorizer
from kgroups.coordinator.connection import Connection
from kgroups.coordinator.core import GroupCoordinator
from kgroups.coordinator.core.msg_offsets import OffsetCommitRequest
from kgroups.coordinator.limits import FailureBudget, Limits
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.coordinator.security import Security
from kgroups.coordinator.wire.sasl import authenticate_frame, handshake_frame
from kgroups.protocol.apis import ApiKey
from kgroups.protocol.frames import MalformedFrame, Request, UnsupportedRequest, parse_request
from kgroups.security.actions import Action
from kgroups.security.sasl import Compute
from kgroups.security.session import AuthenticateAnswer
from kgroups.shown import LogBudget, shown, suppressed
from kgroups.tasks import Tasks

log = logging.getLogger("kgroups.coordinator")

NOTHING_DENIED: frozenset[Action] = frozenset()
REFUSAL_LOG_INTERVAL_S = 60.0
"""An authorization refusal is logged once per principal and kind of refusal in this time."""
TOO_MANY_FAILURES = (
    "Authentication failed: too many failed authentications from this address; try again later"
)
FAILED_AUTHENTICATION_DELAY_S = 0.1
"""Kafka's connection.failed.authentication.delay.ms: a refused client's connection closes
this long after its answer, slowing password guessing down."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """A decoded request on its way to the core (perhaps via the authorizer)."""

    conn: Connection
    api_key: int
    version: int
    correlation_id: int
    client_id: str
    body: Any
    received: float


class GateOwner(Protocol):
    """What the gate needs of the server it guards."""

    @property
    def coordinator(self) -> GroupCoordinator | None: ...

    def serving(self, conn: Connection) -> bool:
        """False once `conn` closed or the coordinator stops: nothing more is answered."""
        ...

    def now_ms(self) -> int: ...

    def loop_time(self) -> float: ...

    def handle_incoming(self, incoming: Incoming, denied: frozenset[Action]) -> None:
        """Hand an admitted request to the core, with the actions refused to it."""
        ...

    def log_crash(self, conn: Connection, message: str, exc: BaseException) -> None: ...


class Gate:
    """Authenticates connections and authorizes their requests for one server."""

    def __init__(
        self,
        owner: GateOwner,
        security: Security,
        authorizer: Authorizer | None,
        super_users: frozenset[str],
        limits: Limits,
        metrics: CoordinatorMetrics,
        tasks: Tasks,
    ) -> None:
        self._owner = owner
        self.security = security
        self.authorizer = authorizer
        self._super_users = super_users
        self._metrics = metrics
        self._tasks = tasks
        self._refusal_log = LogBudget(REFUSAL_LOG_INTERVAL_S)
        """Keyed by (principal, kinds of actions refused): names are not kept."""
        self._sasl_log = LogBudget(10.0, burst=20, max_keys=10_000)
        self._attempts = FailureBudget(limits.failed_authentications_per_s,
                                       limits.failed_authentications_burst)  # fmt: skip
        self._kdf = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgroups-kdf")
        """Password key derivations (PLAIN), one at a time, off the event loop."""

    def close(self) -> None:
        """Stop deriving keys: an authentication waiting on one is never answered."""
        self._kdf.shutdown(wait=False, cancel_futures=True)

    # -- authorization -------------------------------------------------------------------

    def authorize_and_handle(self, incoming: Incoming) -> None:
        """Hand `incoming` to the core with what it may not do: at once when the answer
        is known (or no authorizer is configured), after asking the authorizer if not."""
        conn, key, body = incoming.conn, incoming.api_key, incoming.body
        owner = self._owner
        if not owner.serving(conn):
            return
        coordinator = owner.coordinator
        assert coordinator is not None
        denied: frozenset[Action] = NOTHING_DENIED
        principal = conn.principal_text
        if self.authorizer is not None and principal not in self._super_users:
            actions = coordinator.needed(body)
            if actions:
                reset = isinstance(body, OffsetCommitRequest) and body.generation_id < 0
                known = self.authorizer.denied_now(principal, conn.client_host, key, actions,
                                                   reset)  # fmt: skip
                if known is None:  # ask, then handle: the connection waits, in order
                    work = self._authorize_then_handle(incoming, principal, actions, reset)
                    crashed = functools.partial(self._authorization_crashed, incoming, actions)
                    self._tasks.spawn("authorize", work, on_crash=crashed)
                    return
                denied = known
        owner.handle_incoming(incoming, denied)

    async def _authorize_then_handle(self, incoming: Incoming, principal: str,
                                     actions: frozenset[Action], reset: bool) -> None:  # fmt: skip
        authorizer, conn, owner = self.authorizer, incoming.conn, self._owner
        coordinator = owner.coordinator
        assert authorizer is not None
        assert coordinator is not None
        denied: frozenset[Action] = frozenset()
        asked: frozenset[Action] = frozenset()
        while actions - asked:
            # The state may have moved while we waited (a group or topic created): what
            # the request needs now is asked about too, since handlers allow whatever is
            # not refused.
            new = actions - asked
            denied |= await authorizer.denied(principal, conn.client_host, incoming.api_key,
                                              new, reset)  # fmt: skip
            if not owner.serving(conn):
                return
            asked |= new
            actions = asked | coordinator.needed(incoming.body)
        owner.handle_incoming(incoming, denied)

    def _authorization_crashed(self, incoming: Incoming, actions: frozenset[Action],
                               name: str, exc: BaseException) -> None:  # fmt: skip
        """An unexpected error while a request waited on its authorization: it is
        answered with every action it needed refused, and the connection is closed."""
        conn = incoming.conn
        self._owner.log_crash(conn, f"{name} crashed for {conn.peer}: refusing its request", exc)
        if self._owner.serving(conn):
            try:
                self._owner.handle_incoming(incoming, actions)
            finally:
                conn.close_after_answers(f"authorization failed: {exc!r}")

    def log_refusal(self, principal: str, peer: str, denied: frozenset[Action]) -> None:
        """Once per principal and kind of refusal (operation and resource type, not the
        names) per minute: a refused client retrying in a tight loop (kafka-python's
        FindCoordinator does), or asking about thousands of made-up group ids, must not
        flood the log nor fill memory. The names are shown shortened."""
        kinds = frozenset((int(a.operation), int(a.resource_type)) for a in denied)
        skipped = self._refusal_log.take((shown(principal), kinds), self._owner.loop_time())
        if skipped is None:
            return
        what = sorted(f"{a.operation.name} {a.resource_type.name}:{shown(a.name)}" for a in denied)
        log.info("%s (%s) refused %s%s", peer, shown(principal),
                 ", ".join(what[:5]) + (", ..." if len(what) > 5 else ""),
                 suppressed(skipped))  # fmt: skip

    # -- authentication ------------------------------------------------------------------

    def authenticate(self, conn: Connection, frame: bytes) -> None:
        """SaslHandshake and SaslAuthenticate. A SaslAuthenticate waits for its address's
        turn and for what its mechanism needs first; a password check runs on the
        key-derivation thread. The connection's later requests wait behind it, as
        behind any request."""
        try:
            request = parse_request(frame)
        except (MalformedFrame, UnsupportedRequest) as exc:
            conn.abort(f"bad SASL request: {exc}")
            return
        if request.api_key == ApiKey.SASL_AUTHENTICATE:
            # One token per exchange (SCRAM's second step is part of the same attempt).
            delay = (self._attempts.take(conn.client_host, self._owner.loop_time())
                     if conn.session.starting else 0.0)  # fmt: skip
            if delay is None:
                self._metrics.authenticated(False)
                answer = authenticate_frame(request.api_version, request.correlation_id,
                                            conn.session.refuse(TOO_MANY_FAILURES))  # fmt: skip
                self._send_sasl(conn, answer, True, TOO_MANY_FAILURES)
                return
            waiting = self.security.prepare(conn.session.authenticating_with,
                                            bytes(request.body.auth_bytes))  # fmt: skip
            if delay > 0 or waiting is not None:
                self._tasks.spawn(
                    "authenticate", self._authenticate_after(delay, waiting, conn, request),
                    on_crash=functools.partial(self._authentication_crashed, conn, request),
                )  # fmt: skip
                return
        self._answer_sasl(conn, request)

    def _authentication_crashed(self, conn: Connection, request: Request, name: str,
                                exc: BaseException) -> None:  # fmt: skip
        """An unexpected error while a SaslAuthenticate waited (a key fetch, a key
        derivation): that client is refused and its connection closed, not left waiting."""
        message = f"{name} crashed for {conn.peer}: refusing its authentication"
        self._owner.log_crash(conn, message, exc)
        if self._owner.serving(conn):
            self._answer_authenticate(conn, request, conn.session.refuse("internal error"))

    async def _authenticate_after(self, delay: float, waiting: Awaitable[None] | None,
                                  conn: Connection, request: Request) -> None:  # fmt: skip
        if delay > 0:
            self._metrics.authentication_delayed(delay)
            await asyncio.sleep(delay)
        if waiting is not None:
            await waiting
        if self._owner.serving(conn):
            self._answer_sasl(conn, request)

    def _answer_sasl(self, conn: Connection, request: Request) -> None:
        session, body = conn.session, request.body
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            hs = session.handshake(body.mechanism, request.api_version)
            answer = handshake_frame(request.api_version, request.correlation_id, hs)
            self._send_sasl(conn, answer, hs.close, f"SASL handshake refused ({hs.error.name})")
            return
        auth = session.authenticate(bytes(body.auth_bytes), self._owner.now_ms())
        if auth.compute is not None:
            self._tasks.spawn(
                "authenticate", self._compute_then_answer(conn, request, auth.compute),
                on_crash=functools.partial(self._authentication_crashed, conn, request),
            )  # fmt: skip
            return
        self._answer_authenticate(conn, request, auth)

    async def _compute_then_answer(self, conn: Connection, request: Request,
                                   compute: Compute) -> None:  # fmt: skip
        """A password's key derivation, on the one key-derivation thread: never on the
        event loop (hashlib releases the GIL), never more than one at a time."""
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._kdf, compute.work)
        if self._owner.serving(conn):
            answer = conn.session.finish(result, self._owner.now_ms())
            self._answer_authenticate(conn, request, answer)

    def _answer_authenticate(self, conn: Connection, request: Request,
                             auth: AuthenticateAnswer) -> None:  # fmt: skip
        session = conn.session
        answer = authenticate_frame(request.api_version, request.correlation_id, auth)
        if auth.authenticated is not None or auth.close:
            self._metrics.authenticated(auth.authenticated is not None)
        if auth.authenticated is not None:
            self._attempts.succeeded(conn.client_host, self._owner.loop_time())
            again = " again" if session.reauthentications else ""
            log.info("%s authenticated as %s (%s)%s", conn.peer, shown(auth.authenticated),
                     session.mechanism, again)  # fmt: skip
        self._send_sasl(conn, answer, auth.close, f"SASL authentication failed: {auth.message}")

    def _send_sasl(self, conn: Connection, answer: bytes, close: bool, why: str) -> None:
        if close:
            skipped = self._sasl_log.take(conn.client_host, self._owner.loop_time())
            if skipped is not None:
                log.warning("refused %s: %s%s", conn.peer, shown(why, 300), suppressed(skipped))
            conn.answer_and_close(answer, why, FAILED_AUTHENTICATION_DELAY_S)
        else:
            conn.complete(answer)
