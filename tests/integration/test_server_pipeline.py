"""The server's ordered pipeline, observed from real connections.

A store whose writes can be held or failed shows the guarantees directly: no reply leaves
before the records it depends on (and all earlier records) are durable; writes queued
behind a slow one are committed together; a failed write stops the coordinator without
acknowledging anything.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.consumer_group_heartbeat.v1 import request as cgh
from kio.schema.heartbeat.v4 import request as hb
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_fetch.v8 import request as of

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core.records import Record
from kgroups.coordinator.server import CoordinatorServer, ServerSettings
from kgroups.coordinator.store import Store, StoreError
from kgroups.protocol.build import build
from kgroups.protocol.client import ConnectionClosed, KafkaConnection
from kgroups.protocol.errors import ErrorCode

E = ErrorCode


class GatedStore(Store):
    """A real SQLite store whose appends wait for the test to open the gate."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[int] = []
        self.fail_next = False

    def append(self, records: Sequence[Record]) -> None:
        if records:
            self.gate.wait(timeout=30)
            if self.fail_next:
                raise StoreError("disk on fire")
            self.batches.append(len(records))
        super().append(records)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[CoordinatorServer, GatedStore]]:
    store = GatedStore(tmp_path)
    settings = ServerSettings(
        port=0, data_dir=tmp_path, coordinator=CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    )
    srv = CoordinatorServer(settings, store=store)
    await srv.start()
    yield srv, store
    store.gate.set()
    if srv.failure is None:
        await srv.stop()


def commit(group: str, offset: int) -> Any:
    return build(
        oc.OffsetCommitRequest,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset}]}
            ],
        },
    )


async def create_topic(port: int) -> None:
    from kgroups import admin

    await admin.create_topic("127.0.0.1", port, "t", 1)


async def test_no_reply_leaves_before_the_records_ahead_of_it_are_durable(
    server: tuple[CoordinatorServer, GatedStore],
) -> None:
    srv, store = server
    await create_topic(srv.port)
    a = await KafkaConnection.open("127.0.0.1", srv.port)
    b = await KafkaConnection.open("127.0.0.1", srv.port)
    store.gate.clear()
    committing = asyncio.create_task(a.request(commit("g", 5)))
    await asyncio.sleep(0.2)
    # A heartbeat writes nothing, but it was decided after the commit: it must wait too.
    heartbeat = asyncio.create_task(
        b.request(
            build(hb.HeartbeatRequest, {"group_id": "g", "generation_id": 0, "member_id": "x"})
        )
    )
    await asyncio.sleep(0.2)
    assert not committing.done() and not heartbeat.done()
    store.gate.set()
    response = await asyncio.wait_for(committing, 5)
    assert response.topics[0].partitions[0].error_code is E.none
    assert (await asyncio.wait_for(heartbeat, 5)).error_code is E.unknown_member_id
    await a.close()
    await b.close()


async def test_writes_queued_behind_a_slow_one_are_committed_together(
    server: tuple[CoordinatorServer, GatedStore],
) -> None:
    srv, store = server
    await create_topic(srv.port)
    conns = [await KafkaConnection.open("127.0.0.1", srv.port) for _ in range(6)]
    store.batches.clear()
    store.gate.clear()
    first = asyncio.create_task(conns[0].request(commit("g0", 1)))
    await asyncio.sleep(0.1)
    rest = [asyncio.create_task(c.request(commit(f"g{i}", i))) for i, c in enumerate(conns[1:], 1)]
    await asyncio.sleep(0.2)
    store.gate.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), 5)
    assert store.batches == [1, 5]
    for c in conns:
        await c.close()


async def test_a_failed_write_stops_the_coordinator_and_acknowledges_nothing(
    server: tuple[CoordinatorServer, GatedStore], tmp_path: Path
) -> None:
    srv, store = server
    await create_topic(srv.port)
    conn = await KafkaConnection.open("127.0.0.1", srv.port)
    store.fail_next = True
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(conn.request(commit("g", 7)), 5)
    assert isinstance(srv.failure, StoreError)
    with pytest.raises(StoreError):
        await asyncio.wait_for(srv.serve_forever(), 5)
    with pytest.raises(OSError):
        await KafkaConnection.open("127.0.0.1", srv.port)
    await conn.close()
    store.close()

    # A restart recovers from what was durable: the unacknowledged commit is not there.
    settings = ServerSettings(port=0, data_dir=tmp_path)
    again = CoordinatorServer(settings)
    await again.start()
    conn = await KafkaConnection.open("127.0.0.1", again.port)
    fetched = await conn.request(
        build(of.OffsetFetchRequest, {"groups": [{"group_id": "g", "topics": None}]})
    )
    assert fetched.groups[0].topics == ()
    await conn.close()
    await again.stop()


async def test_a_heartbeat_sent_again_byte_for_byte_is_answered_for_the_group_as_it_is_now(
    server: tuple[CoordinatorServer, GatedStore],
) -> None:
    """A steady member sends the same bytes with every heartbeat (the server decodes them
    once per connection): each is still answered as what it asks now, with its own
    correlation id, and different bytes of the same length are read for what they say."""
    srv, _ = server
    await create_topic(srv.port)
    a = await KafkaConnection.open("127.0.0.1", srv.port)
    b = await KafkaConnection.open("127.0.0.1", srv.port)
    ids = str(uuid.uuid4()), str(uuid.uuid4())

    def heartbeat(member: str, epoch: int, join: bool = False) -> Any:
        fields: dict[str, Any] = {"group_id": "g", "member_id": member, "member_epoch": epoch,
                                  "topic_partitions": [] if join else None}  # fmt: skip
        if join:
            fields |= {"rebalance_timeout": 30_000, "subscribed_topic_names": ["t"]}
        return build(cgh.ConsumerGroupHeartbeatRequest, fields)

    joined = await a.request(heartbeat(ids[0], 0, join=True))
    assert joined.error_code is E.none and joined.member_epoch == 2  # Kafka 4.3+'s first
    steady = heartbeat(ids[0], 2)
    for _ in range(3):  # the same bytes (but for the correlation id) each time
        answer = await a.request(steady)
        assert (answer.error_code, answer.member_epoch) == (E.none, 2)
    # Same length, one byte apart: an epoch the member is not at.
    assert (await a.request(heartbeat(ids[0], 7))).error_code is E.fenced_member_epoch
    assert (await a.request(steady)).error_code is E.none
    # The group moves on (B joins): A's very same bytes now get the new epoch.
    assert (await b.request(heartbeat(ids[1], 0, join=True))).error_code is E.none
    moved = await a.request(steady)
    assert (moved.error_code, moved.member_epoch) == (E.none, 3)
    await a.close()
    await b.close()
