"""Replicas sharing the shards through leases in a real PostgreSQL: an even split that
moves the fewest shards, takeover after expiry with a higher epoch, graceful handover,
and every write fenced by the epoch its replica loaded the shard with."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from kgroups.coordinator.core.records import (
    GroupConfigRecord,
    OffsetRecord,
    OffsetValue,
    TopicRecord,
    TopicValue,
)
from kgroups.coordinator.core.shards import shard_of
from kgroups.coordinator.store.base import GlobalsMoved
from kgroups.coordinator.store.leases import ShardLeases
from kgroups.coordinator.store.postgres import Fence, Fenced, PostgresStore, ReplicaStore
from tests.postgres import PostgresServer
from tests.waits import wait_until

SHARDS = 50
SHORT_TTL_S = 2.0
"""Leases that expire within a test. A replica's session may sit inside a transaction for
half of one (`bound_sessions`): with 1 s, a tick starved of the CPU for half a second in
the middle of make test had its session ended by the database."""


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    url = postgres.create_database()
    store = ReplicaStore(url, shards=SHARDS, fence=Fence("setup"))
    store.open()
    store.close()
    return url


def replica(url: str, name: str, ttl_s: float = 5.0) -> ShardLeases:
    leases = ShardLeases(url, name=name, listeners={"PLAINTEXT": (name, 9092)}, ttl_s=ttl_s)
    leases.open()
    return leases


def settle(replicas: list[ShardLeases], rounds: int = 20) -> None:
    """Tick every replica, each handing over what it is told to, until a round of ticks
    in which every replica saw all the others live claims and hands over nothing (a tick
    starved past a TTL can count a replica dead once: the next rounds put it right)."""
    for _ in range(rounds):
        settled = True
        for r in replicas:
            tick = r.tick()
            moved = tick.claimed or tick.release or tick.lost
            settled = settled and not moved and len(tick.replicas) == len(replicas)
            r.release(list(tick.release))
        if settled:
            return
    raise AssertionError(f"the shards never settled: {[len(r.held) for r in replicas]}")


def lapsed(url: str, name: str) -> None:
    """Wait until replica `name`'s leases and its row have expired, by the database's
    clock (the only one leases are measured on)."""

    def expired() -> bool:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM kgroups.shard_owners WHERE owner = %s "
                "AND expires_at > now()) + (SELECT count(*) FROM kgroups.replicas "
                "WHERE name = %s AND expires_at > now())", (name, name),
            ).fetchone()  # fmt: skip
        return row is not None and row[0] == 0

    wait_until(expired, 30, f"{name}'s leases to expire")


def test_replicas_split_the_shards_evenly_and_a_newcomer_moves_only_its_share(url: str) -> None:
    a, b = replica(url, "a"), replica(url, "b")
    assert a.tick().held.keys() == set(range(SHARDS))  # alone: everything
    settle([a, b])
    assert sorted([len(a.held), len(b.held)]) == [25, 25]
    before = {r.name: set(r.held) for r in (a, b)}
    c = replica(url, "c")
    settle([a, b, c])
    assert sorted(len(r.held) for r in (a, b, c)) == [16, 17, 17]
    assert set(a.held) | set(b.held) | set(c.held) == set(range(SHARDS))
    moved = sum(len(before[r.name] - set(r.held)) for r in (a, b))
    assert moved == len(c.held)  # only the newcomer's shards moved
    assert not set(a.held) & set(b.held)
    tick = a.tick()
    assert [r.name for r in tick.replicas] == ["a", "b", "c"]
    assert {tick.owners[s] for s in c.held} == {c.node_id}


def test_a_replica_that_stops_renewing_loses_its_shards_at_a_higher_epoch(url: str) -> None:
    a, b = replica(url, "a", ttl_s=SHORT_TTL_S), replica(url, "b", ttl_s=SHORT_TTL_S)
    settle([a, b])
    mine = dict(a.held)
    lapsed(url, "a")  # a is frozen: no renewal; its leases and its replica row expire
    taken = b.tick()
    assert set(taken.claimed) == set(mine)
    assert all(taken.claimed[s] == mine[s] + 1 for s in mine)
    assert [r.name for r in taken.replicas] == ["b"]
    woken = a.tick()
    assert woken.lost == frozenset(mine) and not woken.held


def test_a_leaving_replica_hands_every_shard_over_and_is_no_longer_counted(url: str) -> None:
    a, b = replica(url, "a"), replica(url, "b")
    settle([a, b])
    a.leave()
    tick = b.tick()
    assert tick.held.keys() == set(range(SHARDS))
    assert [r.name for r in tick.replicas] == ["b"]


def test_a_replica_keeps_its_node_id_across_restarts(url: str) -> None:
    a, b = replica(url, "a"), replica(url, "b")
    ids = (a.node_id, b.node_id)
    a.close()
    assert replica(url, "a").node_id == ids[0] and ids[0] != ids[1]


def offset(group: str, n: int) -> OffsetRecord:
    return OffsetRecord(group, "t", 0, OffsetValue(n, -1, "", n, None))


def group_in(shards: set[int]) -> str:
    return next(g for g in (f"g{n}" for n in range(10_000)) if shard_of(g, SHARDS) in shards)


def test_a_write_to_a_shard_taken_over_is_refused_whole_and_other_shards_still_write(
    url: str,
) -> None:
    a, b = replica(url, "a", ttl_s=SHORT_TTL_S), replica(url, "b", ttl_s=SHORT_TTL_S)
    settle([a, b])
    fence = Fence("a", dict(a.held))
    store = ReplicaStore(url, shards=SHARDS, fence=fence)
    store.open()
    kept, taken = group_in({min(a.held)}), group_in({max(a.held)})
    store.append([offset(kept, 1), offset(taken, 1)])
    with pytest.raises(Fenced):
        store.append([offset(group_in(set(b.held)), 1)])  # never a's
    lapsed(url, "a")
    a_tick_missed = b.tick()  # a froze past its lease: b takes everything
    assert max(a.held) in a_tick_missed.claimed
    with pytest.raises(Fenced) as refused:
        store.append([offset(kept, 2), offset(taken, 2)])
    assert refused.value.shards == {shard_of(kept, SHARDS), shard_of(taken, SHARDS)}
    reader = PostgresStore(url, shards=SHARDS)  # no fence: every record
    reader.open()
    assert {r.group_id: r.value.offset for r in reader.load()
            if isinstance(r, OffsetRecord) and r.value} == {kept: 1, taken: 1}  # fmt: skip
    # b, loaded at its new epochs, writes.
    b_store = ReplicaStore(url, shards=SHARDS, fence=Fence("b", dict(b.held)))
    b_store.open()
    b_store.append([offset(taken, 3)])
    for s in (store, reader, b_store):
        s.close()


def test_a_shard_is_not_taken_while_a_write_under_the_old_epoch_is_in_flight(url: str) -> None:
    """The write's share lock on the owner row keeps a takeover off that shard until the
    write commits, so the new owner's load sees it (never a write landing after the load);
    the claimer does not wait for it meanwhile (a frozen writer would hold it back)."""
    a, b = replica(url, "a", ttl_s=SHORT_TTL_S), replica(url, "b", ttl_s=SHORT_TTL_S)
    a.tick()
    shard, epoch = min(a.held.items())
    with psycopg.connect(url, autocommit=False) as writer:
        writer.execute(
            "SELECT shard FROM kgroups.shard_owners WHERE shard = %s AND epoch = %s "
            "AND owner = 'a' FOR SHARE", (shard, epoch),
        )  # fmt: skip
        lapsed(url, "a")  # a's leases expire while its write is open
        # Not held back by the write: a tick waiting on its lock fails at the tick's
        # lock_timeout (half a second here) instead of returning.
        first = b.tick()
        assert shard not in first.claimed and len(first.claimed) == SHARDS - 1
        writer.commit()
    assert b.tick().claimed == {shard: epoch + 1}


def test_a_restarted_replica_fences_off_the_process_it_replaces(url: str) -> None:
    """A replica restarted under its name (a StatefulSet pod) takes its shards back at a new
    epoch: the process it replaces, if only frozen, can write none of them."""
    old = replica(url, "a")
    old.tick()
    old_store = ReplicaStore(url, shards=SHARDS, fence=Fence("a", dict(old.held)))
    old_store.open()
    new = replica(url, "a")
    held = new.tick().held
    assert held.keys() == old.held.keys()
    assert all(held[s] == old.held[s] + 1 for s in held)
    with pytest.raises(Fenced):
        old_store.append([offset("g", 1)])
    old_store.close()


def topic(name: str, partitions: int) -> TopicRecord:
    return TopicRecord(name, TopicValue(uuid.uuid4(), partitions, 0))


def test_topics_written_from_a_view_another_replica_changed_are_refused_whole(url: str) -> None:
    """Topics and group settings are every replica's: each writes them only while the
    database still holds the version it read them at. A replica that read them before
    another grew a topic cannot write its older view back (a topic shrunk, a creation
    twice); once it has read them again, it can. Notifications say when they change."""
    a, b = (ReplicaStore(url, shards=SHARDS, fence=Fence(n)) for n in ("a", "b"))
    listener = psycopg.connect(url, autocommit=True)
    listener.execute("LISTEN kgroups_globals")
    for s in (a, b):
        s.open()
        list(s.load())  # each reads the cluster's view
    a.append([topic("t", 4)])
    assert [n.channel for n in listener.notifies(timeout=5, stop_after=1)] == ["kgroups_globals"]
    with pytest.raises(GlobalsMoved):
        b.append([topic("t", 2), GroupConfigRecord("g", (("session.timeout.ms", 8000),))])
    assert not list(listener.notifies(timeout=0.2))  # nothing was written
    assert a.load_if_moved() is None  # a's own write: its view is current
    moved = b.load_if_moved()
    assert moved is not None
    assert [
        (r.name, r.value.partitions) for r in moved if isinstance(r, TopicRecord) and r.value
    ] == [("t", 4)]
    b.append([topic("t", 6)])  # now judged on the current view
    with pytest.raises(GlobalsMoved):
        a.append([GroupConfigRecord("g", (("session.timeout.ms", 9000),))])
    reader = PostgresStore(url, shards=SHARDS)
    reader.open()
    stored = list(reader.load())
    assert [
        (r.name, r.value.partitions) for r in stored if isinstance(r, TopicRecord) and r.value
    ] == [("t", 6)]
    assert not [r for r in stored if isinstance(r, GroupConfigRecord)]
    for s in (a, b, reader):
        s.close()
    listener.close()
