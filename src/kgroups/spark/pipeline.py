"""`Pipeline`: one Spark application = one group member, for a blocking Spark driver.

The decisions are `loop.BatchLoop`'s (read its docstring for the protocol); this facade
runs it, with its `GroupMember`, on an event loop in a background thread, so that the
driver's main thread can block in `run()` and stop it from a signal handler. Spark's
work (reading a batch, the user's `process`) runs in worker threads meanwhile, and the
member heartbeats through it.
"""

from __future__ import annotations

from typing import Any

from kgroups.client import GroupMember
from kgroups.client.sync import LoopThread
from kgroups.spark.loop import BatchLoop, Process, Progress

__all__ = ["Pipeline", "Process", "Progress"]


class Pipeline:
    """Takes `BatchLoop`'s arguments (the member's options among them)."""

    def __init__(self, **options: Any) -> None:
        self._thread = LoopThread("kgroups-spark-loop")

        async def make() -> BatchLoop:
            return BatchLoop(**options)

        self.loop = self._thread.call(make())

    @property
    def member(self) -> GroupMember:
        return self.loop.member

    def start(self, timeout: float | None = None) -> None:
        self._thread.call(self.loop.start(timeout=timeout))

    def run(self) -> None:
        """Turn the loop until `stop()` (or the member fails, which raises)."""
        self._thread.call(self.loop.run())

    def run_once(self) -> Progress | None:
        return self._thread.call(self.loop.run_once())

    def stop(self) -> None:
        """Safe from a signal handler or any thread: the batch in flight finishes first."""
        self._thread.loop.call_soon_threadsafe(self.loop.stop)

    def close(self) -> None:
        """Leave the group (a batch in flight is waited for, within the rebalance timeout)."""
        if not self._thread.loop.is_closed():
            try:
                self._thread.call(self.loop.close())
            finally:
                self._thread.close()
