"""`SyncGroupMember`: the same member for code that is not async (a Spark driver, a script).

The `GroupMember` runs on an event loop in a background thread; every method here hands
the call to that loop and waits for the result, so checks such as a commit's pinned
generation happen on the member's own loop, never between two of its steps.

Listener callbacks run in a worker thread, one at a time, while the loop goes on
heartbeating: a revocation callback may take as long as the work it waits for needs
(up to the rebalance timeout; past it the partitions are reported lost while the callback
still runs, as a Java consumer is dropped when max.poll.interval passes). A revocation
callback that returns means "stopped".
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from kgroups.client.errors import MemberError, OffsetAndMetadata, TopicPartition
from kgroups.client.listener import Callback, Partitions
from kgroups.client.member import GroupMember

T = TypeVar("T")


class _InThreads:
    """The application's listener, each callback run in a worker thread."""

    def __init__(self, listener: object) -> None:
        self._listener = listener

    async def _run(self, name: Callback, partitions: Partitions) -> None:
        callback = getattr(self._listener, name, None)
        if callback is None:
            return
        if inspect.iscoroutinefunction(callback):
            await callback(partitions)
        else:
            await asyncio.to_thread(callback, partitions)

    async def on_partitions_revoked(self, partitions: Partitions) -> None:
        await self._run("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: Partitions) -> None:
        await self._run("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: Partitions) -> None:
        await self._run("on_partitions_lost", partitions)


class LoopThread:
    """An event loop running in a daemon thread, for blocking facades over async code."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (or exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """Stop the loop (after whatever `call` ran last) and wait for the thread."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


class SyncGroupMember:
    """Blocking facade over `GroupMember`; takes the same arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._thread = LoopThread("kgroups-member-loop")
        self._loop = self._thread.loop
        listener = kwargs.get("listener")
        if listener is not None:
            kwargs["listener"] = _InThreads(listener)

        async def make() -> GroupMember:
            return GroupMember(*args, **kwargs)

        self._member = self._call(make())

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._thread.call(coro, timeout)

    @property
    def member(self) -> GroupMember:
        return self._member

    @property
    def assignment(self) -> Partitions:
        return self._member.assignment

    @property
    def generation(self) -> int:
        return self._member.generation

    def start(self, timeout: float | None = None) -> None:
        self._call(self._member.start(timeout=timeout))

    def wait_stable(self, *, after_generation: int = -1, timeout: float | None = None) -> int:
        return self._call(
            self._member.wait_stable(after_generation=after_generation, timeout=timeout)
        )

    @property
    def state(self) -> str:
        return str(self._member.state)

    @property
    def error(self) -> MemberError | None:
        return self._member.error

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        generation: int | None = None,
        log_ends: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """`GroupMember.commit`: pin `generation` to the generation the work was planned in;
        `log_ends`, where the source logs end."""
        self._call(self._member.commit(offsets, generation=generation, log_ends=log_ends))

    def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._call(self._member.committed(list(partitions)))

    def close(self, *, leave: bool | None = None) -> None:
        if not self._loop.is_closed():
            try:
                self._call(self._member.close(leave=leave))
            finally:
                self._thread.close()

    def __enter__(self) -> SyncGroupMember:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
