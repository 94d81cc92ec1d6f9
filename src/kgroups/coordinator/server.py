"""The coordinator's asyncio edge: listeners, dispatch, the clock, stopping.

It is a thin adapter (aioquic's `asyncio/protocol.py` shape) around the sans-IO
`GroupCoordinator`:

* each connection (`connection.py`) reads size-prefixed frames, capping the size *before*
  buffering, and processes one request at a time, answering in order, as a Kafka broker
  does; SASL is answered at the edge and authorization asked before the core handles a
  request (`gate.py`);
* every core call returns `Effects`; they join one ordered pipeline (`pipeline.py`):
  records durable through a single writer thread before the replies that depend on them.
  A heartbeat nobody must authorize, with nothing being written, is answered directly
  (the fast path);
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
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgroups.coordinator.authorizers import (
    AclFileAuthorizer,
    AuthorizationSettings,
    Authorizer,
    make_authorizer,
)
from kgroups.coordinator.connection import Connection, Listener
from kgroups.coordinator.core import (
    CoordinatorConfig,
    Effects,
    GroupCoordinator,
    HandlerFailed,
    RequestContext,
)
from kgroups.coordinator.core.msg_cluster import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kgroups.coordinator.core.msg_configs import AlterConfigsRequest
from kgroups.coordinator.core.msg_consumer import ConsumerHeartbeatRequest
from kgroups.coordinator.core.msg_group import HeartbeatRequest, HeartbeatResponse
from kgroups.coordinator.core.shards import DEFAULT_SHARDS
from kgroups.coordinator.gate import NOTHING_DENIED, Gate, Incoming
from kgroups.coordinator.limits import ConnectionCounts, Limits, RateLimiter
from kgroups.coordinator.listeners import (
    ListenerSettings,
    SecurityProtocol,
    SecuritySettings,
)
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.coordinator.pipeline import HEAD, OrderedWriter, Pending
from kgroups.coordinator.security import Security
from kgroups.coordinator.steady_answers import SteadyAnswers
from kgroups.coordinator.store import RecordStore, make_store
from kgroups.coordinator.wire import api_versions_frame, decode, encode, refused_produce
from kgroups.exposition import HttpEndpoints, metrics_route, probe_route
from kgroups.protocol.apis import ApiKey, api_name, metric_api_name
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    MalformedFrame,
    UnsupportedRequest,
    encode_response,
    parse_request,
    peek_header,
)
from kgroups.security.actions import Action
from kgroups.security.sasl import ANONYMOUS
from kgroups.shown import LogBudget, shown, suppressed
from kgroups.tasks import Tasks

if TYPE_CHECKING:  # psycopg is imported only by a replica (`--store postgresql://...`)
    from kgroups.coordinator.replicas import Replication

CLUSTER_WRITES = (CreateTopicsRequest, CreatePartitionsRequest, DeleteTopicsRequest,
                  AlterConfigsRequest)  # fmt: skip
"""Requests that change what every replica shares (topics, group settings)."""

log = logging.getLogger("kgroups.coordinator")

LISTEN_BACKLOG = 1024
"""Connections the kernel queues before they are accepted (Kafka's
socket.listen.backlog.size is 50): a burst of reconnecting members after a restart is
accepted without SYN retries that cost each of them a second or more."""
REPEATED = frozenset({int(ApiKey.HEARTBEAT), int(ApiKey.CONSUMER_GROUP_HEARTBEAT)})
"""Requests a client sends again and again with the same bytes (`Connection.repeat`)."""
MAX_REPEAT_BYTES = 1024
"""A heartbeat frame up to this size is kept, decoded, by its connection (`Connection.repeat`):
the next one with the same bytes is not decoded again. A steady heartbeat is under 200
bytes; a larger one (a ConsumerGroupHeartbeat carrying its subscription) is not repeated."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path(".kgroups")
    store_url: str | None = None
    """A PostgreSQL URL (`--store`): the shared store, this process one replica of the
    cluster every process on that database forms; None: SQLite in data_dir."""
    replica_name: str | None = None
    """This replica's name among those of the database (default: host name and port)."""
    lease_ttl_s: float = 5.0
    """How long a replica's shard leases last without renewal (renewed every ttl/5)."""
    shards: int = DEFAULT_SHARDS
    """How many shards groups hash to in a PostgreSQL store (fixed at its creation)."""
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


class CoordinatorServer:
    """Runs a `GroupCoordinator` on TCP listeners with a SQLite or PostgreSQL store."""

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
        settings.limits.validate()
        self.counts = ConnectionCounts(settings.limits)
        self.buffered = 0
        """Bytes of requests received and not handled yet, across connections."""
        self._memory_paused: set[Connection] = set()
        self._rejection_log = LogBudget(60.0, max_keys=10_000)
        self._closing_log = LogBudget(10.0, burst=20, max_keys=10_000)
        limits = settings.limits
        self._rates = {
            key: RateLimiter(rate)
            for key, rate in ((ApiKey.JOIN_GROUP, limits.join_rate),
                              (ApiKey.OFFSET_COMMIT, limits.commit_rate))
            if rate > 0
        }  # fmt: skip
        self._loop: asyncio.AbstractEventLoop | None = None
        self._epoch_offset_ms = 0
        self._refs = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._rearm_scheduled = False
        self._debug = log.isEnabledFor(logging.DEBUG)
        self._timer_deadline: int | None = None
        self._stopped = asyncio.Event()
        self._heartbeats: dict[tuple[int, int], bytes] = {}
        """Heartbeat answers by (version, error code), encoded once."""
        self._consumer_heartbeats = SteadyAnswers()
        self.failure: BaseException | None = None
        self._halting: asyncio.Task[None] | None = None
        self.metrics = CoordinatorMetrics(
            lambda: self.coordinator, lambda: len(self.connections), wall_clock,
            lambda: self.buffered,
        )  # fmt: skip
        self._replication: Replication | None = None
        if store is None and settings.store_url is not None:
            self._store: RecordStore = self._replicated(settings.store_url)
        else:
            self._store = store or make_store(
                None, settings.data_dir, synchronous=settings.synchronous, shards=settings.shards
            )
        self._writer = OrderedWriter(self._store, self.metrics, self._fail)
        super_users = settings.authorization.super_users if settings.authorization else ()
        self._gate = Gate(self, self.security, make_authorizer(settings.authorization),
                          frozenset(super_users), limits,
                          self.metrics, self._tasks)  # fmt: skip
        self._endpoints = HttpEndpoints(
            {
                "/metrics": metrics_route(self.metrics.registry),
                "/healthz": probe_route(self.unhealthy),
                "/readyz": probe_route(self.unready),
            }
        )

    def _replicated(self, url: str) -> RecordStore:
        """A PostgreSQL store shared with other replicas: fenced writes, shard leases."""
        from kgroups.coordinator.replicas import Replication
        from kgroups.coordinator.store.leases import ShardLeases
        from kgroups.coordinator.store.postgres import Fence, ReplicaStore

        settings = self.settings
        # Named for good once the listeners are bound (`_replica_name`): with port 0, the
        # configured port would give every replica on a host the same name, and one fence.
        name = settings.replica_name or ""
        store = ReplicaStore(url, shards=settings.shards, fence=Fence(name),
                              lease_ttl_s=settings.lease_ttl_s)  # fmt: skip
        leases = ShardLeases(url, name=name, listeners={}, ttl_s=settings.lease_ttl_s)
        self._replication = Replication(store, leases, lambda: self._writer,
                                        apply=self._apply, now_ms=self.now_ms)  # fmt: skip
        return store

    def _replica_name(self) -> str:
        """--replica-name, or this host and the first listener's bound port: unique among
        the replicas of one host, and the same again when a restarted replica takes its
        port back (its node id is kept by name)."""
        if self.settings.replica_name:
            return self.settings.replica_name
        port = self.listeners[0].port or self.listeners[0].settings.port
        if not port:
            raise ValueError("a replica without a bound port needs --replica-name")
        return f"{socket.gethostname()}-{port}"

    def _apply(self, effects: Effects) -> None:
        """Effects of moving shards: written and answered like a request's."""
        self._writer.submit(effects)
        self._rearm_soon()

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
        cluster_id, records = await self._writer.open()
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
        replication = self._replication
        if replication is not None:
            node_id = await replication.register(
                self._replica_name(),
                {ls.name: (ls.node().host, ls.node().port) for ls in self.listeners},
            )
            for listener in self.listeners:
                listener.node_id = node_id
        node = self.listeners[0].node()
        coordinator = GroupCoordinator(
            self.settings.coordinator, node=node, cluster_id=cluster_id,
            new_member_id=self._new_member_id, nodes={ls.name: ls.node() for ls in self.listeners},
            work_clock=time.perf_counter,
        )  # fmt: skip
        for record in records:
            coordinator.replay(record)
        self.coordinator = coordinator
        groups = len(coordinator.groups)
        where = ", ".join(
            f"{ls.name} {ls.settings.host}:{ls.port} (advertised {ls.node().host}:{ls.node().port})"
            for ls in self.listeners
        )
        log.info("coordinator listening on %s, store %s: replayed %d records, %d groups",
                 where, self._store.where, len(records), groups)  # fmt: skip
        self._writer.submit(coordinator.resume(now_ms=self.now_ms()))
        if replication is not None:
            replication.attach(coordinator)
            self._tasks.spawn("shard-leases", replication.run())
        self._rearm()
        # Only now are connections accepted: bound earlier (a replica is named by its
        # port and registers the addresses), a client's connection waits in the backlog
        # meanwhile, as at a Kafka broker whose request processing is not enabled yet,
        # and its first request finds a coordinator (NOT_COORDINATOR until a shard loads).
        for listener in self.listeners:
            if listener.server is not None:
                await listener.server.start_serving()

    async def _listen(self, loop: asyncio.AbstractEventLoop, listener: Listener) -> None:
        s = listener.settings
        tls = listener.security.tls
        listener.server = await loop.create_server(
            lambda: Connection(self, listener), s.host, s.port, backlog=LISTEN_BACKLOG,
            ssl=tls.outer if tls is not None else None, start_serving=False,
        )  # fmt: skip
        for bound in listener.server.sockets:  # connections queue until `start_serving`
            sock = socket.socket(fileno=bound.fileno())  # the same socket, not a copy
            sock.listen(LISTEN_BACKLOG)
            sock.detach()
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
    def authorizer(self) -> Authorizer | None:
        """Who may do what (None: everyone everything), asked by the gate."""
        return self._gate.authorizer

    @authorizer.setter
    def authorizer(self, authorizer: Authorizer | None) -> None:
        self._gate.authorizer = authorizer

    @property
    def limits(self) -> Limits:
        return self.settings.limits

    @property
    def max_frame_bytes(self) -> int:
        return self.settings.max_frame_bytes

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
        log.info("coordinator stopping")
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
        if self._replication is not None:
            if self.failure is None and self._replication.sharding is not None:
                await self._replication.leave()
            self._replication.close()
        self._writer.halted = True
        await self._writer.close(write_queued=self.failure is None)
        for listener in self.listeners:
            if listener.server is not None:
                await listener.server.wait_closed()
        self._gate.close()
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
        if self._replication is not None and (why := self._replication.unready()):
            return why
        if any(ls.server is None or not ls.server.is_serving() for ls in self.listeners):
            return "not listening"
        return None

    def now_ms(self) -> int:
        assert self._loop is not None
        return int(self._loop.time() * 1000) + self._epoch_offset_ms

    def loop_time(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def serving(self, conn: Connection) -> bool:
        """False once `conn` closed or the coordinator stops: nothing more is answered."""
        return not (conn.closed or self.failure is not None or self.stopped)

    def log_crash(self, conn: Connection, message: str, exc: BaseException) -> None:
        """With its traceback, within the client address's log budget (a client that
        can trigger the bug must not be able to fill the log with it)."""
        skipped = self._closing_log.take(conn.client_host or conn.peer, self.loop_time())
        if skipped is not None:
            log.error("%s%s", message, suppressed(skipped), exc_info=exc)

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
            self._gate.authenticate(conn, frame)
            return
        repeat = conn.repeat
        if repeat is not None and key in REPEATED:
            rest = frame[8:]  # the same bytes as last time: the same request, decoded
            if rest == repeat[0] and frame[:4] == repeat[1]:
                self._admit(conn, key, version, correlation_id, repeat[2], repeat[3],
                            received, now_ms)  # fmt: skip
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
            if key in REPEATED and len(frame) <= MAX_REPEAT_BYTES:
                conn.repeat = (frame[8:], frame[:4], request.client_id, body)
        except UnsupportedRequest:
            conn.close_after_answers(f"{api_name(key)} v{version} is not served (see ApiVersions)")
            return
        except MalformedFrame as exc:
            conn.abort(str(exc))
            return
        if self._replication is not None and type(body) in CLUSTER_WRITES:
            # Authorized and judged on the cluster's current topics and group settings,
            # not on what this replica last read of them (the connection waits, in order).
            client_id = request.client_id

            def admit() -> None:
                self._admit(conn, key, version, correlation_id, client_id, body, received,
                            self.now_ms())  # fmt: skip

            failed = functools.partial(self._view_failed, conn)
            self._tasks.spawn("cluster-view", self._fresh_then(conn, admit), on_crash=failed)
            return
        self._admit(conn, key, version, correlation_id, request.client_id, body, received,
                    now_ms)  # fmt: skip

    def _admit(self, conn: Connection, key: int, version: int, correlation_id: int,
               client_id: str, body: Any, received: float, now_ms: int) -> None:  # fmt: skip
        """A decoded request: throttled, authorized, handled."""
        limiter = self._rates.get(key)
        if limiter is not None:
            principal = conn.session.principal
            who = str(principal) if principal != ANONYMOUS else f"ANONYMOUS{conn.client_host}"
            wait = limiter.delay(who, received)
            if wait > 0:  # over the principal's rate: this connection waits its turn
                incoming = Incoming(conn, key, version, correlation_id, client_id,
                                    body, received)  # fmt: skip
                self.metrics.throttled(metric_api_name(key), wait)
                conn.call_later(wait, lambda: self._gate.authorize_and_handle(incoming))
                return
        if self._gate.authorizer is None:
            w = self._writer  # `w.idle` inlined: the property call cost ~6% of heartbeats/s
            if type(body) is HeartbeatRequest and not (w.queue or w.writing or self._debug):
                self._heartbeat(conn, version, correlation_id, body, received, now_ms)
                return
            if (
                type(body) is ConsumerHeartbeatRequest
                and not (w.queue or w.writing or self._debug)
                and self._consumer_heartbeat(
                    conn, version, correlation_id, client_id, body, received, now_ms
                )
            ):
                return
            self._handle(conn, key, version, correlation_id, client_id, body, received,
                         NOTHING_DENIED, now_ms)  # fmt: skip
            return
        self._gate.authorize_and_handle(
            Incoming(conn, key, version, correlation_id, client_id, body, received)
        )

    def _heartbeat(self, conn: Connection, version: int, correlation_id: int,
                   body: HeartbeatRequest, received: float, now_ms: int) -> None:  # fmt: skip
        """The hot path: a heartbeat nobody needs to authorize, with nothing being written
        (its answer would otherwise wait behind the write). The same answer, from the same
        core logic, as `_handle` gives, with none of its bookkeeping: no context, pending
        entry or effects."""
        coordinator = self.coordinator
        assert coordinator is not None
        if self._replication is not None:
            self._replication.check(time.monotonic())
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
        conn.complete(HEAD.pack(len(payload) + 4, correlation_id) + payload)
        assert self._loop is not None
        self.metrics.heartbeat(code, self._loop.time() - received)
        self._rearm_soon()

    def _consumer_heartbeat(self, conn: Connection, version: int, correlation_id: int,
                            client_id: str, body: ConsumerHeartbeatRequest, received: float,
                            now_ms: int) -> bool:  # fmt: skip
        """The consumer protocol's hot path: a ConsumerGroupHeartbeat that changes nothing,
        answered from encoded templates (one per member and epoch, `SteadyAnswers`);
        False when it needs `_handle`."""
        coordinator = self.coordinator
        assert coordinator is not None
        if self._replication is not None:
            self._replication.check(time.monotonic())
        try:
            answer = coordinator.consumer_heartbeat(body, client_id, conn.client_host,
                                                    now_ms=now_ms)  # fmt: skip
        except HandlerFailed as failed:
            self._halt(failed, f"a bug while handling consumer heartbeat v{version}")
            return True
        if answer is None:
            return False
        conn.complete(self._consumer_heartbeats.frame(version, answer, correlation_id))
        assert self._loop is not None
        self.metrics.heartbeat(ErrorCode.none, self._loop.time() - received,
                               "ConsumerGroupHeartbeat")  # fmt: skip
        self._rearm_soon()
        return True

    def handle_incoming(self, incoming: Incoming, denied: frozenset[Action]) -> None:
        i = incoming
        self._handle(i.conn, i.api_key, i.version, i.correlation_id, i.client_id, i.body,
                     i.received, denied, self.now_ms())  # fmt: skip

    def _handle(self, conn: Connection, key: int, version: int, correlation_id: int,
                client_id: str, body: Any, received: float, denied: frozenset[Action],
                now_ms: int) -> None:  # fmt: skip
        coordinator = self.coordinator
        assert coordinator is not None
        if self._replication is not None:
            self._replication.check(time.monotonic())
        ref = next(self._refs)
        if self._debug:
            log.debug("<- %s %s v%d #%d %r", conn.peer, api_name(key), version, ref, body)
        if denied:
            self.metrics.refused(a.resource_type.name for a in denied)
            self._gate.log_refusal(conn.principal_text, conn.peer, denied)
        pending = Pending(conn, key, version, correlation_id, received,
                          getattr(body, "group_id", None))  # fmt: skip
        ctx = RequestContext(ref, version, client_id, conn.client_host, conn.principal_text,
                             conn.listener_name, denied)  # fmt: skip
        try:
            effects = coordinator.handle(ctx, body, now_ms=now_ms)
        except HandlerFailed as failed:
            self._halt(failed, f"a bug while handling {api_name(key)} v{version}")
            return
        replies = effects.replies
        writer = self._writer
        if (
            len(replies) == 1
            and replies[0].ref == ref
            and not effects.records
            and not effects.observations
            and writer.idle
        ):  # answered at once, nothing to write first (a heartbeat): no bookkeeping
            writer.answer(pending, replies[0])
        else:
            writer.pending[ref] = pending
            writer.submit(effects)
        self._rearm_soon()

    async def _fresh_then(self, conn: Connection, handle: Callable[[], None]) -> None:
        replication = self._replication
        assert replication is not None
        await replication.fresh_globals()
        if self.serving(conn):
            handle()

    def _view_failed(self, conn: Connection, name: str, exc: BaseException) -> None:
        """The cluster's view could not be read (the database away past the store's
        retries): the request is not judged on a stale one; its client asks again."""
        self.log_crash(conn, f"cannot read the cluster's topics for {conn.peer}", exc)
        conn.abort("cannot read the cluster's topics and group settings now")

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
        self._writer.halted = True
        self._close_listeners()
        self._cancel_background()
        for conn in list(self.connections):
            conn.abort(f"coordinator stopping: {what}")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return True

    async def _write_queue_then_stop(self) -> None:
        try:
            await self._writer.close(write_queued=True)
        except Exception:
            log.exception("could not write what earlier requests queued")
        finally:
            self._gate.close()
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
        if self._replication is not None:
            # Woken from a freeze longer than the leases, a replica first stops serving:
            # its overdue timers must not act on groups another replica may serve now.
            self._replication.check(time.monotonic())
        try:
            # The loop may wake a hair early; the deadline it was armed for has come.
            effects = coordinator.handle_timers(now_ms=max(self.now_ms(), deadline))
        except HandlerFailed as failed:
            self._halt(failed, "a bug while firing coordinator timers")
            return
        self._writer.submit(effects)
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
