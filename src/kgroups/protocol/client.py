"""The client side of the Kafka protocol: one connection, and one that reconnects.

`KafkaConnection` is one TCP connection: requests may be pipelined, answers are matched by
correlation id, and the caller picks the version by picking the kio class
(`kio.schema.<api>.v<N>.request`). When it closes, for whatever reason, every request
still waiting on it fails at once with `ConnectionClosed`: nobody waits out a timeout on a
connection that is already gone.

`ReconnectingConnection` is what long-lived callers use (the member's links to its
coordinator, the admin client behind the operator and the CLI): it finds the server
through a `locate` function, connects, and after any failure drops the connection so the
next request finds and connects afresh (Java's `markCoordinatorUnknown`). One deadline
covers everything a request needs (locating the server, connecting, the answer), so a
caller's timeout holds even when the server accepts connections but never answers. A
request whose caller gives up (timeout or cancellation) also drops the connection: the
server answers one request at a time per connection, so a request left parked there
(a JoinGroup waiting for a rebalance) would hold up every later one.

Both take a `connect` function, so tests can run them over in-memory transports (or
over TLS: kgroups.security.client), and an `authenticate` function run on every new
connection before anything else is sent (SASL). Its answer is how long the server's session
lasts; the connection authenticates again on its own before then (KIP-368), at a random
85-95% of the lifetime as Kafka's clients do, and closes if that fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kgroups.protocol.apis import SUPPORTED, response_class
from kgroups.protocol.extensions import RESPONSES
from kgroups.protocol.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    SIZE,
    skip_tagged_fields,
    writer_for,
)
from kgroups.protocol.tags import read_entity

R = TypeVar("R")
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Connector = Callable[[str, int], Awaitable[Streams]]
Locate = Callable[[float], Awaitable[tuple[str, int]]]
"""Given a deadline (event-loop time), the (host, port) to connect to."""
Authenticate = Callable[["KafkaConnection"], Awaitable[float]]
"""Authenticates a new connection; the seconds its session lasts (0: no limit)."""


class ConnectionClosed(ConnectionError):
    """The connection closed before the answer came."""


class CoordinatorUnavailable(ConnectionError):
    """The server could not be reached in time, or the connection broke; retry later."""


def _response_class(request_cls: type) -> type:
    key = (int(request_cls.__api_key__), int(request_cls.__version__))  # type: ignore[attr-defined]
    if key in RESPONSES:
        return RESPONSES[key]
    if key[0] in SUPPORTED:
        return response_class(*key)
    module = request_cls.__module__.rsplit(".", 1)[0] + ".response"
    name = request_cls.__name__.removesuffix("Request") + "Response"
    mod = __import__(module, fromlist=[name])
    cls: type = getattr(mod, name)
    return cls


def encode_request(body: Any, correlation_id: int, client_id: str | None = "kgroups") -> bytes:
    cls = type(body)
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(int(cls.__api_key__).to_bytes(2, "big", signed=True))
    out.write(int(cls.__version__).to_bytes(2, "big", signed=True))
    out.write(correlation_id.to_bytes(4, "big", signed=True))
    if client_id is None:
        out.write(b"\xff\xff")
    else:
        raw = client_id.encode()
        out.write(len(raw).to_bytes(2, "big") + raw)
    if cls.__flexible__:
        out.write(b"\x00")
    writer_for(cls)(out, body)
    frame = out.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


async def _tcp(host: str, port: int) -> Streams:
    return await asyncio.open_connection(host, port)


class KafkaConnection:
    """One connection to a Kafka-protocol server."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[type, asyncio.Future[Any]]] = {}
        self._closed: BaseException | None = None
        self._task = asyncio.create_task(self._read_loop(), name="kafka-connection-reader")
        self._reauth: asyncio.TimerHandle | None = None
        self.reauthentications = 0

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str = "kgroups",
        connect: Connector | None = None,
        authenticate: Authenticate | None = None,
    ) -> KafkaConnection:
        reader, writer = await (connect or _tcp)(host, port)
        conn = cls(reader, writer, client_id)
        if authenticate is not None:
            try:
                lifetime = await authenticate(conn)
            except BaseException:
                await conn.close()
                raise
            conn._keep_authenticated(authenticate, lifetime)
        return conn

    def _keep_authenticated(self, authenticate: Authenticate, lifetime: float) -> None:
        if lifetime <= 0 or self.closed:
            return
        loop = asyncio.get_running_loop()

        def due() -> None:
            task = loop.create_task(self._reauthenticate(authenticate), name="kafka-reauth")
            task.add_done_callback(lambda t: None if t.cancelled() else t.exception())

        self._reauth = loop.call_later(lifetime * random.uniform(0.85, 0.95), due)

    async def _reauthenticate(self, authenticate: Authenticate) -> None:
        try:
            lifetime = await authenticate(self)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the session ends with it
            self._fail(ConnectionClosed(f"re-authentication failed: {exc}"))
            return
        self.reauthentications += 1
        self._keep_authenticated(authenticate, lifetime)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def request(self, body: Any) -> Any:
        """Send `body` and wait for the matching response object."""
        if self._closed is not None:
            raise ConnectionClosed(f"connection is closed: {self._closed}")
        correlation_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = (_response_class(type(body)), future)
        try:
            self._writer.write(encode_request(body, correlation_id, self._client_id))
            await self._writer.drain()
        except ConnectionError as exc:
            self._fail(ConnectionClosed(str(exc) or "connection lost while sending"))
        return await future

    async def _read_loop(self) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await self._reader.readexactly(4))
                if not 4 <= size <= DEFAULT_MAX_FRAME_BYTES:
                    raise ConnectionClosed(f"answer of {size} bytes from the server")
                frame = await self._reader.readexactly(size)
                correlation_id = int.from_bytes(frame[:4], "big", signed=True)
                waiting = self._waiting.pop(correlation_id, None)
                if waiting is None:
                    raise ConnectionClosed(f"answer to unknown request {correlation_id}")
                response_cls, future = waiting
                offset = 4
                view = memoryview(frame)
                api_key = int(response_cls.__api_key__)  # type: ignore[attr-defined]
                if response_cls.__flexible__ and api_key != 18:  # type: ignore[attr-defined]
                    offset = skip_tagged_fields(view, offset)  # response header v1
                body = read_entity(response_cls, view, offset)
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self._fail(ConnectionClosed(str(exc) or "connection closed by the server"))
        except asyncio.CancelledError:
            self._fail(ConnectionClosed("connection closed"))
            raise
        except Exception as exc:  # noqa: BLE001  (an undecodable answer: the stream is unusable)
            self._fail(ConnectionClosed(f"undecodable answer: {exc!r}"))
        finally:
            self._writer.close()

    def _fail(self, exc: BaseException) -> None:
        """Close for good: every waiting request fails with `exc` now."""
        if self._closed is None:
            self._closed = exc
        if self._reauth is not None:
            self._reauth.cancel()
        waiting, self._waiting = self._waiting, {}
        for _, future in waiting.values():
            if not future.done():
                future.set_exception(exc)
                future.exception()  # a caller that gave up must not leave it "never retrieved"
        self._writer.close()

    async def close(self) -> None:
        self._fail(ConnectionClosed("connection closed"))
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


def fixed(host: str, port: int) -> Locate:
    """A `locate` for a server at a known address."""

    async def locate(deadline: float) -> tuple[str, int]:
        return host, port

    return locate


class ReconnectingConnection:
    """A connection to whatever server `locate` names, re-established after failures."""

    def __init__(
        self,
        locate: Locate,
        *,
        client_id: str,
        timeout: float,
        connect: Connector | None = None,
        authenticate: Authenticate | None = None,
    ) -> None:
        self._locate = locate
        self._client_id = client_id
        self.timeout = timeout
        self._connect = connect or _tcp
        self._authenticate = authenticate
        self._conn: KafkaConnection | None = None
        self._opening: asyncio.Task[KafkaConnection] | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def ask(self, body: object, answer: type[R], *, timeout: float | None = None) -> R:
        """`request`, typed: the answer must be an `answer` (the response class of the
        request's API and version), which mypy then sees; anything else is a bug here."""
        response = await self.request(body, timeout=timeout)
        if not isinstance(response, answer):
            raise TypeError(f"expected {answer.__name__}, got {type(response).__name__}")
        return response

    async def request(self, body: Any, *, timeout: float | None = None) -> Any:
        """Send `body`; any failure within `timeout` (locating, connecting, the answer)
        drops the connection and raises `CoordinatorUnavailable`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout if timeout is None else timeout)
        conn: KafkaConnection | None = None
        try:
            async with asyncio.timeout_at(deadline):
                conn = await self._connection(deadline)
                return await conn.request(body)
        except (ConnectionError, TimeoutError) as exc:
            await self._drop(conn)
            if isinstance(exc, CoordinatorUnavailable):
                raise
            reason = str(exc) or ("no answer in time" if isinstance(exc, TimeoutError) else "")
            raise CoordinatorUnavailable(reason or type(exc).__name__) from exc
        except asyncio.CancelledError:
            await asyncio.shield(self._drop(conn))
            raise

    async def _connection(self, deadline: float) -> KafkaConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._opening is None or self._opening.done():
            self._opening = asyncio.create_task(self._open(deadline), name="kafka-connect")
            # Read the outcome even when every caller gave up waiting for it.
            self._opening.add_done_callback(lambda t: None if t.cancelled() else t.exception())
        # Shielded: a caller that gives up must not cancel a connect others wait for.
        return await asyncio.shield(self._opening)

    async def _open(self, deadline: float) -> KafkaConnection:
        try:
            async with asyncio.timeout_at(deadline):
                host, port = await self._locate(deadline)
                try:
                    conn = await KafkaConnection.open(
                        host, port, client_id=self._client_id, connect=self._connect,
                        authenticate=self._authenticate,
                    )  # fmt: skip
                except OSError as exc:
                    raise CoordinatorUnavailable(f"cannot connect to {host}:{port}: {exc}") from exc
        except TimeoutError as exc:
            raise CoordinatorUnavailable("no server found in time") from exc
        self._conn = conn
        return conn

    async def _drop(self, conn: KafkaConnection | None) -> None:
        if conn is not None and conn is self._conn:
            self._conn = None
        if conn is not None:
            await conn.close()

    async def reset(self) -> None:
        """Forget the server: the next request locates it and connects again."""
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done():
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await opening
        await self._drop(self._conn)

    async def close(self) -> None:
        await self.reset()
