"""The seven ways members lost their place or their fencing (issue 10), one test each.

Each test reproduces what was seen, with the real coordinator in this process and the
real `GroupMember` (or real processes paused with SIGSTOP, where a frozen process is
the fault); other faults come from a listener that is slow or raises, or from an
exception injected into the coordinator's core. The sidecar version of finding 1, with real
processes, is in test_sidecar.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kgroups import admin
from kgroups.client import (
    CommitFailedError,
    GroupMember,
    ListenerError,
    MemberError,
    MemberState,
    TopicPartition,
)
from kgroups.coordinator.core import CoordinatorConfig, HandlerFailed
from kgroups.coordinator.server import CoordinatorServer, ServerSettings
from kgroups.protocol.client import ConnectionClosed, KafkaConnection
from tests.integration.harness import Coordinator, Member, wait_until
from tests.integration.test_member_reactions import ALL, Recorder, new_member, server

__all__ = ["server"]  # the fixture


class Clocked(Recorder):
    """A Recorder that also notes when (loop time) each call came."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def _add(self, kind: str, partitions: Any) -> None:
        super()._add(kind, partitions)
        self.times.append(asyncio.get_running_loop().time())

    def first(self, kind: str) -> float | None:
        return next(
            (t for (k, _), t in zip(self.calls, self.times, strict=True) if k == kind), None
        )


async def until(predicate: Any, timeout: float, what: str) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)
    assert predicate(), what


async def stays(predicate: Any, seconds: float, what: str) -> None:
    """`predicate` holds at every check for `seconds`, not only once."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        assert predicate(), f"{what} (broke after {seconds - (end - loop.time()):.2f} s)"
        await asyncio.sleep(0.05)


# -- 1: heartbeats go on while the application acknowledges a revocation -----------------


async def test_1_a_slow_revocation_keeps_the_member_in_the_group(
    server: CoordinatorServer,
) -> None:
    """The revocation takes 1.5 session timeouts; the member keeps heartbeating meanwhile,
    so nobody is expelled and the group settles with both members, and stays so."""
    slow = Clocked()
    revoking = asyncio.Event()

    async def slow_revoke(partitions: Any) -> None:
        slow._add("revoked", partitions)
        revoking.set()
        await asyncio.sleep(1.5)

    slow.on_partitions_revoked = slow_revoke  # type: ignore[method-assign]
    first = new_member(server, slow, assignors=["range"], session_timeout_ms=1000)
    await first.start(timeout=10)
    first_id = first.member_id
    second = new_member(server, assignors=["range"], session_timeout_ms=1000)
    await second.start(timeout=15)
    assert revoking.is_set()
    await first.wait_stable(after_generation=1, timeout=10)

    def settled() -> bool:
        return (
            first.state == MemberState.STABLE
            and second.state == MemberState.STABLE
            and first.generation == second.generation
            and len(first.assignment) == len(second.assignment) == 2
        )

    await until(settled, 10, "both members stable with two partitions each")
    generation = first.generation
    await stays(lambda: settled() and first.generation == generation, 3.0,
                "the group stays stable with both members for three session timeouts")  # fmt: skip
    assert first.member_id == first_id  # never expelled
    assert "lost" not in [kind for kind, _ in slow.calls]
    await first.close()
    await second.close()


# -- 2: a batch's commit is pinned to the generation it was planned in ---------------------


async def test_2_a_commit_pinned_to_an_old_generation_is_refused(
    server: CoordinatorServer,
) -> None:
    """Work planned in an old generation commits only on partitions the member held
    throughout: one kept across a cooperative rebalance, yes; one given to another member
    (the finding: even when it came back later), never."""
    first = new_member(server, assignors=["cooperative-sticky"])
    await first.start(timeout=10)
    planned_in = first.generation
    await first.commit({TopicPartition("t", 0): 7}, generation=planned_in)  # current: accepted
    second = new_member(server, assignors=["cooperative-sticky"])
    await second.start(timeout=10)
    await until(lambda: len(second.assignment) == 2 and first.state == MemberState.STABLE,
                10, "the follow-up rebalance")  # fmt: skip
    assert first.generation > planned_in
    kept, moved = sorted(first.assignment)[0], sorted(second.assignment)[0]
    await first.commit({kept: 99}, generation=planned_in)  # held throughout: carried
    assert (await second.committed([kept]))[kept].offset == 99  # type: ignore[union-attr]
    with pytest.raises(CommitFailedError):
        await first.commit({moved: 98}, generation=planned_in)
    await second.close()
    await until(lambda: moved in first.assignment and first.state == MemberState.STABLE,
                10, "the moved partition back with the first member")  # fmt: skip
    with pytest.raises(CommitFailedError):  # it came back, but someone held it meanwhile
        await first.commit({moved: 97}, generation=planned_in)
    committed = await first.committed([moved])
    assert committed[moved] is None or committed[moved].offset not in (97, 98)  # type: ignore[union-attr]
    await first.commit({moved: 11}, generation=first.generation)  # the current one is fine
    committed = await first.committed([moved])
    assert committed[moved] is not None and committed[moved].offset == 11  # type: ignore[union-attr]
    await first.close()
    await second.close()


# -- 3: no task dies silently; a failed callback does not release partitions ---------------


async def test_3_a_revocation_callback_that_raises_fails_the_member(
    server: CoordinatorServer,
) -> None:
    recorder = Recorder()

    def broken_revoke(partitions: Any) -> None:
        raise RuntimeError("the application could not stop its work")

    recorder.on_partitions_revoked = broken_revoke  # type: ignore[method-assign]
    first = new_member(server, recorder, assignors=["range"], session_timeout_ms=1000)
    await first.start(timeout=10)
    second = new_member(server, assignors=["range"], session_timeout_ms=1000)
    starting = asyncio.create_task(second.start(timeout=15))
    error = await asyncio.wait_for(first.wait_failed(), 10)
    assert isinstance(error, ListenerError)
    assert "could not stop" in str(error.__cause__)
    assert first.state == MemberState.FAILED
    assert recorder.calls[-1] == ("lost", ALL)  # not released as if work had stopped
    assert not first.assignment
    with pytest.raises(ListenerError):
        await first.commit({TopicPartition("t", 0): 1})
    await starting  # the group goes on without the failed member
    assert sorted(second.assignment) == ALL
    await first.close()
    await second.close()


async def test_3_a_heartbeat_task_that_dies_fails_the_member(
    server: CoordinatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kgroups.client.member as member_module

    recorder = Recorder()
    member = new_member(server, recorder, assignors=["range"])
    await member.start(timeout=10)

    def broken(*args: Any) -> Any:
        raise RuntimeError("injected")

    monkeypatch.setattr(member_module, "heartbeat_request", broken)
    error = await asyncio.wait_for(member.wait_failed(), 10)
    assert "heartbeat" in str(error) and "injected" in str(error)
    assert member.state == MemberState.FAILED
    assert recorder.calls == [("assigned", ALL), ("lost", ALL)]
    assert not member.assignment
    with pytest.raises(MemberError):
        await member.wait_stable(timeout=1)
    await member.close()


# -- 4: the coordinator fails stop ------------------------------------------------------


async def test_4_a_bug_in_the_coordinator_stops_it_and_a_restart_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception inside complete_join: the coordinator must not serve from the
    half-changed state (a group Preparing with no join timer); it stops, and a
    restart from the same data serves the group again."""
    from kgroups.coordinator.core import rebalance

    def settings(port: int = 0) -> ServerSettings:
        return ServerSettings(port=port, data_dir=tmp_path, coordinator=CoordinatorConfig(
            group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=500))  # fmt: skip

    srv = CoordinatorServer(settings())
    await srv.start()
    await admin.create_topic("127.0.0.1", srv.port, "t", 4)
    real = rebalance.complete_join
    calls = 0

    def faulty(core: Any, group: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected fault in complete_join")
        real(core, group)

    monkeypatch.setattr(rebalance, "complete_join", faulty)
    member = new_member(srv, assignors=["range"])
    starting = asyncio.create_task(member.start(timeout=30))
    with pytest.raises(HandlerFailed) as failure:  # serve_forever raises the failure
        await asyncio.wait_for(srv.serve_forever(), 10)
    assert "injected" in str(failure.value.__cause__)
    assert srv.stopped and calls == 1
    assert not starting.done()  # the member was never answered from that state
    restarted = CoordinatorServer(settings(srv.port))
    await restarted.start()
    try:
        await starting
        assert sorted(member.assignment) == ALL
        await member.close()
    finally:
        await restarted.stop()


# -- 5: a static member that lost its place comes back as itself --------------------------


def test_5_a_frozen_static_member_is_fenced_not_its_replacement(
    coordinator: Coordinator, members: list[Member]
) -> None:
    """The member's process is paused (SIGSTOP) past its session; a replacement takes its
    instance id. Resumed, the old process finds its session gone, reports its partitions
    lost and rejoins as itself, so *it* is fenced; the live replacement keeps its place."""
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "t", 4))

    def member(name: str) -> Member:
        m = Member("kgroups", coordinator.bootstrap, "g", ["t"], client_id=name,
                   instance_id="worker-1", session_timeout_ms=2000)  # fmt: skip
        members.append(m)
        return m

    zombie = member("zombie")
    zombie.wait_event("assigned")
    os.kill(zombie.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # past its session timeout
        replacement = member("replacement")
        assigned = replacement.wait_event("assigned")
        assert len(assigned["partitions"]) == 4
    finally:
        os.kill(zombie.proc.pid, signal.SIGCONT)
    # The live replacement is never fenced: its commits are accepted and it gets no new
    # assignment, checked over several session timeouts while the zombie comes back.
    for attempt in range(8):
        seen = len(replacement.events)
        replacement.send(f"commit {attempt + 1}")
        event = wait_until(lambda n=seen: next((e for e in replacement.events[n:] if e["event"]
                                                in ("committed", "commit_failed")), None),
                           10, "the commit's outcome")  # fmt: skip
        assert event["event"] == "committed", event
        time.sleep(0.75)
    assert [e["event"] for e in replacement.events].count("assigned") == 1
    assert "failed" not in [e["event"] for e in replacement.events]
    # The zombie came back as itself, and was fenced.
    failed = zombie.wait_event("failed", timeout=10)
    assert failed["code"] == "fenced_instance_id", failed


# -- 6: closing a connection fails what waits on it ---------------------------------------


async def test_6_closing_a_connection_fails_the_requests_waiting_on_it() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, reads, never answers

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    from kio.schema.heartbeat.v4 import request as hb

    from kgroups.protocol.build import build

    conn = await KafkaConnection.open("127.0.0.1", port)
    body = build(hb.HeartbeatRequest, {"group_id": "g", "generation_id": 1,
                                       "member_id": "m", "group_instance_id": None})  # fmt: skip
    waiting = [asyncio.create_task(conn.request(body)) for _ in range(3)]
    await asyncio.sleep(0.1)
    await conn.close()
    done, pending = await asyncio.wait(waiting, timeout=1)
    assert not pending, "requests still waiting after close"
    for task in done:
        assert isinstance(task.exception(), ConnectionClosed)
    listener.close()
    await listener.wait_closed()


# -- 7: a frozen coordinator: the member gives up first -----------------------------------


async def test_7_a_frozen_coordinator_cannot_outlast_the_members_session(
    coordinator: Coordinator,
) -> None:
    """The coordinator process is paused (SIGSTOP): its kernel still accepts connections,
    nothing is answered. The member must report its partitions lost within a session
    timeout of its last answered heartbeat (before the coordinator, resumed, could give
    them to anyone), whatever requests are stuck, coordinator lookup included."""
    await admin.create_topic("127.0.0.1", coordinator.port, "t", 4)
    recorder = Clocked()
    member = GroupMember(coordinator.bootstrap, "g", ["t"], listener=recorder,
                         assignors=["range"], session_timeout_ms=2000,
                         heartbeat_interval_ms=100)  # fmt: skip
    await member.start(timeout=10)
    await asyncio.sleep(0.5)
    assert coordinator.proc is not None
    frozen_at = asyncio.get_running_loop().time()
    os.kill(coordinator.proc.pid, signal.SIGSTOP)
    try:
        await until(lambda: recorder.first("lost") is not None, 6, "the member declares loss")
    finally:
        os.kill(coordinator.proc.pid, signal.SIGCONT)
    lost_at = recorder.first("lost")
    assert lost_at is not None and lost_at - frozen_at < 2.0, lost_at - frozen_at
    await member.wait_stable(after_generation=1, timeout=20)
    assert sorted(member.assignment) == ALL
    await member.close()
