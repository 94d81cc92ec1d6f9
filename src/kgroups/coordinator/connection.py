"""One client connection of the coordinator: frames in, one request in flight, answers out
in order, and the bounds that keep a connection from holding more than its share.

A connection reads size-prefixed frames, capping the size before buffering (512 KiB until
SASL authentication completes), hands one request at a time to the server
(`ConnectionOwner.dispatch`), and writes the answers produced in one turn of the event
loop in one write. It stops reading when too many frames wait behind the one in flight,
when its client does not read its answers, or when the server's buffered-bytes bound says
so. A listener is where connections come from and how they start (TLS, SASL).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from kgroups.coordinator.core import Node
from kgroups.coordinator.limits import PRE_AUTH_MAX_FRAME_BYTES, ConnectionCounts, Limits
from kgroups.coordinator.listeners import ListenerSettings
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.coordinator.security import ListenerSecurity
from kgroups.coordinator.tls import certificate_principal
from kgroups.protocol.frames import SIZE
from kgroups.security.sasl import ANONYMOUS
from kgroups.security.session import Session

MAX_QUEUED_FRAMES = 128
"""Frames a connection may have waiting before we stop reading from its socket."""
MAX_QUEUED_BYTES = 16 * 1024 * 1024
"""Bytes of whole frames a connection may have waiting before we stop reading from it."""
MAX_UNSENT_BYTES = 256 * 1024
"""Answers a connection may have waiting to be written before we stop taking its requests."""


@dataclass(slots=True)
class Listener:
    """A listener while serving: its settings, security and bound port."""

    settings: ListenerSettings
    security: ListenerSecurity
    server: asyncio.Server | None = None
    port: int = 0
    node_id: int = 0
    """This coordinator's node id (a replica's is given by the database)."""

    @property
    def name(self) -> str:
        return self.settings.name

    def node(self) -> Node:
        s = self.settings
        return Node(self.node_id, s.advertised_host or s.host, s.advertised_port or self.port)


class ConnectionOwner(Protocol):
    """What a connection needs of the server that accepted it (`CoordinatorServer`):
    declared here so that this module does not import the server."""

    @property
    def counts(self) -> ConnectionCounts:
        """Connections per client address and in total (admission, release)."""
        ...

    @property
    def connections(self) -> set[Connection]: ...

    @property
    def metrics(self) -> CoordinatorMetrics: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def max_frame_bytes(self) -> int: ...

    def reject(self, address: str, reason: str) -> None: ...

    def account(self, conn: Connection, held: int) -> None: ...

    def dispatch(self, conn: Connection, frame: bytes) -> None: ...

    def log_closing(self, conn: Connection, reason: str) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection: frames in, one request in flight, replies out in order."""

    def __init__(self, server: ConnectionOwner, listener: Listener | None = None) -> None:
        self.server = server
        self.listener = listener
        self.session = Session(None)
        self._closing = False
        self.counted: str | None = None
        """The client address this connection is counted under (None: not admitted)."""
        self.last_active = 0.0
        """loop.time() of the last whole request received or answer sent."""
        self.held = 0
        """Bytes of this connection in the server's buffered-bytes account."""
        self.memory_paused = False
        self.transport: asyncio.Transport | None = None
        self.peer = "unknown"
        self.client_host = ""
        self.closed = False
        self._buffer = bytearray()
        self._frames: deque[bytes] = deque()
        self._busy = False
        self._pumping = False
        self._paused = False
        self._write_paused = False
        self._queued_bytes = 0
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._receiving = False
        """In `data_received`: answers made meanwhile leave in one write at its end."""
        self.repeat: tuple[bytes, bytes, str, Any] | None = None
        """The last heartbeat frame (without its correlation id), its client id and its
        decoded body: a steady member sends the same bytes every time (`server.dispatch`)."""
        self.timers: set[asyncio.TimerHandle] = set()
        self.listener_name = listener.name if listener is not None else ""
        self._principal: object = None
        self._principal_text = "None"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio's, so no isinstance).
        self.transport = cast("asyncio.Transport", transport)
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer = f"{peername[0]}:{peername[1]}"
            self.client_host = f"/{peername[0]}"
        address = str(peername[0]) if peername else "unknown"
        refused = self.server.counts.admit(address)
        if refused is not None:
            self.server.reject(address, refused)
            self.closed = True
            self.transport.abort()
            return
        self.counted = address
        self.last_active = asyncio.get_running_loop().time()
        if self.listener is not None:
            security = self.listener.security
            principal = None
            if security.tls is not None:
                principal = certificate_principal(transport.get_extra_info("peercert"))
            self.session = Session(security.sasl, principal or ANONYMOUS)
            if self.session.principal is None:
                timeout_s = self.server.limits.authentication_timeout_ms / 1000
                self.call_later(timeout_s, self._authentication_deadline)
        self.server.connections.add(self)

    def _authentication_deadline(self) -> None:
        """A SASL listener's connection must authenticate in time: otherwise a client
        sending ApiVersions forever would hold a connection slot forever."""
        if self.session.principal is None and not self.closed:
            self.server.metrics.unauthenticated_closed()
            limit_ms = self.server.limits.authentication_timeout_ms
            self.close_after_answers(f"did not authenticate within {limit_ms} ms")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.counted is not None:
            self.server.counts.release(self.counted)
            self.counted = None
        self._buffer.clear()
        self._queued_bytes = 0
        self.server.account(self, 0)
        self._frames.clear()
        for handle in self.timers:
            handle.cancel()
        self.timers.clear()
        self.server.connections.discard(self)

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        limit = self.server.max_frame_bytes
        if self.session.principal is None:  # not authenticated yet (Kafka's 512 KiB)
            limit = min(limit, PRE_AUTH_MAX_FRAME_BYTES)
        whole = len(self._frames)
        if not buf and len(data) >= 4 and SIZE.unpack_from(data, 0)[0] == len(data) - 4 <= limit:
            # The usual: exactly one whole request (a client waiting for each answer).
            self._frames.append(data[4:])
            self._queued_bytes += len(data) - 4
        else:
            buf += data
        while len(buf) >= 4:
            (size,) = SIZE.unpack_from(buf, 0)
            if size < 0 or size > limit:
                self.abort(f"frame size {size} outside 0..{limit} bytes")
                return
            if len(buf) < 4 + size:
                break
            self._frames.append(bytes(buf[4 : 4 + size]))
            self._queued_bytes += size
            del buf[: 4 + size]
        if len(self._frames) > whole:
            self.last_active = asyncio.get_running_loop().time()
        self._receiving = True
        try:
            self._pump()
        finally:
            self._receiving = False
        if self._out:
            self._flush()  # answered at once (a heartbeat): no extra turn of the loop
        crowded = len(self._frames) > MAX_QUEUED_FRAMES or self._queued_bytes > MAX_QUEUED_BYTES
        if crowded and not self._paused and self.transport and not self.closed:
            self._paused = True
            self.set_reading()

    def _account(self) -> None:
        if not self.closed:
            self.server.account(self, len(self._buffer) + self._queued_bytes)

    def set_reading(self) -> None:
        """Read from the socket unless crowded or paused for the buffered-bytes limit."""
        if self.transport is None or self.closed:
            return
        if self._paused or self.memory_paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    @property
    def principal_text(self) -> str:
        """The session's principal as text (`User:alice`), made once per principal."""
        principal = self.session.principal
        if principal is not self._principal:
            self._principal, self._principal_text = principal, str(principal)
        return self._principal_text

    @property
    def idle(self) -> bool:
        """No request in flight, none waiting, no answer unsent."""
        return not (self._busy or self._frames or self._out or self.closed)

    def pause_writing(self) -> None:
        # The client is not reading its answers: like a Kafka broker muting the channel,
        # stop taking its requests until the socket drains, so memory stays bounded.
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._pump()

    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            while (
                not self._busy
                and not self.closed
                and not self._closing
                and not self._write_paused
                and self._out_bytes < MAX_UNSENT_BYTES
                and self._frames
            ):
                self._busy = True
                frame = self._frames.popleft()
                self._queued_bytes -= len(frame)
                self.server.dispatch(self, frame)
        finally:
            self._pumping = False
            self._account()  # once per pump, not once per frame
        if (
            self._paused
            and len(self._frames) < MAX_QUEUED_FRAMES // 2
            and self._queued_bytes < MAX_QUEUED_BYTES // 2
            and self.transport
            and not self.closed
        ):
            self._paused = False
            self.set_reading()

    def complete(self, frame: bytes) -> None:
        """Send the answer to the request in flight, then start on the next one.

        Answers produced in one turn of the event loop leave in one write (one syscall
        for a whole pipelined batch), at the end of that turn, or of `data_received` when
        they were answered while it read their requests.
        """
        if self.closed or self.transport is None:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._flush_scheduled and not self._receiving:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        self._busy = False
        self._pump()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.closed and self.transport is not None:
            self.transport.write(b"".join(self._out))
            self.last_active = asyncio.get_running_loop().time()
        self._out.clear()
        self._out_bytes = 0
        self._pump()

    def complete_later(self, delay_s: float, frame: bytes) -> None:
        self.call_later(delay_s, lambda: self.complete(frame))

    def call_later(self, delay_s: float, work: Callable[[], None]) -> None:
        """Run `work` in `delay_s`, unless the connection is lost first."""
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self.timers.discard(handle)
            work()

        handle = loop.call_later(delay_s, fire)
        self.timers.add(handle)

    def answer_and_close(self, frame: bytes, reason: str, delay_s: float) -> None:
        """Send this last answer now, take no more requests, and close after `delay_s`.
        A Kafka broker sends a failed authentication's answer late and hangs up at once;
        some clients (kafka-python over TLS) then see the hang-up before the answer and
        report a lost connection instead of the refusal: answering first is clearer, and
        the connection still takes no new attempt before it closes."""
        self._closing = True
        self.complete(frame)
        handle = asyncio.get_running_loop().call_later(
            delay_s, lambda: self.close_after_answers(reason)
        )
        self.timers.add(handle)

    def close_after_answers(self, reason: str, *, quiet: bool = False) -> None:
        """Hang up once the answers already given are written (the client may have
        pipelined valid requests ahead of the one that ends the connection)."""
        if not quiet:
            self.server.log_closing(self, reason)
        if self.transport is not None and not self.closed:
            if self._out:
                self.transport.write(b"".join(self._out))
            self.transport.close()
        self._out.clear()
        self._out_bytes = 0
        self.closed = True

    def abort(self, reason: str) -> None:
        self.server.log_closing(self, reason)
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
