"""The coordinator's asyncio edge: sockets, the clock, the ordered writer.

It is a thin adapter (aioquic's `asyncio/protocol.py` shape) around the sans-IO
`GroupCoordinator`:

* each connection (`connection.py`) reads size-prefixed frames, capping the size *before*
  buffering, and processes one request at a time, answering in order, as a Kafka broker
  does; SASL is answered here at the edge, authorization asked before the core handles a
  request;
* every core call returns `Effects`; they join one ordered pipeline: their records go to
  SQLite through a single writer thread (batched: a group commit per round trip), and
  their replies leave only once everything before them is durable. A reply with no
  records and nothing ahead of it leaves at once (the heartbeat fast path);
* one `loop.call_at` is re-armed to the core's earliest deadline after every call;
* time is `loop.time()`, offset once to epoch milliseconds at start, so the core sees
  wall-clock-like timestamps (offsets outlive restarts) and tests can fake the loop clock.

A frame we cannot decode closes that connection with a log line, and so does an API or
version we do not serve (as a Kafka broker closes the connection of a request "which is not
enabled": a bare error code would not have the shape that API's answers have, and clients
read ApiVersions to avoid sending one); a bug in a handler closes the connection that caused
it. None of these disturbs any other client. A failed write is different: the coordinator
stops (loudly), because replies could otherwise get ahead of durable state; restart
recovers from the store.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgroups.coordinator.authorizers import (
    AclFileAuthorizer,
    AuthorizationSettings,
    make_authorizer,
)
from kgroups.coordinator.connection import Connection, Listener
from kgroups.coordinator.core import (
    CoordinatorConfig,
    Effects,
    GroupCoordinator,
    HandlerFailed,
    Reply,
    RequestContext,
)
from kgroups.coordinator.core.msg_cluster import FetchResponse
from kgroups.coordinator.core.msg_group import HeartbeatRequest, HeartbeatResponse
from kgroups.coordinator.core.msg_offsets import OffsetCommitRequest
from kgroups.coordinator.core.records import Record
from kgroups.coordinator.limits import (
    ConnectionCounts,
    FailureBudget,
    Limits,
    RateLimiter,
)
from kgroups.coordinator.listeners import (
    ListenerSettings,
    SecurityProtocol,
    SecuritySettings,
)
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.coordinator.security import Security
from kgroups.coordinator.store import RecordStore, Store
from kgroups.coordinator.wire import api_versions_frame, decode, encode, refused_produce
from kgroups.coordinator.wire.sasl import authenticate_frame, handshake_frame
from kgroups.exposition import HttpEndpoints, metrics_route, probe_route
from kgroups.protocol.apis import ApiKey, api_name, metric_api_name
from kgroups.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    MalformedFrame,
    Request,
    UnsupportedRequest,
    encode_response,
    parse_request,
    peek_header,
)
from kgroups.security.actions import Action
from kgroups.security.sasl import ANONYMOUS, Compute
from kgroups.security.session import AuthenticateAnswer
from kgroups.shown import LogBudget, shown, suppressed
from kgroups.tasks import Tasks

log = logging.getLogger("kgroups.coordinator")

_HEAD = struct.Struct(">ii")
_NOTHING_DENIED: frozenset[Action] = frozenset()
_CACHEABLE = (HeartbeatResponse,)
"""Answers whose bytes depend only on their version and content (one API each): encoded
once per (version, content)."""
LISTEN_BACKLOG = 1024
"""Connections the kernel queues before they are accepted (Kafka's
socket.listen.backlog.size is 50): a burst of reconnecting members after a restart is
accepted without SYN retries that cost each of them a second or more."""
REFUSAL_LOG_INTERVAL_S = 60.0
"""An authorization refusal is logged once per principal and kind of refusal in this time."""
TOO_MANY_FAILURES = (
    "Authentication failed: too many failed authentications from this address; try again later"
)
FAILED_AUTHENTICATION_DELAY_S = 0.1
"""Kafka's connection.failed.authentication.delay.ms: a refused client's connection closes
this long after its answer, slowing password guessing down."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path(".kgroups")
    advertised_host: str | None = None
    advertised_port: int | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    synchronous: str = "FULL"
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    metrics: tuple[str, int] | None = None
    """Serve Prometheus metrics at http://HOST:PORT/metrics; None: no metrics endpoint."""
    listeners: tuple[ListenerSettings, ...] = ()
    """Where to listen and how each listener is secured; empty: one PLAINTEXT listener on
    host:port (advertised as advertised_host:advertised_port)."""
    security: SecuritySettings = field(default_factory=SecuritySettings)
    reload_interval_s: float = 10.0
    """How often certificate, credentials and ACL files are checked for changes."""
    authorization: AuthorizationSettings | None = None
    """Who may do what (None: everyone everything, as a broker without an authorizer)."""
    limits: Limits = field(default_factory=Limits)

    def all_listeners(self) -> tuple[ListenerSettings, ...]:
        if self.listeners:
            return self.listeners
        return (ListenerSettings(SecurityProtocol.PLAINTEXT, self.host, self.port,
                                 self.advertised_host, self.advertised_port),)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Incoming:
    """A decoded request on its way to the core (perhaps via the authorizer)."""

    conn: Connection
    api_key: int
    version: int
    correlation_id: int
    client_id: str
    body: Any
    received: float


@dataclass(slots=True)
class _Pending:
    conn: Connection
    api_key: int
    api_version: int
    correlation_id: int
    received: float
    """loop.time() when the request arrived (request latency)."""
    group_id: str | None = None
    """The group an OffsetCommit is for (commits per group)."""


class CoordinatorServer:
    """Runs a `GroupCoordinator` on a TCP listener with a SQLite store."""

    def __init__(
        self,
        settings: ServerSettings,
        *,
        store: RecordStore | None = None,
        wall_clock: Callable[[], float] = time.time,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        """`store`, `wall_clock` and `new_member_id` are for deterministic simulations
        (an in-memory store, the event loop's virtual time, reproducible ids)."""
        self.settings = settings
        self._wall_clock = wall_clock
        self._new_member_id = new_member_id
        self.connections: set[Connection] = set()
        self.coordinator: GroupCoordinator | None = None
        self.port = settings.port
        self.security = Security(settings.security, settings.all_listeners())
        self.listeners = [
            Listener(ls, self.security.for_listener(ls)) for ls in settings.all_listeners()
        ]
        self._tasks = Tasks("coordinator", on_crash=self._crashed)
        """Every background task: the file reloader, the idle-connection sweeper, the
        OAUTHBEARER issuer's keys (each a bug if it crashes: the server stops), and the
        authentications and authorizations a connection waits on (a crash answers and
        closes that connection)."""
        self.authorizer = make_authorizer(settings.authorization)
        self._super_users = frozenset(
            settings.authorization.super_users if settings.authorization is not None else ()
        )
        self._refusal_log = LogBudget(REFUSAL_LOG_INTERVAL_S)
        """Keyed by (principal, kinds of actions refused): names are not kept."""
        settings.limits.validate()
        self.counts = ConnectionCounts(settings.limits)
        self.buffered = 0
        """Bytes of requests received and not handled yet, across connections."""
        self._memory_paused: set[Connection] = set()
        self._rejection_log = LogBudget(60.0, max_keys=10_000)
        self._closing_log = LogBudget(10.0, burst=20, max_keys=10_000)
        self._sasl_log = LogBudget(10.0, burst=20, max_keys=10_000)
        limits = settings.limits
        self._rates = {
            key: RateLimiter(rate)
            for key, rate in ((ApiKey.JOIN_GROUP, limits.join_rate),
                              (ApiKey.OFFSET_COMMIT, limits.commit_rate))
            if rate > 0
        }  # fmt: skip
        self._store: RecordStore = store or Store(
            settings.data_dir, synchronous=settings.synchronous
        )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgroups-store")
        self._kdf = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgroups-kdf")
        """Password key derivations (PLAIN), one at a time, off the event loop."""
        self._attempts = FailureBudget(limits.failed_authentications_per_s,
                                       limits.failed_authentications_burst)  # fmt: skip
        self._loop: asyncio.AbstractEventLoop | None = None
        self._epoch_offset_ms = 0
        self._refs = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._queue: list[Effects] = []
        self._writing = False
        self._timer: asyncio.TimerHandle | None = None
        self._rearm_scheduled = False
        self._debug = log.isEnabledFor(logging.DEBUG)
        self._timer_deadline: int | None = None
        self._stopped = asyncio.Event()
        self._payloads: dict[tuple[int, object], bytes] = {}
        self._heartbeats: dict[tuple[int, int], bytes] = {}
        """Heartbeat answers by (version, error code), encoded once."""
        self.failure: BaseException | None = None
        self._halting: asyncio.Task[None] | None = None
        self.metrics = CoordinatorMetrics(
            lambda: self.coordinator, lambda: len(self.connections), wall_clock,
            lambda: self.buffered,
        )  # fmt: skip
        self._endpoints = HttpEndpoints(
            {
                "/metrics": metrics_route(self.metrics.registry),
                "/healthz": probe_route(self.unhealthy),
                "/readyz": probe_route(self.unready),
            }
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self, *, listen: bool = True) -> None:
        """Replay the store and serve; without `listen`, connections come only through
        `accept` (in-memory transports in simulations)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._epoch_offset_ms = int(self._wall_clock() * 1000) - int(loop.time() * 1000)
        if self.settings.metrics is not None:
            # Up before the store is read: /healthz answers during a long replay, and
            # /readyz says why the coordinator is not serving yet.
            await self._endpoints.serve(*self.settings.metrics)
        try:
            await self._replay_and_listen(loop, listen)
        except BaseException:
            await self._endpoints.close()
            raise

    async def _replay_and_listen(self, loop: asyncio.AbstractEventLoop, listen: bool) -> None:
        await loop.run_in_executor(self._executor, self._store.open)
        cluster_id = await loop.run_in_executor(self._executor, self._store.cluster_id)
        records: list[Record] = await loop.run_in_executor(
            self._executor, lambda: list(self._store.load())
        )
        if listen:
            for listener in self.listeners:
                await self._listen(loop, listener)
            self.port = self.listeners[0].port
            if self.security.watches_files or isinstance(self.authorizer, AclFileAuthorizer):
                self._tasks.spawn("file-reloader", self._reload_forever())
            self._tasks.spawn("idle-sweeper", self._close_idle_forever())
            if self.authorizer is not None:
                self.authorizer.start()
            bearer = self.security.bearer
            if bearer is not None and not bearer.from_file:
                self._tasks.spawn("issuer-keys", bearer.run())
        node = self.listeners[0].node()
        coordinator = GroupCoordinator(
            self.settings.coordinator, node=node, cluster_id=cluster_id,
            new_member_id=self._new_member_id, nodes={ls.name: ls.node() for ls in self.listeners},
        )  # fmt: skip
        for record in records:
            coordinator.replay(record)
        self.coordinator = coordinator
        groups = len(coordinator.groups)
        where = ", ".join(
            f"{ls.name} {ls.settings.host}:{ls.port} (advertised {ls.node().host}:{ls.node().port})"
            for ls in self.listeners
        )
        log.info("coordinator listening on %s, data dir %s: replayed %d records, %d groups",
                 where, self.settings.data_dir, len(records), groups)  # fmt: skip
        self._submit(coordinator.resume(now_ms=self.now_ms()))
        self._rearm()

    async def _listen(self, loop: asyncio.AbstractEventLoop, listener: Listener) -> None:
        s = listener.settings
        tls = listener.security.tls
        listener.server = await loop.create_server(
            lambda: Connection(self, listener), s.host, s.port, backlog=LISTEN_BACKLOG,
            ssl=tls.outer if tls is not None else None,
        )  # fmt: skip
        listener.port = listener.server.sockets[0].getsockname()[1]

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_interval_s)
            self.security.reload()
            if isinstance(self.authorizer, AclFileAuthorizer):
                self.authorizer.reload()

    async def _close_idle_forever(self) -> None:
        idle_s = self.settings.limits.connections_max_idle_ms / 1000
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 10.0))
            self.close_idle()

    def close_idle(self) -> None:
        """Close connections idle past connections.max.idle.ms (Kafka's rule)."""
        assert self._loop is not None
        cutoff = self._loop.time() - self.settings.limits.connections_max_idle_ms / 1000
        for conn in list(self.connections):
            if conn.idle and conn.last_active < cutoff:
                log.debug("closing idle connection from %s", conn.peer)
                self.metrics.idle_closed()
                conn.close_after_answers("idle", quiet=True)

    def reject(self, address: str, reason: str) -> None:
        """A connection over a connection limit: count it, log it once a minute."""
        self.metrics.rejected(reason)
        assert self._loop is not None
        skipped = self._rejection_log.take(address, self._loop.time())
        if skipped is not None:
            log.warning("refused a connection from %s: %s%s", address, {
                "total": f"{self.counts.total} connections open (max connections)",
                "per_address": f"{self.counts.by_address[address]} connections from it "
                               "(max connections per address)",
            }[reason], suppressed(skipped))  # fmt: skip

    def log_closing(self, conn: Connection, reason: str) -> None:
        """Why a connection is closed, at most 20 lines per client address per 10 s (a
        client opening connection after connection to send bad frames must not flood
        the log), the reason shortened (it may quote what the client sent)."""
        now = self._loop.time() if self._loop is not None else 0.0
        skipped = self._closing_log.take(conn.client_host or conn.peer, now)
        if skipped is not None:
            log.warning("closing connection from %s: %s%s", conn.peer, shown(reason, 300),
                        suppressed(skipped))  # fmt: skip

    def account(self, conn: Connection, held: int) -> None:
        """`conn` now holds `held` buffered request bytes. Over the limit, the connection
        adding bytes stops being read; under half of it, every paused one reads again."""
        self.buffered += held - conn.held
        conn.held = held
        limit = self.settings.limits.max_buffered_bytes
        if self.buffered > limit and held > 0 and not conn.memory_paused and not conn.closed:
            conn.memory_paused = True
            self._memory_paused.add(conn)
            self.metrics.paused_for_memory()
            conn.set_reading()
        elif self.buffered <= limit // 2 and self._memory_paused:
            paused, self._memory_paused = self._memory_paused, set()
            for c in paused:
                c.memory_paused = False
                c.set_reading()

    @property
    def ports(self) -> dict[str, int]:
        """The bound port of each listener, by name (PLAINTEXT, SASL_SSL...)."""
        return {listener.name: listener.port for listener in self.listeners}

    def accept(self, transport: asyncio.Transport) -> Connection:
        """Serve a connection that did not come through the listener."""
        if self.failure is not None or self.stopped:
            raise ConnectionRefusedError("the coordinator is not serving")
        conn = Connection(self, self.listeners[0])
        conn.connection_made(transport)
        return conn

    async def serve_forever(self) -> None:
        await self._stopped.wait()
        if self.failure is not None:
            raise self.failure

    @property
    def stopped(self) -> bool:
        """True once `stop` finished or the server failed."""
        return self._stopped.is_set()

    async def stop(self) -> None:
        """Stop accepting, close every connection, finish pending writes, close the store."""
        self._close_listeners()
        self._cancel_background()
        await self._endpoints.close()
        if self.authorizer is not None:
            await self.authorizer.close()
        if self.security.bearer is not None:
            await self.security.bearer.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self._timer is not None:
            self._timer.cancel()
        while self._writing:
            await asyncio.sleep(0.005)
        if self._queue and self.failure is None:
            records = [r for e in self._queue for r in e.records]
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._store.append, records
            )
            self._queue.clear()
        for listener in self.listeners:
            if listener.server is not None:
                await listener.server.wait_closed()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._store.close)
        self._executor.shutdown(wait=True)
        self._kdf.shutdown(wait=False, cancel_futures=True)
        await self._tasks.close()
        self._stopped.set()

    def _cancel_background(self) -> None:
        """Every background task but the one writing what is queued after a failure."""
        self._tasks.cancel(keep=self._halting)

    def _crashed(self, name: str, exc: BaseException) -> None:
        """A background task the server depends on crashed: a bug, so the server stops
        as after a bug in a handler (what is queued is written first)."""
        self._halt_after(exc, f"a bug in {name}", exc)

    def _close_listeners(self) -> None:
        for listener in self.listeners:
            if listener.server is not None:
                listener.server.close()

    @property
    def metrics_port(self) -> int:
        return self._endpoints.port

    def unhealthy(self) -> str | None:
        """Why the coordinator is not alive (a failed store write, a bug): None if it is."""
        if self.failure is not None:
            return f"coordinator stopped: {self.failure!r}"
        return None

    def unready(self) -> str | None:
        """Why clients cannot be served yet: the store is being replayed, or it failed."""
        if self.failure is not None:
            return f"coordinator stopped: {self.failure!r}"
        if self.coordinator is None:
            return "replaying the store"
        if any(ls.server is None or not ls.server.is_serving() for ls in self.listeners):
            return "not listening"
        return None

    def now_ms(self) -> int:
        assert self._loop is not None
        return int(self._loop.time() * 1000) + self._epoch_offset_ms

    # -- requests ------------------------------------------------------------------------

    def dispatch(self, conn: Connection, frame: bytes) -> None:
        """One request frame of `conn`: answered now, or once what it waits for is done.
        The common path (a request that needs no authorization question and no throttle,
        a heartbeat above all) is written for speed: nothing is built or looked up twice."""
        if self.failure is not None:
            return  # stopping: the state behind any answer is not trusted
        try:
            header = peek_header(frame)
        except MalformedFrame as exc:
            conn.abort(str(exc))
            return
        key, version, correlation_id = header
        loop = self._loop
        assert loop is not None
        received = loop.time()
        now_ms = int(received * 1000) + self._epoch_offset_ms
        refused = conn.session.admit(key, now_ms)
        if refused is not None:
            conn.abort(refused)
            return
        if key == ApiKey.API_VERSIONS:
            conn.complete(api_versions_frame(correlation_id, version))
            return
        if key == ApiKey.SASL_HANDSHAKE or key == ApiKey.SASL_AUTHENTICATE:  # noqa: PLR1714
            self._authenticate(conn, frame)
            return
        try:
            request = parse_request(frame, header)
            if key == ApiKey.PRODUCE:
                refusal = refused_produce(version, correlation_id, request.body)
                if refusal is None:
                    conn.abort("Produce with acks=0: kgroups stores no records")
                else:
                    conn.complete(refusal)
                return
            body = decode(key, version, request.body)
        except UnsupportedRequest:
            conn.close_after_answers(f"{api_name(key)} v{version} is not served (see ApiVersions)")
            return
        except MalformedFrame as exc:
            conn.abort(str(exc))
            return
        limiter = self._rates.get(key)
        if limiter is not None:
            principal = conn.session.principal
            who = str(principal) if principal != ANONYMOUS else f"ANONYMOUS{conn.client_host}"
            wait = limiter.delay(who, received)
            if wait > 0:  # over the principal's rate: this connection waits its turn
                incoming = _Incoming(conn, key, version, correlation_id, request.client_id,
                                     body, received)  # fmt: skip
                self.metrics.throttled(metric_api_name(key), wait)
                conn.call_later(wait, lambda: self._authorize_and_handle(incoming))
                return
        if self.authorizer is None:
            if type(body) is HeartbeatRequest and not (self._queue or self._writing or self._debug):
                self._heartbeat(conn, version, correlation_id, body, received, now_ms)
                return
            self._handle(conn, key, version, correlation_id, request.client_id, body, received,
                         _NOTHING_DENIED, now_ms)  # fmt: skip
            return
        self._authorize_and_handle(
            _Incoming(conn, key, version, correlation_id, request.client_id, body, received)
        )

    def _authorize_and_handle(self, incoming: _Incoming) -> None:
        conn, key, body = incoming.conn, incoming.api_key, incoming.body
        if conn.closed or self.failure is not None or self.stopped:
            return
        coordinator = self.coordinator
        assert coordinator is not None
        assert self._loop is not None
        denied: frozenset[Action] = _NOTHING_DENIED
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
        self._handle_incoming(incoming, denied)

    async def _authorize_then_handle(self, incoming: _Incoming, principal: str,
                                     actions: frozenset[Action], reset: bool) -> None:  # fmt: skip
        authorizer, conn, coordinator = self.authorizer, incoming.conn, self.coordinator
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
            if conn.closed or self.failure is not None or self.stopped:
                return
            asked |= new
            actions = asked | coordinator.needed(incoming.body)
        self._handle_incoming(incoming, denied)

    def _heartbeat(self, conn: Connection, version: int, correlation_id: int,
                   body: HeartbeatRequest, received: float, now_ms: int) -> None:  # fmt: skip
        """The hot path: a heartbeat nobody needs to authorize, with nothing being written
        (its answer would otherwise wait behind the write). The same answer, from the same
        core logic, as `_handle` gives, with none of its bookkeeping: no context, pending
        entry or effects."""
        coordinator = self.coordinator
        assert coordinator is not None
        try:
            code = coordinator.heartbeat(body, now_ms=now_ms)
        except HandlerFailed as failed:
            self._halt(failed, f"a bug while handling heartbeat v{version}")
            return
        payload = self._heartbeats.get((version, code.value))
        if payload is None:
            answer = HeartbeatResponse(code)
            encoded = encode(ApiKey.HEARTBEAT, version, answer)
            payload = encode_response(ApiKey.HEARTBEAT, version, 0, encoded)[8:]
            self._heartbeats[version, code.value] = payload
        conn.complete(_HEAD.pack(len(payload) + 4, correlation_id) + payload)
        assert self._loop is not None
        self.metrics.heartbeat(code, self._loop.time() - received)
        self._rearm_soon()

    def _handle_incoming(self, incoming: _Incoming, denied: frozenset[Action]) -> None:
        i = incoming
        self._handle(i.conn, i.api_key, i.version, i.correlation_id, i.client_id, i.body,
                     i.received, denied, self.now_ms())  # fmt: skip

    def _handle(self, conn: Connection, key: int, version: int, correlation_id: int,
                client_id: str, body: Any, received: float, denied: frozenset[Action],
                now_ms: int) -> None:  # fmt: skip
        coordinator = self.coordinator
        assert coordinator is not None
        ref = next(self._refs)
        if self._debug:
            log.debug("<- %s %s v%d #%d %r", conn.peer, api_name(key), version, ref, body)
        if denied:
            self.metrics.refused(a.resource_type.name for a in denied)
            self._log_refusal(conn.principal_text, conn.peer, denied)
        group_id = body.group_id if type(body) is OffsetCommitRequest else None
        pending = _Pending(conn, key, version, correlation_id, received, group_id)
        ctx = RequestContext(ref, version, client_id, conn.client_host, conn.principal_text,
                             conn.listener_name, denied)  # fmt: skip
        try:
            effects = coordinator.handle(ctx, body, now_ms=now_ms)
        except HandlerFailed as failed:
            self._halt(failed, f"a bug while handling {api_name(key)} v{version}")
            return
        replies = effects.replies
        if (
            len(replies) == 1
            and replies[0].ref == ref
            and not effects.records
            and not effects.observations
            and not self._queue
            and not self._writing
        ):  # answered at once, nothing to write first (a heartbeat): no bookkeeping
            self._answer(pending, replies[0])
        else:
            self._pending[ref] = pending
            self._submit(effects)
        self._rearm_soon()

    def _log_refusal(self, principal: str, peer: str, denied: frozenset[Action]) -> None:
        """Once per principal and kind of refusal (operation and resource type, not the
        names) per minute: a refused client retrying in a tight loop (kafka-python's
        FindCoordinator does), or asking about thousands of made-up group ids, must not
        flood the log nor fill memory. The names are shown shortened."""
        assert self._loop is not None
        kinds = frozenset((int(a.operation), int(a.resource_type)) for a in denied)
        skipped = self._refusal_log.take((shown(principal), kinds), self._loop.time())
        if skipped is None:
            return
        what = sorted(f"{a.operation.name} {a.resource_type.name}:{shown(a.name)}" for a in denied)
        log.info("%s (%s) refused %s%s", peer, shown(principal),
                 ", ".join(what[:5]) + (", ..." if len(what) > 5 else ""),
                 suppressed(skipped))  # fmt: skip

    def _authenticate(self, conn: Connection, frame: bytes) -> None:
        """SaslHandshake and SaslAuthenticate: the connection's business, not the core's.
        A SaslAuthenticate waits for its address's turn (`FailureBudget`) and for what
        its mechanism needs first (an OAUTHBEARER key not fetched yet, a TokenReview);
        a password check runs on the key-derivation thread. The connection's later
        requests wait behind it, as behind any request."""
        try:
            request = parse_request(frame)
        except (MalformedFrame, UnsupportedRequest) as exc:
            conn.abort(f"bad SASL request: {exc}")
            return
        if request.api_key == ApiKey.SASL_AUTHENTICATE:
            assert self._loop is not None
            # One token per exchange (SCRAM's second step is part of the same attempt).
            delay = (self._attempts.take(conn.client_host, self._loop.time())
                     if conn.session.starting else 0.0)  # fmt: skip
            if delay is None:
                self.metrics.authenticated(False)
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
        self._log_crash(conn, f"{name} crashed for {conn.peer}: refusing its authentication", exc)
        if self._serving(conn):
            self._answer_authenticate(conn, request, conn.session.refuse("internal error"))

    def _log_crash(self, conn: Connection, message: str, exc: BaseException) -> None:
        """With its traceback, within the client address's log budget (a client that
        can trigger the bug must not be able to fill the log with it)."""
        assert self._loop is not None
        skipped = self._closing_log.take(conn.client_host or conn.peer, self._loop.time())
        if skipped is not None:
            log.error("%s%s", message, suppressed(skipped), exc_info=exc)

    def _authorization_crashed(self, incoming: _Incoming, actions: frozenset[Action],
                               name: str, exc: BaseException) -> None:  # fmt: skip
        """An unexpected error while a request waited on its authorization: it is
        answered with every action it needed refused, and the connection is closed."""
        conn = incoming.conn
        self._log_crash(conn, f"{name} crashed for {conn.peer}: refusing its request", exc)
        if self._serving(conn):
            try:
                self._handle_incoming(incoming, actions)
            finally:
                conn.close_after_answers(f"authorization failed: {exc!r}")

    def _serving(self, conn: Connection) -> bool:
        return not (conn.closed or self.failure is not None or self.stopped)

    async def _authenticate_after(self, delay: float, waiting: Awaitable[None] | None,
                                  conn: Connection, request: Request) -> None:  # fmt: skip
        if delay > 0:
            self.metrics.authentication_delayed(delay)
            await asyncio.sleep(delay)
        if waiting is not None:
            await waiting
        if self._serving(conn):
            self._answer_sasl(conn, request)

    def _answer_sasl(self, conn: Connection, request: Request) -> None:
        session, body = conn.session, request.body
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            hs = session.handshake(body.mechanism, request.api_version)
            answer = handshake_frame(request.api_version, request.correlation_id, hs)
            self._send_sasl(conn, answer, hs.close, f"SASL handshake refused ({hs.error.name})")
            return
        auth = session.authenticate(bytes(body.auth_bytes), self.now_ms())
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
        assert self._loop is not None
        result = await self._loop.run_in_executor(self._kdf, compute.work)
        if self._serving(conn):
            self._answer_authenticate(conn, request, conn.session.finish(result, self.now_ms()))

    def _answer_authenticate(self, conn: Connection, request: Request,
                             auth: AuthenticateAnswer) -> None:  # fmt: skip
        session = conn.session
        answer = authenticate_frame(request.api_version, request.correlation_id, auth)
        if auth.authenticated is not None or auth.close:
            self.metrics.authenticated(auth.authenticated is not None)
        if auth.authenticated is not None:
            assert self._loop is not None
            self._attempts.succeeded(conn.client_host, self._loop.time())
            again = " again" if session.reauthentications else ""
            log.info("%s authenticated as %s (%s)%s", conn.peer, shown(auth.authenticated),
                     session.mechanism, again)  # fmt: skip
        self._send_sasl(conn, answer, auth.close, f"SASL authentication failed: {auth.message}")

    def _send_sasl(self, conn: Connection, answer: bytes, close: bool, why: str) -> None:
        if close:
            assert self._loop is not None
            skipped = self._sasl_log.take(conn.client_host, self._loop.time())
            if skipped is not None:
                log.warning("refused %s: %s%s", conn.peer, shown(why, 300), suppressed(skipped))
            conn.answer_and_close(answer, why, FAILED_AUTHENTICATION_DELAY_S)
        else:
            conn.complete(answer)

    # -- the ordered pipeline ------------------------------------------------------------

    def _submit(self, effects: Effects) -> None:
        if effects.observations:
            self.metrics.observe(effects.observations)
        if not effects.records:
            if not effects.replies:
                return
            if not self._queue and not self._writing:
                self._deliver(effects.replies)
                return
        self._queue.append(effects)
        if not self._writing:
            self._flush()

    def _flush(self) -> None:
        while self._queue and not self._writing and self.failure is None:
            batch, self._queue = self._queue, []
            records = [r for e in batch for r in e.records]
            if not records:
                for effects in batch:
                    self._deliver(effects.replies)
                continue
            self._writing = True
            assert self._loop is not None
            future = self._loop.run_in_executor(self._executor, self._append, records)
            future.add_done_callback(functools.partial(self._written, batch=batch))

    def _append(self, records: list[Record]) -> float:
        """On the writer thread: write, and say how long it took."""
        started = time.perf_counter()
        self._store.append(records)
        return time.perf_counter() - started

    def _written(self, future: asyncio.Future[float], *, batch: list[Effects]) -> None:
        self._writing = False
        exc = future.exception()
        if exc is not None:
            self._fail(exc)
            return
        self.metrics.written(sum(len(e.records) for e in batch), future.result())
        if self.failure is not None:
            return  # stopping: nobody is answered any more
        for effects in batch:
            self._deliver(effects.replies)
        self._flush()

    def _deliver(self, replies: tuple[Reply, ...]) -> None:
        for reply in replies:
            pending = self._pending.pop(reply.ref, None)
            if pending is not None:
                self._answer(pending, reply)

    def _answer(self, pending: _Pending, reply: Reply) -> None:
        """Encode `reply` and send it on its connection (in order behind earlier ones)."""
        if pending.conn.closed:
            return
        if self._debug:
            log.debug("-> %s #%d %r", pending.conn.peer, reply.ref, reply.body)
        try:
            frame = self._frame(pending, reply)
        except Exception as exc:
            log.exception("cannot encode %s", api_name(pending.api_key))
            pending.conn.abort(f"internal error encoding a response: {exc!r}")
            return
        assert self._loop is not None
        waited = self._loop.time() - pending.received
        if type(reply.body) is FetchResponse and reply.body.wait_ms > 0:
            pending.conn.complete_later(reply.body.wait_ms / 1000, frame)
            waited += reply.body.wait_ms / 1000
        else:
            pending.conn.complete(frame)
        self.metrics.answered(metric_api_name(pending.api_key), reply.body, waited,
                              pending.group_id)  # fmt: skip

    def _frame(self, pending: _Pending, reply: Reply) -> bytes:
        if type(reply.body) in _CACHEABLE:
            key = (pending.api_version, reply.body)
            payload = self._payloads.get(key)
            if payload is None:
                body = encode(pending.api_key, pending.api_version, reply.body)
                payload = encode_response(pending.api_key, pending.api_version, 0, body)[8:]
                self._payloads[key] = payload
            return _HEAD.pack(len(payload) + 4, pending.correlation_id) + payload
        body = encode(pending.api_key, pending.api_version, reply.body)
        return encode_response(pending.api_key, pending.api_version, pending.correlation_id, body)

    def _fail(self, exc: BaseException) -> None:
        """The store failed: nothing more can be made durable, so nothing more is said."""
        if self._stop_serving(exc, "store write failed"):
            self._stopped.set()

    def _halt(self, failed: HandlerFailed, what: str) -> None:
        """Fail stop after a bug: the state in memory is half-changed and no record
        explains it. The failed call's effects are dropped (neither persisted nor
        answered); what earlier calls queued is still written, then the server stops,
        and a restart replays what is durable (Kafka rolls such a group back instead)."""
        self._halt_after(failed, what, failed.__cause__)

    def _halt_after(self, exc: BaseException, what: str, cause: BaseException | None) -> None:
        if self._stop_serving(exc, what, cause=cause):
            self._halting = self._tasks.spawn("halt", self._write_queue_then_stop())

    def _stop_serving(
        self, exc: BaseException, what: str, cause: BaseException | None = None
    ) -> bool:
        if self.failure is not None:
            return False
        log.critical("%s, stopping the coordinator: %r", what, cause or exc,
                     exc_info=cause)  # fmt: skip
        self.failure = exc
        self._close_listeners()
        self._cancel_background()
        for conn in list(self.connections):
            conn.abort(f"coordinator stopping: {what}")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return True

    async def _write_queue_then_stop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._writing:
                await asyncio.sleep(0.005)
            records = [r for e in self._queue for r in e.records]
            self._queue.clear()
            if records:
                await loop.run_in_executor(self._executor, self._store.append, records)
            await loop.run_in_executor(self._executor, self._store.close)
        except Exception:
            log.exception("could not write what earlier requests queued")
        finally:
            self._executor.shutdown(wait=False)
            self._kdf.shutdown(wait=False, cancel_futures=True)
            self._stopped.set()

    # -- timers --------------------------------------------------------------------------

    def _rearm_soon(self) -> None:
        """Re-arm the timer once the requests of this turn of the loop are handled: a
        batch of pipelined heartbeats re-arms it once, not once each."""
        if not self._rearm_scheduled and self._loop is not None:
            self._rearm_scheduled = True
            self._loop.call_soon(self._rearm)

    def _rearm(self) -> None:
        self._rearm_scheduled = False
        if self.coordinator is None or self.failure is not None or self._loop is None:
            return
        deadline = self.coordinator.next_deadline_ms()
        if deadline == self._timer_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is not None:
            when = (deadline - self._epoch_offset_ms) / 1000
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        if self.failure is not None:
            return
        deadline = self._timer_deadline or 0
        self._timer = None
        self._timer_deadline = None
        coordinator = self.coordinator
        assert coordinator is not None
        try:
            # The loop may wake a hair early; the deadline it was armed for has come.
            effects = coordinator.handle_timers(now_ms=max(self.now_ms(), deadline))
        except HandlerFailed as failed:
            self._halt(failed, "a bug while firing coordinator timers")
            return
        self._submit(effects)
        self._rearm()


async def run_server(
    settings: ServerSettings, ready: Callable[[CoordinatorServer], Any] | None = None
) -> None:
    """Run until cancelled (stopping cleanly) or until the store fails (raising)."""
    server = CoordinatorServer(settings)
    await server.start()
    if ready is not None:
        ready(server)
    try:
        await server.serve_forever()
    finally:
        if server.failure is None:
            await server.stop()
