"""The real coordinator on virtual time: an in-memory store, topics, and connections.

Shared by the simulations and the fake-time tests of code built on `GroupMember`: the
coordinator is a real `CoordinatorServer` (wire decoding, the ordered store pipeline,
the sans-IO core, its timers) that never listens on a socket; members reach it through
`connector`, over in-memory `Wire`s on the `FakeTimeLoop`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kgroups.client import ConsumerProtocolMember, GroupMember
from kgroups.coordinator.core import CoordinatorConfig, GroupCoordinator, Node
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.records import Record
from kgroups.coordinator.server import CoordinatorServer, ServerSettings
from tests.core_context import CompactedStore
from tests.sim.fake_loop import Wire, open_streams

ADDRESS = "coordinator:9092"


class MemoryStore:
    """The coordinator's store, in memory, surviving coordinator restarts. `on_append`
    sees every batch of records before it is stored (invariant checks)."""

    def __init__(self, on_append: Callable[[Any], None] = lambda records: None) -> None:
        self.rows = CompactedStore()
        self.on_append = on_append

    where = "memory"

    def open(self) -> None:
        pass

    def cluster_id(self) -> str:
        return "sim-cluster"

    def load(self) -> list[Record]:
        return self.rows.replay_order()

    def append(self, records: Any) -> None:
        self.on_append(records)
        self.rows.append(records)

    def close(self) -> None:
        pass

    def create_topic(self, name: str, partitions: int) -> None:
        """Register a topic as `kgroups topic create` would, before the coordinator starts."""
        core = GroupCoordinator(CoordinatorConfig(), node=Node(0, "sim", 9092),
                                cluster_id="sim-cluster")  # fmt: skip
        core.resume(now_ms=0)
        create = mc.CreateTopicsRequest((mc.NewTopic(name, partitions),))
        self.rows.append(core.handle(mg.RequestContext(1, 7), create, now_ms=0).records)


class FakeCluster:
    """One coordinator (restartable) over `store`, reached through `connector`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        store: MemoryStore,
        *,
        latency: Callable[[], float] = lambda: 0.001,
    ) -> None:
        self.loop = loop
        self.store = store
        self.latency = latency
        self.server: CoordinatorServer | None = None
        self.ids = itertools.count(1)

    async def start(self, config: CoordinatorConfig | None = None) -> CoordinatorServer:
        settings = ServerSettings(
            host="coordinator", port=9092, data_dir=Path("/nonexistent-sim"),
            coordinator=config or CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                                    group_min_session_timeout_ms=1000),
        )  # fmt: skip
        server = CoordinatorServer(
            settings, store=self.store, wall_clock=lambda: 1.7e9 + self.loop.time(),
            new_member_id=lambda prefix: f"{prefix}-{next(self.ids)}",
        )  # fmt: skip
        await server.start(listen=False)
        self.server = server
        return server

    async def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            await server.stop()

    def connector(
        self,
        name: str,
        *,
        wires: list[Wire] | None = None,
        partitioned: Callable[[], bool] = lambda: False,
    ) -> Any:
        """A `connect` for `GroupMember`: a new `Wire` per connection (kept in `wires`);
        while `partitioned()`, connecting hangs as packets would vanish."""

        async def connect(host: str, port: int) -> Any:
            if partitioned():
                await asyncio.Event().wait()  # the caller's deadline ends it
            if self.server is None:
                raise ConnectionRefusedError(f"{host}:{port}: the coordinator is down")
            wire = Wire(self.loop, self.latency, name)
            wire.server.protocol = self.server.accept(wire.server)
            if wires is not None:
                wires.append(wire)
            return await open_streams(wire)

        return connect


def crash(
    member: GroupMember | ConsumerProtocolMember,
    wires: list[Wire],
    tasks: Iterable[asyncio.Task[Any]] = (),
) -> None:
    """SIGKILL for a member on the fake loop: its tasks stop at once, its connections
    drop, it says no goodbye (the coordinator finds out by the session timeout)."""
    if isinstance(member, ConsumerProtocolMember):
        member._cancel_deadline()
        own = [t for t in (member._task, member._reconciling) if t is not None]
    else:
        member._cancel_timers()
        own = list(member._tasks)
        if member._round is not None:
            member._round.cancel()
    for task in [*own, *tasks]:
        if task is not asyncio.current_task():
            task.cancel()
    for wire in wires:
        wire.reset()
