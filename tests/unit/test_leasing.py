"""A replica's decisions about its shards (`core.leasing.ReplicaLeases`), on fake time.

The same class runs in `replicas.Replication` (around PostgreSQL, threads and the event
loop) and in `tests/sim/replica_sim.py`; here each rule is held on its own.
"""

from __future__ import annotations

import pytest

from kgroups.coordinator.core import Effects, Reply
from kgroups.coordinator.core.leasing import (
    IllegalShardTransition,
    Replica,
    ReplicaLeases,
    ShardState,
    Tick,
    set_aside,
)
from kgroups.coordinator.core.msg_group import HeartbeatResponse
from kgroups.coordinator.core.records import GroupRecord
from kgroups.protocol.errors import ErrorCode

TTL = 5.0
VALID = TTL - 1.0
"""A tick's leases are trusted this long from its start (the TTL less the margin)."""


def tick(began: float, held: dict[int, int], *, lost: tuple[int, ...] = (),
         release: tuple[int, ...] = (), old_replica: bool = False) -> Tick:  # fmt: skip
    replicas = (Replica("r0", 0, {}), Replica("old", 1, {}, member_rows=not old_replica))
    return Tick(began, held, {}, frozenset(lost), release, replicas)


def serving(held: dict[int, int], now: float = 0.0) -> ReplicaLeases:
    machine = ReplicaLeases(TTL, now=now)
    machine.ticked(tick(now, held))
    wanted = machine.to_load(held)
    machine.read(machine.drained(wanted), now=now)
    return machine


def test_a_claimed_shard_waits_then_is_fenced_then_served() -> None:
    machine = ReplicaLeases(TTL, now=0.0)
    assert machine.ticked(tick(0.0, {1: 7, 2: 3})) == ([], [])
    assert machine.valid_until == VALID
    wanted = machine.to_load({1: 7, 2: 3})
    assert wanted == {1: 7, 2: 3}
    assert machine.loading == {1, 2} and machine.fence == {}  # writes before still queued
    assert machine.to_load({1: 7, 2: 3}) == {}  # not twice
    fenced = machine.drained(wanted)
    assert machine.fence == {1: 7, 2: 3} and machine.state(1) is ShardState.READING
    assert machine.read(fenced, now=1.0) == [1, 2]
    assert machine.state(1) is ShardState.SERVING and machine.loading == frozenset()


def test_records_read_after_the_leases_ran_out_are_not_served() -> None:
    machine = ReplicaLeases(TTL, now=0.0)
    machine.ticked(tick(0.0, {1: 7}))
    fenced = machine.drained(machine.to_load({1: 7}))
    assert machine.read(fenced, now=VALID) == []
    assert machine.state(1) is None and machine.fence == {}
    machine.ticked(tick(VALID, {1: 7}))  # the next renewal loads it again
    assert machine.to_load({1: 7}) == {1: 7}


def test_a_shard_lost_while_its_writes_drain_or_its_records_are_read_is_not_served() -> None:
    machine = ReplicaLeases(TTL, now=0.0)
    machine.ticked(tick(0.0, {1: 7, 2: 3}))
    wanted = machine.to_load({1: 7, 2: 3})
    machine.ticked(tick(1.0, {2: 3}, lost=(1,)))
    fenced = machine.drained(wanted)
    assert fenced == {2: 3}
    assert machine.refused(frozenset({2})) == []  # being loaded: a stale write of before
    machine.ticked(tick(2.0, {}, lost=(2,)))
    assert machine.read(fenced, now=2.0) == [] and machine.fence == {}


def test_past_its_validity_a_replica_serves_nothing() -> None:
    machine = serving({1: 7, 2: 3, 3: 1})
    assert machine.check(VALID - 0.01) == []
    assert machine.check(VALID) == [1, 2, 3]
    assert machine.fence == {} and machine.shards == {}
    assert machine.check(VALID + 1) == []


def test_each_tick_moves_the_validity_from_when_it_began_never_back() -> None:
    machine = serving({1: 7})
    machine.ticked(tick(2.0, {1: 7}))
    assert machine.valid_until == 2.0 + VALID
    machine.ticked(tick(1.0, {1: 7}))  # a slow tick that began earlier
    assert machine.valid_until == 2.0 + VALID


def test_lost_shards_are_unloaded_and_shards_over_the_share_handed_over() -> None:
    machine = serving({1: 7, 2: 3, 3: 1})
    lost, release = machine.ticked(tick(1.0, {2: 3, 3: 1}, lost=(1,), release=(3,)))
    assert (lost, release) == ([1], [3])
    assert machine.fence == {2: 3} and machine.state(3) is ShardState.RELEASING
    assert machine.to_load({2: 3, 3: 1}) == {}  # handed over, not loaded again
    machine.released([3])
    assert machine.state(3) is None


def test_a_handover_no_longer_asked_for_loads_the_shard_again() -> None:
    machine = serving({1: 7, 2: 3})
    machine.ticked(tick(1.0, {1: 7, 2: 3}, release=(2,)))  # its release then failed
    machine.ticked(tick(2.0, {1: 7, 2: 3}))  # the newcomer left again
    assert machine.to_load({1: 7, 2: 3}) == {2: 3}


def test_a_refused_write_unloads_its_served_shards() -> None:
    machine = serving({1: 7, 2: 3})
    assert machine.refused(frozenset({2, 9})) == [2]
    assert machine.fence == {1: 7}


def test_the_keep_alive_renews_the_fence_and_moves_the_validity() -> None:
    machine = serving({1: 7, 2: 3})
    renewal = machine.renewal(3.0)
    assert renewal is not None and renewal.epochs == {1: 7, 2: 3}
    machine.renewed(renewal, began=3.0, every_one=True)
    assert machine.valid_until == 3.0 + VALID


def test_a_renewal_of_an_older_fence_or_a_partial_one_moves_nothing() -> None:
    machine = serving({1: 7, 2: 3})
    renewal = machine.renewal(3.0)
    assert renewal is not None
    machine.ticked(tick(1.0, {1: 7, 2: 3, 4: 2}))
    machine.read(machine.drained(machine.to_load({4: 2})), now=1.0)  # fenced since
    machine.renewed(renewal, began=3.0, every_one=True)
    assert machine.valid_until == 1.0 + VALID
    fresh = machine.renewal(3.5)
    assert fresh is not None
    machine.renewed(fresh, began=3.5, every_one=False)  # one was taken meanwhile
    assert machine.valid_until == 1.0 + VALID


def test_a_wedged_event_loop_gets_no_renewal() -> None:
    machine = serving({1: 7})
    stall = machine.timings.stall_s
    machine.loop_turned(10.0)
    assert machine.renewal(10.0 + stall) is not None
    assert machine.renewal(10.0 + stall + 0.01) is None
    assert ReplicaLeases(TTL, now=0.0).renewal(0.0) is None  # nothing fenced


def test_leaving_serves_and_loads_nothing_more() -> None:
    machine = serving({1: 7, 2: 3})
    assert machine.leave() == [1, 2]
    machine.ticked(tick(1.0, {1: 7, 2: 3}))
    assert machine.to_load({1: 7, 2: 3}) == {} and machine.fence == {}


def test_member_rows_only_while_every_live_replica_reads_them() -> None:
    machine = ReplicaLeases(TTL, now=0.0)
    machine.ticked(tick(0.0, {}, old_replica=True))
    assert not machine.member_rows
    machine.ticked(tick(1.0, {}))
    assert machine.member_rows


def test_a_served_shard_cannot_be_served_again_without_being_read() -> None:
    machine = serving({1: 7})
    with pytest.raises(IllegalShardTransition, match="shard 1 cannot become waiting"):
        machine._move(1, ShardState.WAITING, 8)


def test_timings_follow_the_ttl() -> None:
    assert ReplicaLeases(5.0, now=0).timings.tick_s == 1.0
    short = ReplicaLeases(1.0, now=0).timings
    assert (short.tick_s, short.margin_s, short.stall_s) == (0.2, 0.25, 6.0)


def test_a_refused_write_loses_what_it_wrote_and_the_answers_read_from_it() -> None:
    """A batch holding the leader's SyncGroup (its records write the assignment) and the
    follower's answer (no records of its own) is refused: neither is acknowledged, not
    even the follower's, though it wrote nothing (it was told an assignment the database
    never held). Other groups' effects, in the batch or queued, are written again."""
    leader = Effects(records=(group(3),), replies=(reply(1),))
    follower = Effects(replies=(reply(2),))
    other = Effects(records=(group(5),), replies=(reply(3),))
    queued_answer, queued_other = Effects(replies=(reply(4),)), Effects(replies=(reply(5),))
    about = {1: 3, 2: 3, 3: 5, 4: 3, 5: 5}
    again, lost = set_aside(
        [leader, follower, other], [queued_answer, queued_other], frozenset({3}),
        written_to=lambda e: {int(r.group_id) for r in e.records if isinstance(r, GroupRecord)},
        answers_about=lambda e: {about[r.ref] for r in e.replies},
    )  # fmt: skip
    assert lost == [leader, follower, queued_answer]
    assert again == [other, queued_other]


def group(shard: int) -> GroupRecord:
    return GroupRecord(str(shard), None)


def reply(ref: int) -> Reply:
    return Reply(ref, HeartbeatResponse(ErrorCode.none))


def test_a_shard_taken_up_again_while_its_handover_drained_is_not_released() -> None:
    machine = serving({1: 7, 2: 3})
    machine.ticked(tick(1.0, {1: 7, 2: 3}, release=(2,)))  # its writes now finishing
    machine.ticked(tick(2.0, {1: 7, 2: 3}))  # the newcomer left meanwhile
    machine.read(machine.drained(machine.to_load({1: 7, 2: 3})), now=2.0)
    assert machine.still_releasing([2]) == []
    assert machine.state(2) is ShardState.SERVING
