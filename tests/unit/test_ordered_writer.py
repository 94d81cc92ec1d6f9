"""The ordered writer with replicas.

A read on the store's thread (a replica loading a shard) comes after every write queued
before it, including writes still waiting behind the one in progress. A replica whose
database went away self-fences, then loads its shards again while its commits wait: had
the load overtaken them, it would have put the older offsets back in memory and an
acknowledged commit would have read back as the one before it.

A write refused by the fence (another replica holds the shard now) is not acknowledged,
and neither is an answer queued behind it about a group of that shard, though it has no
records of its own (a follower's SyncGroup told an assignment that was never written).
A write of topics or group settings from a view another replica changed since is not
acknowledged either; the rest of its batch is written."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from kgroups.coordinator.core import Effects, Reply
from kgroups.coordinator.core.msg_group import HeartbeatResponse
from kgroups.coordinator.core.records import OffsetRecord, OffsetValue, Record, TopicRecord
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.coordinator.pipeline import OrderedWriter, Pending
from kgroups.coordinator.store.base import Fenced, GlobalsMoved
from kgroups.coordinator.store.sqlite import Store


class StalledStore(Store):
    """The real SQLite store whose first write waits for `resume` (a database away)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, synchronous="OFF")
        self.resume = threading.Event()
        self.writing = threading.Event()

    def append(self, records: Sequence[Record]) -> None:
        self.writing.set()
        if not self.resume.wait(10):
            raise TimeoutError("the test never resumed the store")
        super().append(records)


def commit(offset: int, group: str = "g", ref: int = 0) -> Effects:
    value = OffsetValue(offset, -1, "", 0)
    replies = (Reply(ref, HeartbeatResponse()),) if ref else ()
    return Effects(records=(OffsetRecord(group, "t", 0, value),), replies=replies)


def committed(records: list[Record]) -> int | None:
    last = None
    for record in records:
        if isinstance(record, OffsetRecord) and record.value is not None:
            last = record.value.offset
    return last


def test_a_read_waits_for_the_writes_queued_behind_the_one_in_progress(tmp_path: Path) -> None:
    async def scenario() -> tuple[int | None, int | None]:
        store = StalledStore(tmp_path)
        writer = OrderedWriter(store, CoordinatorMetrics(lambda: None, lambda: 0, lambda: 0.0),
                               on_failure=lambda exc: None)  # fmt: skip
        await writer.open()
        writer.submit(commit(47))  # on the store's thread, stalled
        await asyncio.get_running_loop().run_in_executor(None, store.writing.wait, 10)
        writer.submit(commit(48))  # queued behind it
        read = asyncio.create_task(writer.run(lambda: list(store.load())))
        await asyncio.sleep(0.05)
        store.resume.set()
        seen = committed(await read)
        await writer.drained()
        durable = committed(await writer.run(lambda: list(store.load())))
        await writer.close(write_queued=True)
        return seen, durable

    seen, durable = asyncio.run(scenario())
    assert durable == 48
    assert seen == 48, "the read overtook a write queued before it"


def test_drained_waits_only_for_what_was_queued_before(tmp_path: Path) -> None:
    """A steady stream of later writes does not hold a load (or a handover) back."""

    async def scenario() -> bool:
        store = StalledStore(tmp_path)
        store.resume.set()
        writer = OrderedWriter(store, CoordinatorMetrics(lambda: None, lambda: 0, lambda: 0.0),
                               on_failure=lambda exc: None)  # fmt: skip
        await writer.open()
        stop = asyncio.Event()

        async def stream() -> None:
            offset = 0
            while not stop.is_set():
                offset += 1
                writer.submit(commit(offset))
                await asyncio.sleep(0)

        streaming = asyncio.create_task(stream())
        await asyncio.sleep(0.05)
        try:
            await asyncio.wait_for(writer.drained(), 5)
            return True
        except TimeoutError:
            return False
        finally:
            stop.set()
            await streaming
            await writer.drained()
            await writer.close(write_queued=True)

    assert asyncio.run(scenario())


class RefusingStore(Store):
    """The real SQLite store, refusing its first write as a fenced replica's is."""

    def __init__(self, data_dir: Path, shard: int) -> None:
        super().__init__(data_dir, synchronous="OFF")
        self.shard = shard
        self.resume = threading.Event()
        self.refused = False

    def append(self, records: Sequence[Record]) -> None:
        if not self.refused:
            self.refused = True
            if not self.resume.wait(10):
                raise TimeoutError("the test never resumed the store")
            raise Fenced(frozenset({self.shard}))
        super().append(records)


class Conn:
    """Where an answer goes: what the writer did with it."""

    def __init__(self) -> None:
        self.closed = False
        self.aborted: str | None = None
        self.answers = 0
        self.peer = "test"

    def abort(self, reason: str) -> None:
        self.aborted, self.closed = reason, True

    def complete(self, frame: bytes) -> None:
        self.answers += 1


SHARD_OF = {"g": 1, "h": 2}.__getitem__


async def replica_writer(store: Store) -> tuple[OrderedWriter, list[frozenset[int]]]:
    """An open writer as a replica's is (groups in shards), and the shards it reports
    refused."""
    writer = OrderedWriter(store, CoordinatorMetrics(lambda: None, lambda: 0, lambda: 0.0),
                           on_failure=lambda exc: None)  # fmt: skip
    await writer.open()
    writer.shard_of = SHARD_OF
    fenced: list[frozenset[int]] = []
    writer.on_fenced = fenced.append
    return writer, fenced


def test_answers_queued_behind_a_refused_write_about_its_shard_are_not_given(
    tmp_path: Path,
) -> None:
    async def scenario() -> dict[str, Conn]:
        store = RefusingStore(tmp_path, SHARD_OF("g"))
        writer, fenced = await replica_writer(store)
        conns = {name: Conn() for name in ("commit", "sync", "other-group", "no-group")}
        loop = asyncio.get_running_loop()
        for ref, (name, group) in enumerate(
            [("commit", "g"), ("sync", "g"), ("other-group", "h"), ("no-group", None)], 1
        ):
            writer.pending[ref] = Pending(conns[name], 12, 4, ref, loop.time(), group)  # type: ignore[arg-type]
        writer.submit(commit(5, "g", ref=1))  # the write the fence refuses
        writer.submit(Effects(replies=(Reply(2, HeartbeatResponse()),)))  # read from it
        writer.submit(Effects(replies=(Reply(3, HeartbeatResponse()),)))  # another shard's
        writer.submit(Effects(replies=(Reply(4, HeartbeatResponse()),)))  # no group named
        store.resume.set()
        await asyncio.wait_for(writer.drained(), 5)
        assert fenced == [frozenset({1})]
        await writer.close(write_queued=True)
        return conns

    conns = asyncio.run(scenario())
    assert conns["commit"].aborted and conns["commit"].answers == 0
    assert conns["sync"].aborted and conns["sync"].answers == 0
    assert conns["other-group"].answers == 1 and not conns["other-group"].aborted
    assert conns["no-group"].answers == 1 and not conns["no-group"].aborted


class MovedStore(Store):
    """The real SQLite store, refusing its first write of topics or group settings as a
    replica's is when another replica changed them since it read them."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, synchronous="OFF")
        self.refused = False

    def append(self, records: Sequence[Record]) -> None:
        if not self.refused and any(isinstance(r, TopicRecord) for r in records):
            self.refused = True
            raise GlobalsMoved(3)
        super().append(records)


def test_a_write_of_a_stale_view_of_the_topics_is_not_acknowledged_and_the_rest_is(
    tmp_path: Path,
) -> None:
    """DeleteTopics (a topic's tombstone and, in the same effects, the offsets of a group
    served here) refused for a stale view: its client's connection closes, the group's
    shard is loaded again (its offsets in memory went ahead of the database), and a commit
    of another group in the same batch is written and answered."""

    async def scenario() -> tuple[dict[str, Conn], list[frozenset[int]], list[Record]]:
        store = MovedStore(tmp_path)
        writer, fenced = await replica_writer(store)
        conns = {name: Conn() for name in ("delete-topic", "commit")}
        loop = asyncio.get_running_loop()
        writer.pending[1] = Pending(conns["delete-topic"], 12, 4, 1, loop.time(), None)  # type: ignore[arg-type]
        writer.pending[2] = Pending(conns["commit"], 12, 4, 2, loop.time(), "h")  # type: ignore[arg-type]
        deleted = (TopicRecord("t", None), OffsetRecord("g", "t", 0, None))
        writer.writing = True  # both queued, then written in one batch
        writer.submit(Effects(records=deleted, replies=(Reply(1, HeartbeatResponse()),)))
        writer.submit(commit(7, "h", ref=2))
        writer.writing = False
        writer._flush()
        await asyncio.wait_for(writer.drained(), 5)
        await writer.close(write_queued=True)
        reader = Store(tmp_path, synchronous="OFF")
        reader.open()
        stored = list(reader.load())
        reader.close()
        return conns, fenced, stored

    conns, fenced, stored = asyncio.run(scenario())
    assert conns["delete-topic"].aborted and conns["delete-topic"].answers == 0
    assert conns["commit"].answers == 1 and not conns["commit"].aborted
    assert fenced == [frozenset({SHARD_OF("g")})]
    assert committed(stored) == 7
    assert not [r for r in stored if isinstance(r, TopicRecord)]
