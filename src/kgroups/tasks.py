"""Background tasks, each named, kept and guarded: one discipline for the coordinator's
edge and the operator.

asyncio keeps only a weak reference to a task: one nobody holds can be collected before it
finishes, and the exception of one nobody awaits surfaces, if ever, as "Task exception was
never retrieved" when it is collected. A `Tasks` holds every task its owner starts until
the task is done, names it after its owner, and hands a failure to a crash policy the
owner chose when it started the task: log it and carry on (a forever task that must not
stop its owner), stop the whole server (a bug in work everything depends on), answer and
close one connection (work done for one client). Cancellation is not a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
CrashPolicy = Callable[[str, BaseException], None]
"""What a crash means: called with the task's name and its exception."""


def log_crash(name: str, exc: BaseException) -> None:
    """The default policy: the crash and its traceback in the log, nothing else."""
    log.error("background task %s crashed", name, exc_info=exc)


class Tasks:
    """The background tasks of one owner (`owner` prefixes their names)."""

    def __init__(self, owner: str, on_crash: CrashPolicy = log_crash) -> None:
        self.owner = owner
        self._on_crash = on_crash
        self._running: dict[asyncio.Task[Any], CrashPolicy] = {}

    def spawn(
        self, name: str, work: Coroutine[Any, Any, T], on_crash: CrashPolicy | None = None
    ) -> asyncio.Task[T]:
        """Start `work` as a task named `owner:name`, kept until done; a crash goes to
        `on_crash` (or the owner's policy)."""
        task = asyncio.get_running_loop().create_task(work, name=f"{self.owner}:{name}")
        self._running[task] = on_crash or self._on_crash
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        policy = self._running.pop(task, log_crash)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        try:
            policy(task.get_name(), exc)
        except Exception:
            log.exception("the crash policy of %s failed", task.get_name())

    @property
    def names(self) -> list[str]:
        """The tasks running now, by name (for logs and tests)."""
        return sorted(t.get_name() for t in self._running)

    def __len__(self) -> int:
        return len(self._running)

    def cancel(self, keep: asyncio.Task[Any] | None = None) -> None:
        """Cancel every task (but `keep`, if given); each is forgotten once done."""
        for task in list(self._running):
            if task is not keep:
                task.cancel()

    async def close(self) -> None:
        """Cancel every task and wait until each has finished."""
        tasks = [t for t in self._running if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`: whether it was set.

    Not `asyncio.wait_for(event.wait(), ...)`: on Python 3.11 a cancellation that arrives
    as the event is set is swallowed (wait_for returns the result; fixed in 3.12). A loop
    pausing that way (a member's heartbeat loop woken at the moment it is stopped) then
    never sees its cancellation, and whoever awaits the cancelled task waits forever: a
    member's close() hung for 15 minutes under load."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
