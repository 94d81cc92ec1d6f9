"""A minimal asyncio Kafka protocol connection: send a kio request, await its response.

Used by the CLI (`kgroups topic create`), the tests and, later, the member library.
Requests may be pipelined; responses are matched by correlation id. The caller chooses
the version by choosing the kio class (`kio.schema.<api>.v<N>.request`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
from typing import Any

from kgroups.protocol.extensions import RESPONSES
from kgroups.protocol.frames import SIZE, skip_tagged_fields, writer_for
from kgroups.protocol.tags import read_entity


class ConnectionClosed(ConnectionError):
    """The peer closed the connection before answering."""


def _response_class(request_cls: type) -> type:
    key = (int(request_cls.__api_key__), int(request_cls.__version__))  # type: ignore[attr-defined]
    if key in RESPONSES:
        return RESPONSES[key]
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


class KafkaConnection:
    """One TCP connection to a Kafka-protocol server."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[type, asyncio.Future[Any]]] = {}
        self._task = asyncio.create_task(self._read_loop(), name="kafka-connection-reader")

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str = "kgroups") -> KafkaConnection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, client_id)

    async def request(self, body: Any) -> Any:
        """Send `body` and wait for the matching response object."""
        if self._task.done():
            raise ConnectionClosed("connection is closed")
        correlation_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        response_cls = _response_class(type(body))
        self._waiting[correlation_id] = (response_cls, future)
        self._writer.write(encode_request(body, correlation_id, self._client_id))
        await self._writer.drain()
        return await future

    async def _read_loop(self) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                correlation_id = int.from_bytes(frame[:4], "big", signed=True)
                response_cls, future = self._waiting.pop(correlation_id)
                offset = 4
                view = memoryview(frame)
                api_key = int(response_cls.__api_key__)  # type: ignore[attr-defined]
                if response_cls.__flexible__ and api_key != 18:  # type: ignore[attr-defined]
                    offset = skip_tagged_fields(view, offset)  # response header v1
                body = read_entity(response_cls, view, offset)
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self._fail(ConnectionClosed(str(exc) or "connection closed"))
        except Exception as exc:  # a response we cannot decode: fail every waiter
            self._fail(exc)
            raise

    def _fail(self, exc: BaseException) -> None:
        for _, future in self._waiting.values():
            if not future.done():
                future.set_exception(exc)
        self._waiting.clear()

    async def close(self) -> None:
        self._writer.close()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()
