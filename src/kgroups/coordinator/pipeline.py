"""The ordered writer: records durable before the replies that depend on them.

Every core call returns `Effects`. They join one pipeline: their records go to the store
through a single writer thread, batched (one group commit for everything queued while
the previous write ran), and their replies leave only once everything before them is
durable. A reply with no records and nothing ahead of it leaves at once (the heartbeat
fast path). A failed write is reported once to the owner, which stops the coordinator:
replies could otherwise get ahead of durable state, and a restart recovers from the
store.

The writer owns the store and its thread; the server owns the sockets. A reply finds
its connection through the `Pending` entry registered when its request was handled.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from kgroups.coordinator.connection import Connection
from kgroups.coordinator.core import Effects, Reply
from kgroups.coordinator.core.leasing import set_aside
from kgroups.coordinator.core.msg_cluster import FetchResponse
from kgroups.coordinator.core.msg_group import HeartbeatResponse
from kgroups.coordinator.core.records import (
    GroupConfigRecord,
    GroupRecord,
    OffsetRecord,
    Record,
    TopicRecord,
)
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.coordinator.store import RecordStore
from kgroups.coordinator.store.base import Fenced, GlobalsMoved
from kgroups.coordinator.wire import encode
from kgroups.protocol.apis import api_name, metric_api_name
from kgroups.protocol.frames import encode_response

log = logging.getLogger("kgroups.coordinator")

T = TypeVar("T")

HEAD = struct.Struct(">ii")
"""A response frame's size and correlation id, in front of a cached payload."""
_CACHEABLE = (HeartbeatResponse,)
"""Answers whose bytes depend only on their version and content (one API each): encoded
once per (version, content)."""


@dataclass(slots=True)
class Pending:
    """A request handled by the core whose reply has not left yet."""

    conn: Connection
    api_key: int
    api_version: int
    correlation_id: int
    received: float
    """loop.time() when the request arrived (request latency)."""
    group_id: str | None = None
    """The group a request names, when it names one (commits per group; what a refused
    write's answers were about)."""


class OrderedWriter:
    """Persists effects' records in order and sends their replies once they are durable."""

    def __init__(
        self,
        store: RecordStore,
        metrics: CoordinatorMetrics,
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._on_failure = on_failure
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgroups-store")
        self._loop: asyncio.AbstractEventLoop | None = None
        self.queue: list[Effects] = []
        """Effects waiting for the write in progress."""
        self.writing = False
        self.submitted = 0
        """Effects queued so far (for `drained`: everything queued before a point)."""
        self.finished = 0
        """Of those, how many were written and answered, or refused."""
        self.halted = False
        """Set when the coordinator stops serving: nothing more is answered."""
        self.pending: dict[int, Pending] = {}
        self._payloads: dict[tuple[int, object], bytes] = {}
        self._debug = log.isEnabledFor(logging.DEBUG)
        self.shard_of: Callable[[str], int] | None = None
        """Replicas: a group's shard (to set aside what a refused write held)."""
        self.on_fenced: Callable[[frozenset[int]], None] = lambda shards: None
        """Replicas: shards whose write was refused (another replica holds them now)."""

    async def open(self) -> tuple[str, list[Record]]:
        """Open the store: its cluster id and every record, in order, to replay."""
        loop = self._loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._store.open)
        cluster_id = await loop.run_in_executor(self._executor, self._store.cluster_id)
        records: list[Record] = await loop.run_in_executor(
            self._executor, lambda: list(self._store.load())
        )
        return cluster_id, records

    async def run(self, work: Callable[[], T]) -> T:
        """`work` on the store's thread once every write queued before it is done: a
        shard's records are read after everything its replica produced for it. (Records
        still waiting in `queue` are not on the store's thread yet: a read submitted to
        the thread at once would overtake them, and a shard loaded from it would forget
        what they held once they were written and acknowledged.)"""
        assert self._loop is not None
        await self.drained()
        return await self._loop.run_in_executor(self._executor, work)

    async def drained(self) -> None:
        """Wait until everything queued so far is written or refused (or the writer
        halted); what is queued while waiting is not waited for."""
        mark = self.submitted
        while self.finished < mark and not self.halted:
            await asyncio.sleep(0.005)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being written: a reply may leave at once."""
        return not self.queue and not self.writing

    def submit(self, effects: Effects) -> None:
        if effects.observations:
            self._metrics.observe(effects.observations)
        if not effects.records:
            if not effects.replies:
                return
            if self.idle:
                self._deliver(effects.replies)
                return
        self.queue.append(effects)
        self.submitted += 1
        if not self.writing:
            self._flush()

    def _flush(self) -> None:
        while self.queue and not self.writing and not self.halted:
            batch, self.queue = self.queue, []
            records = [r for e in batch for r in e.records]
            if not records:
                for effects in batch:
                    self._deliver(effects.replies)
                self.finished += len(batch)
                continue
            self.writing = True
            assert self._loop is not None
            future = self._loop.run_in_executor(self._executor, self._append, records)
            future.add_done_callback(functools.partial(self._written, batch=batch))

    def _append(self, records: list[Record]) -> float:
        """On the writer thread: write, and say how long it took."""
        started = time.perf_counter()
        self._store.append(records)
        return time.perf_counter() - started

    def _written(self, future: asyncio.Future[float], *, batch: list[Effects]) -> None:
        self.writing = False
        exc = future.exception()
        if isinstance(exc, Fenced) and self.shard_of is not None and not self.halted:
            self._set_aside(batch, exc.shards)
            return
        if isinstance(exc, GlobalsMoved) and self.shard_of is not None and not self.halted:
            self._globals_moved(batch)
            return
        if exc is not None:
            self._on_failure(exc)
            return
        self._metrics.written(sum(len(e.records) for e in batch), future.result())
        self.finished += len(batch)
        if self.halted:
            return  # stopping: nobody is answered any more
        for effects in batch:
            self._deliver(effects.replies)
        self._flush()

    def _set_aside(self, batch: list[Effects], shards: frozenset[int]) -> None:
        """A write refused because `shards` moved to another replica: nothing of it was
        written; `leasing.set_aside` says what is written again and what is never
        acknowledged (its connections close, so the clients look for the new
        coordinator)."""
        again, lost = set_aside(batch, self.queue, shards, written_to=self._written_to,
                                answers_about=self._answers_about)  # fmt: skip
        for effects in lost:
            for reply in effects.replies:
                pending = self.pending.pop(reply.ref, None)
                if pending is not None:
                    pending.conn.abort("its group moved to another coordinator")
        log.warning("a write to shards %s was refused: another replica holds them now",
                    sorted(shards))  # fmt: skip
        self.finished += len(lost)
        self.queue = again
        self.on_fenced(shards)
        self._flush()

    def _globals_moved(self, batch: list[Effects]) -> None:
        """A write of topics or group settings refused because another replica changed
        them since this one read them: nothing of the batch was written. What wrote them
        is not acknowledged (its connection closes: the client asks again, and the next
        request that changes them is judged on the cluster's view read again); the shards
        of any group they also wrote are loaded again (their state here went ahead of the
        database); the rest is written again."""
        shard_of = self.shard_of
        assert shard_of is not None
        cluster_wide = (TopicRecord, GroupConfigRecord)
        refused = [e for e in batch if any(isinstance(r, cluster_wide) for r in e.records)]
        shards = frozenset(
            shard_of(r.group_id)
            for e in refused
            for r in e.records
            if isinstance(r, GroupRecord | OffsetRecord)
        )
        for effects in refused:
            for reply in effects.replies:
                pending = self.pending.pop(reply.ref, None)
                if pending is not None:
                    pending.conn.abort("the cluster's topics or group settings changed meanwhile")
        log.warning("a write of topics or group settings was refused: another replica "
                    "changed them first")  # fmt: skip
        self.finished += len(refused)
        self.queue = [e for e in batch if not any(e is r for r in refused)] + self.queue
        if shards:
            self.on_fenced(shards)
        self._flush()

    def _written_to(self, effects: Effects) -> set[int]:
        """The shards whose groups `effects`' records write."""
        shard_of = self.shard_of
        assert shard_of is not None
        return {
            shard_of(r.group_id)
            for r in effects.records
            if isinstance(r, GroupRecord | OffsetRecord)
        }

    def _answers_about(self, effects: Effects) -> set[int]:
        """The shards of the groups `effects`' answers are about (their requests named)."""
        shard_of = self.shard_of
        assert shard_of is not None
        shards = set()
        for reply in effects.replies:
            pending = self.pending.get(reply.ref)
            if pending is not None and pending.group_id is not None:
                shards.add(shard_of(pending.group_id))
        return shards

    def _deliver(self, replies: tuple[Reply, ...]) -> None:
        for reply in replies:
            pending = self.pending.pop(reply.ref, None)
            if pending is not None:
                self.answer(pending, reply)

    def answer(self, pending: Pending, reply: Reply) -> None:
        """Encode `reply` and send it on its connection (in order behind earlier ones)."""
        if pending.conn.closed:
            return
        if self._debug:
            log.debug("-> %s #%d %r", pending.conn.peer, reply.ref, reply.body)
        try:
            frame = self._frame(pending, reply)
        except Exception as exc:
            log.exception("cannot encode %s", api_name(pending.api_key))
            pending.conn.abort(f"internal error encoding a response: {exc!r}")
            return
        assert self._loop is not None
        waited = self._loop.time() - pending.received
        if type(reply.body) is FetchResponse and reply.body.wait_ms > 0:
            pending.conn.complete_later(reply.body.wait_ms / 1000, frame)
            waited += reply.body.wait_ms / 1000
        else:
            pending.conn.complete(frame)
        self._metrics.answered(metric_api_name(pending.api_key), reply.body, waited,
                               pending.group_id)  # fmt: skip

    def _frame(self, pending: Pending, reply: Reply) -> bytes:
        if type(reply.body) in _CACHEABLE:
            key = (pending.api_version, reply.body)
            payload = self._payloads.get(key)
            if payload is None:
                body = encode(pending.api_key, pending.api_version, reply.body)
                payload = encode_response(pending.api_key, pending.api_version, 0, body)[8:]
                self._payloads[key] = payload
            return HEAD.pack(len(payload) + 4, pending.correlation_id) + payload
        body = encode(pending.api_key, pending.api_version, reply.body)
        return encode_response(pending.api_key, pending.api_version, pending.correlation_id, body)

    async def close(self, *, write_queued: bool) -> None:
        """Wait for the write in progress; write what is queued (unless a write failed:
        the store is not trusted then); close the store and stop the writer thread.
        Nothing queued is answered any more."""
        loop = asyncio.get_running_loop()
        try:
            while self.writing:
                await asyncio.sleep(0.005)
            records = [r for e in self.queue for r in e.records]
            self.finished += len(self.queue)
            self.queue.clear()
            if records and write_queued:
                await loop.run_in_executor(self._executor, self._store.append, records)
            await loop.run_in_executor(self._executor, self._store.close)
        finally:
            self._executor.shutdown(wait=False)
