"""An asyncio event loop on virtual time, and in-memory transports for it.

`FakeTimeLoop` is a real `SelectorEventLoop` whose clock is a number: when nothing is
ready, instead of sleeping in `select()` until the next timer, it moves the clock to
that timer. Real code (the `GroupMember`, the `CoordinatorServer`) runs unchanged on
it; a minute of heartbeats, session timeouts and rebalances takes milliseconds, and the
same seed gives the same schedule (keep PYTHONHASHSEED fixed to replay across runs).
`run_in_executor` runs the function inline, so no thread's timing leaks in.

`Wire` is a pair of in-memory transports with a latency per write, which a test can
cut (writes vanish, as on a partitioned network) or reset (both ends see the
connection close).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from typing import Any


class Idle(RuntimeError):
    """Nothing is ready and no timer is set: the simulation can never move again."""


class _VirtualSelector(selectors.BaseSelector):
    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.advance: Callable[[float], None] = lambda seconds: None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)  # only the loop's own wake-up pipe is registered
        if events or timeout == 0:
            return events
        if timeout is None:
            raise Idle("no callback is ready and no timer is set")
        self.advance(timeout)
        return []

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Any:
        return self._real.get_map()


class FakeTimeLoop(asyncio.SelectorEventLoop):
    """See the module docstring. `after_step` runs after every turn of the loop."""

    def __init__(self, start: float = 1_000.0) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        self._now = start
        selector.advance = self._advance
        self.after_step: Callable[[], None] = lambda: None
        self.turns = 0

    def time(self) -> float:
        return self._now

    def _advance(self, seconds: float) -> None:
        self._now += max(seconds, 0.0)

    def _run_once(self) -> None:
        super()._run_once()  # type: ignore[misc]
        self.turns += 1
        self.after_step()

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except Exception as exc:  # noqa: BLE001 (delivered to the awaiting code, as a thread would)
            future.set_exception(exc)
        return future


class End(asyncio.Transport):
    """One end of a `Wire`."""

    def __init__(self, wire: Wire, name: str) -> None:
        super().__init__()
        self.wire = wire
        self.name = name
        self.protocol: asyncio.Protocol | None = None
        self.peer: End | None = None
        self.closing = False
        self.shut = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return (self.peer.name if self.peer else "sim", 9092)
        return default

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.wire.cut:
            return
        self.wire.carry(self, bytes(data))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        self.shut = True  # a closed socket reads nothing more
        self.wire.finish()

    def abort(self) -> None:
        self.wire.reset()


class Wire:
    """Two connected transports. Writes arrive after `latency()` seconds, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, latency: Callable[[], float],
                 client: str) -> None:  # fmt: skip
        self.loop = loop
        self.latency = latency
        self.client = End(self, client)
        self.server = End(self, "coordinator")
        self.client.peer, self.server.peer = self.server, self.client
        self.cut = False
        self.closed = False
        self._last_arrival = {id(self.client): 0.0, id(self.server): 0.0}

    def carry(self, sender: End, data: bytes) -> None:
        receiver = sender.peer
        assert receiver is not None
        at = max(self.loop.time() + self.latency(), self._last_arrival[id(sender)])
        self._last_arrival[id(sender)] = at

        def arrive() -> None:
            if not (self.closed or self.cut or receiver.shut) and receiver.protocol is not None:
                receiver.protocol.data_received(data)

        self.loop.call_at(at, arrive)

    def finish(self) -> None:
        """A graceful close: what was written still arrives, then both ends see EOF."""
        if self.closed or self.client.closing:
            return
        for end in (self.client, self.server):
            end.closing = True
        at = max(self._last_arrival.values()) + 1e-6
        self.loop.call_at(max(at, self.loop.time()), self.reset)

    def reset(self) -> None:
        """Both ends see the connection close now; what is in flight is lost (an RST)."""
        if self.closed:
            return
        self.closed = True
        for end in (self.client, self.server):
            end.closing = True
            protocol = end.protocol
            if protocol is not None:
                self.loop.call_soon(protocol.connection_lost, None)


async def open_streams(wire: Wire) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The client end of `wire` as the streams `asyncio.open_connection` would give."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 22, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    wire.client.protocol = protocol
    protocol.connection_made(wire.client)
    return reader, asyncio.StreamWriter(wire.client, protocol, reader, loop)
