"""Three coordinator replicas sharing the groups on a real PostgreSQL, losing one.

Groups of kafka-python, confluent-kafka, Java and kgroups members stay Stable and groups of committers
commit without pause while the replica that owns the most of them is killed (SIGKILL),
stopped (SIGTERM: a graceful handover), frozen past its leases (SIGSTOP, then SIGCONT:
it must stop serving and write nothing), or PostgreSQL itself crashes and restarts. After
each: every acknowledged commit is readable, every Stable group kept its generation with
every partition owned by exactly one member (the outage is shorter than the session
timeout), and the replicas again cover every shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from kgroups import admin
from kgroups.cli import app as cli
from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core.records import OffsetRecord, Record
from kgroups.coordinator.core.shards import shard_of
from kgroups.coordinator.replicas import Replication
from kgroups.coordinator.server import CoordinatorServer, ServerSettings
from kgroups.coordinator.store import StoreError
from kgroups.coordinator.store.leases import REGISTRY_LOCK_KEY, ShardLeases, Tick
from kgroups.coordinator.store.postgres import Fence, PostgresStore, ReplicaStore
from kgroups.protocol.build import build
from kgroups.protocol.client import ConnectionClosed, KafkaConnection
from kgroups.protocol.errors import ErrorCode
from kgroups.spark.pipeline import Pipeline
from kgroups.spark.publish import Batch
from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, Member, converged, wait_until
from tests.integration.spark_apps import committed
from tests.integration.test_postgres_coordinator import PARTITIONS, Committer, every_ack_kept
from tests.integration.test_server_pipeline import commit
from tests.postgres import PostgresServer
from tests.waits import within

SESSION_MS = 20_000
MOVES = {"assigned", "revoked", "lost", "failed"}
"""Member events of a rebalance (connection errors while a replica is away are not)."""
TTL_S = 5  # the default: a loaded machine can starve a process for a second or two


class Cluster:
    """Three replicas of one coordinator cluster on one database."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.replicas = {
            f"r{n}": Coordinator(root / f"r{n}", *FAST, "--store", url, "--lease-ttl",
                                 str(TTL_S), "--replica-name", f"r{n}")
            for n in range(3)
        }  # fmt: skip

    def start(self) -> None:
        for replica in self.replicas.values():
            replica.start()
        wait_until(self.balanced, 30, "the shards spread over the replicas")

    def balanced(self) -> bool:
        counts = Counter(self.owners().values())
        return sum(counts.values()) == 50 and sorted(counts.values()) == [16, 17, 17]

    @property
    def bootstrap(self) -> str:
        return ",".join(r.bootstrap for r in self.replicas.values() if r.proc is not None)

    def owners(self) -> dict[int, str]:
        return self.owners_at(self.url)

    @staticmethod
    def owners_at(url: str) -> dict[int, str]:
        """shard -> replica name, for shards with a live lease."""
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT shard, owner FROM kgroups.shard_owners "
                "WHERE owner IS NOT NULL AND expires_at > now()"
            ).fetchall()
        return dict(rows)

    def names(self, prefix: str, n: int, *, on: str, on_it: bool = True) -> list[str]:
        """`n` group ids whose shard replica `on` owns (or, `on_it=False`, does not)."""
        owners = self.owners()
        fitting = (f"{prefix}-{k}" for k in itertools.count())
        return list(itertools.islice(
            (g for g in fitting if (owners[shard_of(g, 50)] == on) == on_it), n))  # fmt: skip

    def stop(self) -> None:
        for replica in self.replicas.values():
            if replica.proc is not None:
                replica.proc.send_signal(signal.SIGCONT)
            replica.kill()


@pytest.fixture
def cluster(postgres: PostgresServer, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(postgres.create_database(), tmp_path)
    c.start()
    yield c
    c.stop()


def through(cluster: Cluster, members: list[Member], outage: Callable[[str], None]) -> str:
    """Stable groups and committers, every Stable group and half the committers on the
    replica `outage` hits; then the invariants. Returns the replica that was hit."""
    first = next(iter(cluster.replicas.values()))
    asyncio.run(admin.create_topic("127.0.0.1", first.port, "events", PARTITIONS))
    partitions = {("events", p) for p in range(PARTITIONS)}
    hit = cluster.owners()[0]
    clients = [("kafka-python", "confluent"), ("kgroups", "kafka-python"), ("java", "confluent")]
    stable = {
        name: [
            Member(client, cluster.bootstrap, name, ["events"],
                   client_id=f"{client}-{name}", session_timeout_ms=SESSION_MS)
            for client in pair
        ]
        for name, pair in zip(cluster.names("stable", 3, on=hit), clients, strict=True)
    }  # fmt: skip
    for group in stable.values():
        members.extend(group)
    generations = {
        name: wait_until(lambda g=group: converged(g, partitions), 240, f"{name} to converge")
        for name, group in stable.items()
    }
    groups = cluster.names("on", 4, on=hit) + cluster.names("off", 4, on=hit, on_it=False)
    committers = [Committer(cluster.bootstrap, g, "events") for g in groups]
    for c in committers:
        c.start()
    wait_until(lambda: all(c.acked for c in committers), 30, "every committer's first commit")
    before = {c.group: c.acked[0] for c in committers}
    seen = {m.name: len(m.events) for group in stable.values() for m in group}

    outage(hit)

    wait_until(lambda: len(cluster.owners()) == 50, 30, "every shard owned again")
    every_ack_kept(committers, before, cluster.bootstrap)
    time.sleep(3)  # several heartbeats on the new coordinator: a rebalance would show now
    for name, group in stable.items():
        after = [e for m in group for e in m.events[seen[m.name] :] if e["event"] in MOVES]
        assert converged(group, partitions) == generations[name], (name, after)
        assert not after, (name, after)
        _, view = asyncio.run(describe(cluster.bootstrap, name))
        assert (view.state, view.generation) == ("Stable", generations[name])
    return hit


async def describe(bootstrap: str, group: str) -> Any:
    host, port = bootstrap.split(",", maxsplit=1)[0].split(":")
    async with admin.Cluster(host, int(port)) as cluster:
        return (await cluster.describe_groups([group]))[group]


def test_a_replica_killed_loses_its_groups_to_the_others_and_no_commit(
    cluster: Cluster, members: list[Member]
) -> None:
    def kill(name: str) -> None:
        cluster.replicas[name].kill()

    hit = through(cluster, members, kill)
    assert hit not in set(cluster.owners().values())


def test_a_consumer_protocol_group_keeps_its_epoch_through_the_loss_of_its_replica(
    cluster: Cluster, members: list[Member]
) -> None:
    """Kafka 4's consumer protocol (KIP-848) on replicas: Java, librdkafka and franz-go
    consumers in one group on the replica that is killed; the group's next owner loads it
    with every member's epoch and assignment, gives each a fresh session, and nobody's
    partitions move."""
    from tests.matrix.test_consumer_protocol_clients import (
        CONSUMER,
        no_overlap_per_epoch,
    )
    from tests.matrix.test_consumer_protocol_clients import (
        converged as settled,
    )

    first = next(iter(cluster.replicas.values()))
    asyncio.run(admin.create_topic("127.0.0.1", first.port, "modern", 6))
    partitions = {("modern", p) for p in range(6)}
    hit = cluster.owners()[0]
    (name,) = cluster.names("modern", 1, on=hit)
    group = [
        Member(client, cluster.bootstrap, name, ["modern"], client_id=client, extra=CONSUMER)
        for client in ("java", "confluent", "franz-go")
    ]
    members.extend(group)
    epoch = wait_until(lambda: settled(group, partitions), 90, "three consumers to settle")
    _, before = asyncio.run(describe(cluster.bootstrap, name))
    seen = {m.name: len(m.events) for m in group}

    cluster.replicas[hit].kill()

    def taken_over() -> bool:
        owners = cluster.owners()
        return len(owners) == 50 and hit not in owners.values()

    wait_until(taken_over, 30, "every shard owned by the others")
    time.sleep(3)  # several heartbeats on the new owner: a rebalance would show now
    moved = [e for m in group for e in m.events[seen[m.name] :] if e["event"] in MOVES]
    assert not moved, moved
    assert settled(group, partitions) == epoch
    node, after = asyncio.run(describe(cluster.bootstrap, name))
    assert (after.state, after.generation, after.group_type) == ("Stable", before.generation,
                                                                  "consumer")  # fmt: skip
    assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
    assert node.port != cluster.replicas[hit].port
    no_overlap_per_epoch(group)


def test_a_replica_stopped_hands_its_groups_over_at_once(
    cluster: Cluster, members: list[Member]
) -> None:
    stopped_at: list[float] = []

    def stop(name: str) -> None:
        stopped_at.append(time.monotonic())
        assert cluster.replicas[name].stop() == 0

    hit = through(cluster, members, stop)
    assert "handed every shard over" in cluster.replicas[hit].log()


def test_a_replica_frozen_past_its_leases_stops_serving_when_it_wakes(
    cluster: Cluster, members: list[Member]
) -> None:
    def freeze(name: str) -> None:
        proc = cluster.replicas[name].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: name not in set(cluster.owners().values()), 20, "its shards taken")
        time.sleep(1)
        proc.send_signal(signal.SIGCONT)

    hit = through(cluster, members, freeze)
    log = cluster.replicas[hit].log()
    assert "serving no group until they are" in log or "lost [" in log, log[-3000:]
    for name, replica in cluster.replicas.items():
        if name != hit:  # a frozen replica never holds the others back
            assert "leases not renewed in time" not in replica.log(), name


def test_postgresql_crashing_under_the_replicas_loses_no_commit(
    cluster: Cluster, members: list[Member], postgres: PostgresServer
) -> None:
    def crash(_: str) -> None:
        postgres.stop(mode="immediate")
        time.sleep(2)
        postgres.start_again()

    through(cluster, members, crash)


async def test_a_write_queued_before_a_takeover_is_refused_and_not_acknowledged(
    postgres: PostgresServer,
) -> None:
    """The last line of defence: a write that reaches the database after another replica
    took the shard is refused by the epoch check; its client's connection closes (it looks
    for the new coordinator), nothing is written, and the replica goes on serving."""
    url = postgres.create_database()
    settings = ServerSettings(port=0, store_url=url, replica_name="a", lease_ttl_s=1.0,
                              coordinator=CoordinatorConfig(group_initial_rebalance_delay_ms=0))  # fmt: skip
    srv = CoordinatorServer(settings)
    await srv.start()
    replication = srv._replication
    assert replication is not None and replication.sharding is not None
    sharding = replication.sharding
    try:
        await async_wait_until(lambda: len(sharding.serving) == 50, 10, "a serving every shard")
        registry = srv.metrics.registry
        assert registry.get_sample_value("kgroups_replica_shards", {"state": "serving"}) == 50
        assert registry.get_sample_value("kgroups_replicas") == 1
        await admin.create_topic("127.0.0.1", srv.port, "t", 1)
        conn = await KafkaConnection.open("127.0.0.1", srv.port)
        assert (await conn.request(commit("g", 5))).topics[0].partitions[0].error_code == 0
        store = replication.store
        gate = threading.Event()
        plain_append = store.append

        def gated(records: Sequence[Record]) -> None:
            gate.wait(timeout=30)
            plain_append(records)

        store.append = gated  # type: ignore[method-assign]
        committing = asyncio.create_task(conn.request(commit("g", 6)))
        await asyncio.sleep(0.2)

        def unreachable(*_: object) -> Tick:
            raise psycopg.OperationalError("the test cut the lease connections")

        replication.leases.tick = unreachable  # type: ignore[method-assign]
        replication.leases.renew = unreachable  # type: ignore[method-assign,assignment]
        await asyncio.sleep(1.5)  # a's leases expire
        b = ShardLeases(url, name="b", listeners={"PLAINTEXT": ("b", 1)}, ttl_s=30)
        await asyncio.to_thread(b.open)
        taken = await asyncio.to_thread(b.tick)
        assert shard_of("g", 50) in taken.claimed
        gate.set()
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(committing, 10)
        assert srv.failure is None
        reader = ReplicaStore(url, fence=Fence("reader"))
        await asyncio.to_thread(reader.open)
        stored = await asyncio.to_thread(lambda: list(reader.load_shard(shard_of("g", 50))))
        assert [r.value.offset for r in stored if isinstance(r, OffsetRecord) and r.value] == [5]
        reader.close()
        b.close()
        await conn.close()
    finally:
        await srv.stop()


@contextlib.asynccontextmanager
async def serving_replica(url: str) -> AsyncIterator[tuple[CoordinatorServer, Replication]]:
    """One replica (2-s leases) on `url`, once it serves every shard; stopped after."""
    srv = CoordinatorServer(ServerSettings(port=0, store_url=url, lease_ttl_s=2.0))
    await srv.start()
    try:
        replication = srv._replication
        assert replication is not None and replication.sharding is not None
        sharding = replication.sharding
        await async_wait_until(lambda: len(sharding.serving) == 50, 10, "every shard served")
        yield srv, replication
    finally:
        await srv.stop()


async def commits_through(srv: CoordinatorServer) -> None:
    """A group's offset commit through `srv` is acknowledged."""
    await admin.create_topic("127.0.0.1", srv.port, "t", 1)
    conn = await KafkaConnection.open("127.0.0.1", srv.port)
    assert (await conn.request(commit("g", 5))).topics[0].partitions[0].error_code == 0
    await conn.close()


async def test_a_replica_whose_shards_fail_to_load_serves_them_at_a_later_tick(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading its shards' groups can fail (PostgreSQL ends a session a loaded machine
    starved inside its transaction, the retry budget runs out): the replica keeps its
    leases and loads those shards again at its next tick; it does not stop."""
    calls: list[list[int]] = []
    plain = PostgresStore.load_shards

    def failing_once(store: PostgresStore, shards: list[int]) -> dict[int, list[Record]]:
        calls.append(list(shards))
        if len(calls) == 1:
            raise StoreError("loading shards failed: the test's database refused")
        return plain(store, shards)

    monkeypatch.setattr(PostgresStore, "load_shards", failing_once)
    async with serving_replica(postgres.create_database()) as (srv, _):
        assert len(calls) >= 2 and srv.failure is None
        await commits_through(srv)


async def test_member_rows_wait_until_no_replica_from_before_them_is_alive(
    postgres: PostgresServer,
) -> None:
    """A replica started before consumer groups' members were rows (schema 4) registers
    without saying it reads them: while it is alive, the others write whole groups."""
    url = postgres.create_database()
    srv = CoordinatorServer(ServerSettings(port=0, store_url=url, lease_ttl_s=1.0))
    await srv.start()
    try:
        replication = srv._replication
        assert replication is not None
        store = replication.store
        await async_wait_until(lambda: store.member_rows, 10, "member rows (no old replica)")
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(
                "INSERT INTO kgroups.replicas (name, node_id, listeners, expires_at) "
                "VALUES ('old', 99, '{}', now() + interval '1 hour')"
            )  # what a replica of schema 3 writes
            await async_wait_until(lambda: not store.member_rows, 10, "whole groups")
            for _ in range(10):  # and so it stays while the old replica is alive
                await asyncio.sleep(0.2)
                assert not store.member_rows
            db.execute("UPDATE kgroups.replicas SET expires_at = now() WHERE name = 'old'")
            await async_wait_until(lambda: store.member_rows, 10, "member rows again")
    finally:
        await srv.stop()


async def test_a_long_turn_of_the_event_loop_keeps_the_leases_a_wedged_loop_loses_them(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer group of hundreds joining at once makes turns of the event loop of
    seconds: the keep-alive thread renews the leases meanwhile, so the replica goes on
    serving. A loop that has not turned for `stall_s` is not kept alive: its replica stops
    serving when its leases run out, and its shards can go to the others."""
    url = postgres.create_database()
    async with serving_replica(url) as (srv, replication):
        sharding = replication.sharding
        assert sharding is not None
        caplog.set_level(logging.INFO, "kgroups.coordinator.replicas")
        time.sleep(3.0)  # the loop blocked past the leases' validity (1.5 s)
        await asyncio.sleep(0.2)  # the watchdog's moment has come
        assert len(sharding.serving) == 50
        assert "not renewed in time" not in caplog.text
        with psycopg.connect(url, autocommit=True) as db:
            (left,) = db.execute(
                "SELECT min(expires_at - now()) FROM kgroups.shard_owners"
            ).fetchone() or (None,)
        assert left is not None and left.total_seconds() > 0.5
        await commits_through(srv)
        assert replication.stall_s < 7.0
        time.sleep(replication.stall_s + 1.5)  # wedged: the keep-alive gives up
        await asyncio.sleep(0.2)
        assert "not renewed in time" in caplog.text


async def test_replicas_on_one_host_without_names_are_told_apart_by_their_ports(
    postgres: PostgresServer,
) -> None:
    """Two replicas on one host, each on port 0 and without --replica-name: each is named
    by its bound port, so they are two replicas with two node ids sharing the shards (with
    one name they would share one fence, and each could write over the other's groups)."""
    url = postgres.create_database()
    servers = [CoordinatorServer(ServerSettings(port=0, store_url=url, lease_ttl_s=2.0))
               for _ in range(2)]  # fmt: skip
    for srv in servers:
        await srv.start()
    try:
        names = [srv._replication.leases.name for srv in servers if srv._replication]
        assert names == [f"{socket.gethostname()}-{srv.port}" for srv in servers]
        nodes = {srv.listeners[0].node_id for srv in servers}
        assert len(nodes) == 2, nodes

        def split() -> bool:
            counts = Counter(Cluster.owners_at(url).values())
            return sorted(counts.values()) == [25, 25] and set(counts) == set(names)

        await async_wait_until(split, 20, "the shards split between the two replicas")
    finally:
        for srv in servers:
            await srv.stop()


async def async_wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + within(timeout)
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_the_group_cli_finds_every_group_on_whichever_replica_owns_it(cluster: Cluster) -> None:
    """`kgroups group` (the admin client underneath) through one replica: ListGroups asks
    every replica, a group's describe and offsets go to its owner, as with Kafka."""
    first = cluster.replicas["r0"]
    asyncio.run(admin.create_topic("127.0.0.1", first.port, "events", PARTITIONS))
    groups = [cluster.names(f"on-{n}", 1, on=f"r{n}")[0] for n in range(3)]
    for n, group in enumerate(groups):
        c = Committer(cluster.bootstrap, group, "events")
        c.run_once(offset=10 + n)
    listed = CliRunner().invoke(cli, ["group", "list", "--bootstrap-server", first.bootstrap])
    assert listed.exit_code == 0, listed.output
    assert set(groups) <= set(listed.stdout.split())
    for n, group in enumerate(groups):
        run = CliRunner().invoke(cli, ["group", "describe", group, "--offsets", "-o", "json",
                                       "--bootstrap-server", first.bootstrap])  # fmt: skip
        assert run.exit_code == 0, run.output
        (described,) = json.loads(run.stdout)
        offsets = {o["partition"]: o["current_offset"] for o in described["offsets"]}
        assert offsets == dict.fromkeys(range(PARTITIONS), 10 + n), described


class Clicks:
    """A source of plain rows whose partitions grow by `step` records each time they are
    asked, and whose partition count the test raises (the pipeline then grows the
    coordinator's topic); `freeze` stops the growth, so the members can catch up."""

    def __init__(self, partitions: int, step: int) -> None:
        self.ends = dict.fromkeys(range(partitions), 0)
        self.step = step
        self.frozen = False
        self.lock = threading.Lock()

    def partitions(self, topic: str) -> int:
        with self.lock:
            return len(self.ends)

    def grow(self, partitions: int) -> None:
        with self.lock:
            self.ends.update(dict.fromkeys(range(len(self.ends), partitions), 0))

    def freeze(self) -> dict[int, int]:
        with self.lock:
            self.frozen = True
            return dict(self.ends)

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        with self.lock:
            for p in partitions:
                if not self.frozen:
                    self.ends[p] += self.step
            return {p: (0, self.ends[p]) for p in partitions}

    def read(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Any:
        return [(p, o) for p, (s, e) in sorted(ranges.items()) for o in range(s, e)]


def test_spark_members_go_on_through_the_loss_of_their_groups_replica(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two Spark members' drivers (`kgroups.spark.pipeline.Pipeline`, the loop and the
    group member every Spark application runs; its executors never talk to a coordinator)
    on a group of the replica named first in their bootstrap list, which is killed: they
    find the new owner and go on in the same generation, and the topic's growth, which an
    admin client of theirs makes on the coordinator, reaches a live replica. The JSON
    outbox they publish tiles every partition from 0 to its end: every record once."""
    group = cluster.names("clicks", 1, on="r0")[0]
    assert cluster.bootstrap.startswith(cluster.replicas["r0"].bootstrap)
    source, out = Clicks(4, step=7), tmp_path / "out"
    options: dict[str, Any] = {
        "bootstrap": cluster.bootstrap, "group": group, "topic": "clicks", "source": source,
        "output": str(out), "max_records": 40, "poll_interval": 0.05,
        "partition_check_interval": 0.5, "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": 500,
    }  # fmt: skip

    def process(rows: Any, batches: Sequence[Batch]) -> Mapping[int, Any]:
        return {b.partition: {"records": b.end - b.start} for b in batches}

    pipelines = [Pipeline(name=name, process=process, **options) for name in ("a", "b")]
    threads = [threading.Thread(target=lambda p=p: (p.start(60), p.run()), daemon=True)
               for p in pipelines]  # fmt: skip
    for t in threads:
        t.start()
    try:
        # The applications made the coordinator's topic (the source has it) and split it.
        wait_until(lambda: sorted(len(p.member.assignment) for p in pipelines) == [2, 2], 60,
                   "the four partitions split")  # fmt: skip
        generation = pipelines[0].member.generation
        wait_until(
            lambda: len(committed(cluster, group, "clicks")) == 4, 30, "every partition committed"
        )
        before = committed(cluster, group, "clicks")

        cluster.replicas["r0"].kill()
        wait_until(lambda: len(cluster.owners()) == 50 and "r0" not in cluster.owners().values(),
                   30, "every shard owned by the others")  # fmt: skip
        wait_until(lambda: all(o > before[p] for p, o in committed(cluster, group, "clicks").items()),
                   30, "commits through the new owner")  # fmt: skip
        # The failover was shorter than the session: nobody rebalanced.
        assert [p.member.generation for p in pipelines] == [generation] * 2

        source.grow(6)  # growing goes through a live replica, not the dead first address
        wait_until(lambda: sorted(len(p.member.assignment) for p in pipelines) == [3, 3], 60,
                   "the six partitions split")  # fmt: skip
        wait_until(
            lambda: len(committed(cluster, group, "clicks")) == 6, 30, "the new partitions read"
        )
        ends = source.freeze()
        seen: list[dict[int, int]] = [{}]

        def caught_up() -> bool:
            seen[0] = committed(cluster, group, "clicks")
            return seen[0] == ends

        with contextlib.suppress(AssertionError):
            wait_until(caught_up, 60, "every record committed")
        assert seen[0] == ends, [p.member.assignment for p in pipelines]
    finally:
        for p in pipelines:
            p.stop()
        for t in threads:
            t.join(20)
        for p in pipelines:
            p.close()
    for p in pipelines:
        assert p.member.error is None, (p.loop.name, p.member.error)
    published: dict[int, list[tuple[int, int]]] = {}
    for path in out.glob("clicks-*.json"):
        _, partition, start, end = path.stem.split("-")
        published.setdefault(int(partition), []).append((int(start), int(end)))
    for partition, end in ends.items():
        tiles = sorted(published[partition])
        assert tiles[0][0] == 0 and tiles[-1][1] == end, (partition, tiles[:3], tiles[-3:])
        assert all(a[1] == b[0] for a, b in itertools.pairwise(tiles)), (partition, tiles)


async def two_replicas(url: str, *, notices: bool) -> list[CoordinatorServer]:
    """Two replicas on `url` whose lease renewals no longer reload anything (a minute
    apart) once the shards are split; with `notices` off, each keeps the view of the
    topics it last read itself."""
    servers = [CoordinatorServer(ServerSettings(port=0, store_url=url, lease_ttl_s=30.0,
                                                replica_name=name))
               for name in ("a", "b")]  # fmt: skip
    for srv in servers:
        await srv.start()

    def split() -> bool:
        return sorted(Counter(Cluster.owners_at(url).values()).values()) == [25, 25]

    await async_wait_until(split, 20, "the shards split between the two replicas")
    await asyncio.sleep(1.2)  # both renewed since: each knows the other
    for srv in servers:
        assert srv._replication is not None and srv._replication._notices is not None
        srv._replication.tick_s = 60
        if not notices:
            srv._replication._notices.stop()
    return servers


async def test_replicas_judge_topic_changes_on_the_clusters_current_topics(
    postgres: PostgresServer,
) -> None:
    """A topic created or grown through one replica, then changed through another that
    has not heard of it: the second judges the request on the database's topics, as
    Kafka's controller does, so a topic is never created twice or shrunk."""
    a, b = await two_replicas(postgres.create_database(), notices=False)
    try:
        await admin.create_topic("127.0.0.1", a.port, "t", 4)
        with pytest.raises(admin.AdminError) as twice:
            await admin.create_topic("127.0.0.1", b.port, "t", 2)
        assert twice.value.code is ErrorCode.topic_already_exists
        await admin.create_partitions("127.0.0.1", b.port, "t", 6)
        with pytest.raises(admin.AdminError) as shrink:
            await admin.create_partitions("127.0.0.1", a.port, "t", 5)
        assert shrink.value.code is ErrorCode.invalid_partitions
        assert "currently has 6 partitions" in str(shrink.value)
        for srv in (a, b):
            async with admin.Admin("127.0.0.1", srv.port) as client:
                assert await client.topics(["t"]) == {"t": 6}
    finally:
        for srv in (a, b):
            await srv.stop()


async def test_a_topic_grown_through_one_replica_is_known_to_the_others_at_once(
    postgres: PostgresServer,
) -> None:
    """Through the database's notifications, not at the next lease renewal: a group's
    leader asking its own coordinator right after the growth sees the new partitions."""
    a, b = await two_replicas(postgres.create_database(), notices=True)
    try:
        await admin.create_topic("127.0.0.1", a.port, "t", 4)
        async with admin.Admin("127.0.0.1", b.port) as on_b:
            await async_wait_until_async(lambda: on_b.topics(["t"]), {"t": 4}, 2)
            await admin.create_partitions("127.0.0.1", a.port, "t", 6)
            await async_wait_until_async(lambda: on_b.topics(["t"]), {"t": 6}, 2)
    finally:
        for srv in (a, b):
            await srv.stop()


async def async_wait_until_async(
    ask: Callable[[], Awaitable[object]], expected: object, timeout: float
) -> None:
    deadline = time.monotonic() + within(timeout)
    while (answer := await ask()) != expected:
        assert time.monotonic() < deadline, f"still {answer!r}, not {expected!r}"
        await asyncio.sleep(0.02)


async def test_a_request_to_a_replica_still_registering_is_answered_once_it_serves(
    postgres: PostgresServer,
) -> None:
    """A replica binds its listeners, then registers (a transaction that may wait on the
    registry's lock while another replica registers), then builds its coordinator. A
    client that connects in between (a member reconnecting after a crash) waits in the
    listen backlog, as at a Kafka broker whose request processing is not enabled yet, and
    is answered once the replica serves; its connection is never dropped (it was: the
    request met no coordinator, an assertion failed and asyncio closed the connection)."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    url = postgres.create_database()
    srv = CoordinatorServer(ServerSettings(port=0, store_url=url, lease_ttl_s=2.0))
    tasks: list[asyncio.Task[Any]] = []

    async def find(port: int) -> Any:
        conn = await KafkaConnection.open("127.0.0.1", port)
        try:
            body = build(FindCoordinatorRequest, {"key_type": 0, "coordinator_keys": ["g"]})
            answer = await conn.request(body)
            again = await conn.request(body)  # the same connection goes on
            return answer, again
        finally:
            await conn.close()

    try:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("SELECT pg_advisory_lock(%s)", (REGISTRY_LOCK_KEY,))
            starting = asyncio.create_task(srv.start())
            tasks.append(starting)

            def registering() -> bool:
                row = db.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name LIKE 'kgroups-leases-%'"
                ).fetchone()
                return row is not None and row[0] > 0

            await async_wait_until(registering, 30, "the replica waiting to register")
            port = srv.listeners[0].port
            assert port and srv.coordinator is None
            client = asyncio.create_task(find(port))
            tasks.append(client)
            done, _ = await asyncio.wait({client}, timeout=2.0)
            assert not done, f"answered before the replica serves: {client.result()!r}"
            db.execute("SELECT pg_advisory_unlock(%s)", (REGISTRY_LOCK_KEY,))
        await starting
        answer, again = await client
        retriable = {ErrorCode.none, ErrorCode.coordinator_not_available}
        assert ErrorCode(answer.coordinators[0].error_code) in retriable, answer
        assert ErrorCode(again.coordinators[0].error_code) in retriable, again
        assert srv.failure is None
    finally:
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await srv.stop()


def test_a_replica_woken_past_its_leases_stops_serving_before_its_timers_act(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """A replica frozen (SIGSTOP) longer than its leases wakes with overdue timers: a
    member's session among them, due before the watchdog's moment. It must stop serving
    before any of them acts: another replica may serve the group by now. (Its timers ran
    first: the member was removed and the group emptied in memory, and the write reached
    the database, since no replica had claimed the shard meanwhile.)"""
    from kio.schema.join_group.v5.request import JoinGroupRequest
    from kio.schema.sync_group.v3.request import SyncGroupRequest

    url = postgres.create_database()
    replica = Coordinator(tmp_path / "r0", *FAST, "--store", url, "--lease-ttl", "8",
                          "--replica-name", "r0")  # fmt: skip
    replica.start()
    try:
        wait_until(lambda: len(Cluster.owners_at(url)) == 50, 60, "every shard leased")

        async def join_and_sync() -> None:
            conn = await KafkaConnection.open("127.0.0.1", replica.port)
            join = {
                "group_id": "frozen", "session_timeout": 3000, "rebalance_timeout": 3000,
                "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}],
            }  # fmt: skip
            first = await conn.request(build(JoinGroupRequest, join))
            joined = await conn.request(
                build(JoinGroupRequest, {**join, "member_id": first.member_id})
            )
            assert joined.error_code == 0, joined
            synced = await conn.request(build(SyncGroupRequest, {
                "group_id": "frozen", "generation_id": joined.generation_id,
                "member_id": joined.member_id, "assignments": [],
            }))  # fmt: skip
            assert synced.error_code == 0, synced
            await conn.close()

        asyncio.run(join_and_sync())
        proc = replica.proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)  # within the session: its timer is due first
        before = len(replica.log())
        wait_until(lambda: not Cluster.owners_at(url), 60, "its leases expired")
        proc.send_signal(signal.SIGCONT)
        wait_until(lambda: "not renewed in time" in replica.log()[before:], 60, "a self-fence")
        woken = replica.log()[before:]
        removed = woken.find("removing it from the group")
        assert removed == -1 or removed > woken.find("not renewed in time"), woken
    finally:
        if replica.proc is not None:
            replica.proc.send_signal(signal.SIGCONT)
        replica.kill()
