"""One replica of several: the groups of its shards served, every other group answered as
Kafka's broker answers for a partition it does not lead, shards loaded and unloaded."""

from __future__ import annotations

from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.msg_cluster import Node
from kgroups.coordinator.core.shards import Sharding, shard_of
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

SHARDS = 50
G = shard_of("g", SHARDS)
OTHER = Node(7, "replica-7", 9192)


def replica() -> tuple[CoreContext, Sharding]:
    ctx = CoreContext()
    sharding = ctx.coordinator.share(SHARDS)
    ctx._absorb(ctx.coordinator.load(G, [], now_ms=ctx.now_ms))
    return ctx, sharding


def every_answer(ctx: CoreContext, member: str, generation: int) -> dict[str, ErrorCode]:
    """What each group API answers for group g now."""
    join = ctx.reply(ctx.join("g", member)).error
    sync = ctx.reply(ctx.sync("g", member, generation)).error
    fast_lane = ctx.coordinator.heartbeat(mg.HeartbeatRequest("g", generation, member),
                                          now_ms=ctx.now_ms)  # fmt: skip
    commit = set(ctx.commit("g", {("t", 0): 5}, member_id=member, generation=generation).values())
    fetch = ctx.reply(ctx.send(mo.OffsetFetchRequest((mo.FetchGroup("g", None),)), version=8))
    delete = ctx.reply(ctx.send(mg.DeleteGroupsRequest(("g",)), version=2))
    leave = ctx.leave("g", (member, None)).error
    assert len(commit) == 1
    return {
        "join": join,
        "sync": sync,
        "heartbeat": ctx.heartbeat("g", member, generation),
        "heartbeat fast lane": fast_lane,
        "commit": commit.pop(),
        "fetch": fetch.groups[0].error,
        "describe": ctx.describe("g").error,
        "delete": delete.results[0][1],
        "leave": leave,
    }


def test_a_group_whose_shard_is_elsewhere_is_answered_not_coordinator_everywhere() -> None:
    ctx, _ = replica()
    (member,), generation = ctx.stable_group("g", n=1)
    ctx._absorb(ctx.coordinator.unload(G, now_ms=ctx.now_ms))
    answers = every_answer(ctx, member, generation)
    assert answers == dict.fromkeys(answers, ErrorCode.not_coordinator)
    listed = ctx.reply(ctx.send(mg.ListGroupsRequest(), version=4))
    assert listed.groups == ()
    assert "g" not in ctx.coordinator.groups and not ctx.core.offsets


def test_while_a_shard_loads_each_api_answers_as_kafka_and_sync_asks_for_a_rejoin() -> None:
    ctx, sharding = replica()
    sharding.serving.discard(G)
    sharding.loading.add(G)
    answers = every_answer(ctx, "m", 1)
    loading = ErrorCode.coordinator_load_in_progress
    assert answers == {
        "join": loading,
        "sync": ErrorCode.rebalance_in_progress,  # Java fails the poll on load-in-progress
        "heartbeat": ErrorCode.none,  # Kafka: "still loading, so blindly respond"
        "heartbeat fast lane": ErrorCode.none,
        "commit": loading,
        "fetch": loading,
        "describe": loading,
        "delete": loading,
        "leave": loading,
    }


def test_unloading_answers_parked_joins_and_syncs_and_stops_every_timer_of_the_group() -> None:
    ctx, _ = replica()
    (a, b), generation = ctx.stable_group("g", n=2)
    assert ctx.reply(ctx.sync("g", b, generation)).error is ErrorCode.none
    rejoin = ctx.join("g", a)  # a rejoins: the group prepares a rebalance, a's join parks
    assert ctx.parked(rejoin)
    assert ctx.group("g").state is GroupState.PREPARING_REBALANCE
    ctx._absorb(ctx.coordinator.unload(G, now_ms=ctx.now_ms))
    assert ctx.reply(rejoin).error is ErrorCode.not_coordinator
    armed = ctx.core.timers.keys()
    assert not [k for k in armed if "-g" in k and k != "expire-offsets"]
    ctx.sleep(120_000)  # nothing of the group fires, nothing is written
    assert not ctx.all_effects[-1].records


def test_a_stable_group_moved_to_another_replica_comes_back_stable_with_fresh_sessions() -> None:
    old, _ = replica()
    old.create_topic("t", 1)
    (a, b), generation = old.stable_group("g", n=2, session_ms=10_000)
    assert old.commit("g", {("t", 0): 42}, member_id=a, generation=generation) == {
        ("t", 0): ErrorCode.none
    }
    old.sleep(9_000)  # 9 s into a 10 s session: the move must not cost the members it
    new = CoreContext(start_ms=old.now_ms)
    new.create_topic("t", 1)  # topics are the cluster's, loaded apart from shards
    new.coordinator.share(SHARDS)
    new._absorb(new.coordinator.load(G, old.store.replay_order(), now_ms=new.now_ms))
    group = new.group("g")
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert new.timer(f"heartbeat-g-{a}") == new.now_ms + 10_000
    new.sleep(5_000)
    assert new.heartbeat("g", a, generation) is ErrorCode.none
    assert new.heartbeat("g", b, generation) is ErrorCode.none
    assert new.committed("g", "t", [0]) == {0: 42}
    assert new.group("g").generation_id == generation


def test_find_coordinator_names_the_owner_and_metadata_every_replica() -> None:
    ctx, sharding = replica()
    here = Node(0, "127.0.0.1", 9092)
    sharding.brokers = {0: {"": here}, 7: {"": OTHER}}
    elsewhere = next(g for g in (f"x{n}" for n in range(1000)) if shard_of(g, SHARDS) != G)
    sharding.owners = {G: 0, shard_of(elsewhere, SHARDS): 7, 0: 7}
    orphan = next(
        g for g in (f"y{n}" for n in range(1000)) if shard_of(g, SHARDS) not in sharding.owners
    )
    found = ctx.reply(ctx.send(mc.FindCoordinatorRequest(("g", elsewhere, orphan)), version=4))
    by_key = {c.key: (c.node_id, c.host, c.port, c.error) for c in found.coordinators}
    assert by_key == {
        "g": (0, "127.0.0.1", 9092, ErrorCode.none),
        elsewhere: (7, "replica-7", 9192, ErrorCode.none),
        orphan: (-1, "", -1, ErrorCode.coordinator_not_available),
    }
    metadata = ctx.reply(ctx.send(mc.MetadataRequest(None), version=12))
    assert metadata.brokers == (here, OTHER) and metadata.controller_id == 7


def test_a_shard_released_here_is_not_named_here_before_the_next_owner_is_known() -> None:
    """Between releasing a shard (or fencing itself) and its next lease renewal, the
    replica's map still says it owns the shard: FindCoordinator must not send members back
    to a replica that will answer NOT_COORDINATOR, but tell them to ask again."""
    ctx, sharding = replica()
    here = Node(0, "127.0.0.1", 9092)
    sharding.brokers = {0: {"": here}}
    sharding.owners = {G: 0}

    def found() -> tuple[int, ErrorCode]:
        answer = ctx.reply(ctx.send(mc.FindCoordinatorRequest(("g",)), version=4))
        return answer.coordinators[0].node_id, answer.coordinators[0].error

    assert found() == (0, ErrorCode.none)
    ctx._absorb(ctx.coordinator.unload(G, now_ms=ctx.now_ms))
    assert found() == (-1, ErrorCode.coordinator_not_available)
    sharding.loading.add(G)  # claimed again, its records being read: members come here
    assert found() == (0, ErrorCode.none)
