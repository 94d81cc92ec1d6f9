"""Calling the application's rebalance listener, and what its failures mean.

Callbacks may be plain functions or coroutines. A coroutine runs on the member's loop and
can be cancelled: when the member has to give partitions up before a callback finished
(a revocation still running when the rebalance timeout passes), the callback's task gets
`CancelledError`, the asyncio way to say "stop now", and the partitions are then reported
lost. A plain function runs to completion on the loop, so it must be quick; the
`SyncGroupMember` facade runs plain callbacks in a worker thread instead, so that slow
ones do not stop heartbeats.

A callback that raises is not shrugged off: a revocation callback that failed may not
have stopped work, so the member cannot hand those partitions on as if it had. The
exception becomes `ListenerError`, which the member treats as fatal.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal, Protocol

from kgroups.client.errors import ListenerError, TopicPartition

Partitions = frozenset[TopicPartition]
Callback = Literal["on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"]


class RebalanceListener(Protocol):
    """Java's ConsumerRebalanceListener. Methods may be async; all are optional."""

    def on_partitions_revoked(self, partitions: Partitions) -> Any: ...
    def on_partitions_assigned(self, partitions: Partitions) -> Any: ...
    def on_partitions_lost(self, partitions: Partitions) -> Any: ...


async def invoke(listener: object | None, name: Callback, partitions: Partitions) -> None:
    """Call `listener.name(partitions)` if it exists and wait for it; its exception is
    raised as `ListenerError`. Cancellation passes through to a coroutine callback."""
    callback: Callable[[Partitions], Any] | None = getattr(listener, name, None)
    if callback is None:
        return
    try:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        raise ListenerError(f"rebalance listener {name} raised {exc!r}") from exc
