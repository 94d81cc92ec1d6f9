"""`SyncGroupMember`: the same member for code that is not async (a Spark driver, a script).

The `GroupMember` runs on an event loop in a background thread; every method here hands
the call to that loop and waits for the result. Listener callbacks run on the loop's
thread: keep them short, or hand work to your own threads and wait for it there, because
a revocation callback that returns means "stopped".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from kgroups.client.errors import OffsetAndMetadata, TopicPartition
from kgroups.client.member import GroupMember, Partitions

T = TypeVar("T")


class SyncGroupMember:
    """Blocking facade over `GroupMember`; takes the same arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="kgroups-member-loop", daemon=True
        )
        self._thread.start()

        async def make() -> GroupMember:
            return GroupMember(*args, **kwargs)

        self._member = self._call(make())

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

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

    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        self._call(self._member.commit(offsets))

    def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._call(self._member.committed(list(partitions)))

    def close(self, *, leave: bool | None = None) -> None:
        if not self._loop.is_closed():
            try:
                self._call(self._member.close(leave=leave))
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
                self._loop.close()

    def __enter__(self) -> SyncGroupMember:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
