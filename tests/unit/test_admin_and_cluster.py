"""DescribeGroups/ListGroups/DeleteGroups and the one-node cluster's topic APIs."""

from __future__ import annotations

import uuid

import pytest

from kgroups.coordinator.core import CoordinatorConfig, GroupState
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.log_ends import MAX_MARKS, LogEnd
from kgroups.protocol.errors import ErrorCode
from tests.core_context import NODE, CoreContext

E = ErrorCode


# -- DescribeGroups / ListGroups / DeleteGroups ------------------------------------------


def test_describe_a_stable_group_shows_protocol_metadata_and_assignments() -> None:
    ctx = CoreContext()
    (a, b), _ = ctx.stable_group(n=2)
    described = ctx.describe()
    assert (described.state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert [(m.member_id, m.assignment) for m in described.members] == [
        (a, f"assign-{a}".encode()),
        (b, f"assign-{b}".encode()),
    ]
    assert all(m.metadata and m.client_host == "/127.0.0.1" for m in described.members)


def test_describe_a_rebalancing_group_has_no_protocol_data_or_metadata() -> None:
    ctx = CoreContext()
    (a, _), _ = ctx.stable_group(n=2)
    ctx.join("g", a)
    described = ctx.describe()
    assert described.state == "PreparingRebalance"
    assert described.protocol_data == ""
    assert all(m.metadata == b"" for m in described.members)
    assert described.members[0].assignment == f"assign-{a}".encode()


def test_describe_an_unknown_group_is_dead_or_not_found_from_v6() -> None:
    ctx = CoreContext()
    old = ctx.describe("nope", version=5)
    assert (old.state, old.error) == ("Dead", E.none)
    new = ctx.describe("nope", version=6)
    assert (new.state, new.error) == ("Dead", E.group_id_not_found)
    assert new.error_message and "nope" in new.error_message


def test_list_groups_filters_states_case_insensitively_and_types() -> None:
    ctx = CoreContext()
    ctx.stable_group("stable", n=1)
    ctx.create_topic("t", 1)
    ctx.commit("simple", {("t", 0): 1})

    def listed(states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> dict[str, str]:
        response = ctx.reply(ctx.send(mg.ListGroupsRequest(states, types), version=5))
        return {g.group_id: g.state for g in response.groups}

    assert listed() == {"stable": "Stable", "simple": "Empty"}
    assert listed((" STABLE ",)) == {"stable": "Stable"}
    assert listed(("empty", "dead")) == {"simple": "Empty"}
    assert listed(types=("Classic",)) == {"stable": "Stable", "simple": "Empty"}
    assert listed(types=("consumer",)) == {}
    protocol_types = {
        g.group_id: g.protocol_type
        for g in ctx.reply(ctx.send(mg.ListGroupsRequest(), version=5)).groups
    }
    assert protocol_types == {"stable": "consumer", "simple": ""}


def test_delete_groups_only_empty_ones_and_their_offsets_go_too() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 1)
    (a,), generation = ctx.stable_group(n=1)
    ctx.commit("g", {("t", 0): 5}, member_id=a, generation=generation)
    request = mg.DeleteGroupsRequest(("g", "nope"))
    assert ctx.reply(ctx.send(request, version=2)).results == (
        ("g", E.non_empty_group),
        ("nope", E.group_id_not_found),
    )
    ctx.leave("g", (a, None))
    assert ctx.reply(ctx.send(mg.DeleteGroupsRequest(("g",)), version=2)).results == (
        ("g", E.none),
    )
    assert "g" not in ctx.coordinator.groups
    assert ctx.committed("g", "t", [0]) == {0: -1}
    ctx.restart()
    assert "g" not in ctx.coordinator.groups
    assert ctx.committed("g", "t", [0]) == {0: -1}


def delete_offsets(ctx: CoreContext, group: str, **topics: tuple[int, ...]) -> tuple[E, dict]:
    request = mo.OffsetDeleteRequest(group, tuple(topics.items()))
    response = ctx.reply(ctx.send(request, version=0))
    return response.error, {name: dict(parts) for name, parts in response.topics}


def test_offset_delete_removes_offsets_nobody_subscribes_to_durably() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 2)
    ctx.create_topic("u", 1)
    (a,), generation = ctx.stable_group(n=1)  # subscribed to "t" only
    ctx.commit("g", {("t", 0): 5, ("t", 1): 6, ("u", 0): 7}, member_id=a, generation=generation)
    error, topics = delete_offsets(ctx, "g", t=(0,), u=(0,), nope=(0,))
    assert error is E.none
    assert topics == {
        "t": {0: E.group_subscribed_to_topic},
        "u": {0: E.none},
        "nope": {0: E.unknown_topic_or_partition},
    }
    assert ctx.committed("g", "t", [0, 1]) == {0: 5, 1: 6}
    assert ctx.committed("g", "u", [0]) == {0: -1}
    ctx.leave("g", (a, None))  # Empty: nothing is subscribed any more
    assert delete_offsets(ctx, "g", t=(1, 7)) == (
        E.none,
        {"t": {1: E.none, 7: E.unknown_topic_or_partition}},
    )
    ctx.restart()
    assert ctx.committed("g", "t", [0, 1]) == {0: 5, 1: -1}


def test_offset_delete_of_unknown_or_busy_non_consumer_groups_is_refused() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 1)
    assert delete_offsets(ctx, "nope", t=(0,)) == (E.group_id_not_found, {})
    ctx.join_new_member("connect", protocol_type="connect")  # a member, rebalancing
    assert delete_offsets(ctx, "connect", t=(0,)) == (E.non_empty_group, {})


# -- topics ---------------------------------------------------------------------------


def create(
    ctx: CoreContext, *topics: mc.NewTopic, validate_only: bool = False
) -> list[mc.CreatedTopic]:
    response = ctx.reply(ctx.send(mc.CreateTopicsRequest(topics, validate_only), version=7))
    return list(response.topics)


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        (mc.NewTopic("", 1), E.invalid_topic_exception),
        (mc.NewTopic("..", 1), E.invalid_topic_exception),
        (mc.NewTopic("a" * 250, 1), E.invalid_topic_exception),
        (mc.NewTopic("bad/name", 1), E.invalid_topic_exception),
        (mc.NewTopic("t", 0), E.invalid_partitions),
        (mc.NewTopic("t", -5), E.invalid_partitions),
        (mc.NewTopic("t", 1, replication_factor=2), E.invalid_replication_factor),
        (mc.NewTopic("t", 1, replication_factor=0), E.invalid_replication_factor),
        (mc.NewTopic("t", -1, assignments=((0, (1,)),)), E.invalid_replica_assignment),
        (mc.NewTopic("t", -1, assignments=((1, (0,)),)), E.invalid_replica_assignment),
        (mc.NewTopic("t", 2, assignments=((0, (0,)),)), E.invalid_request),
    ],
)
def test_create_topics_rejects_invalid_topics(topic: mc.NewTopic, expected: ErrorCode) -> None:
    ctx = CoreContext()
    (result,) = create(ctx, topic)
    assert result.error is expected
    assert result.error_message
    assert not ctx.core.topics


def test_create_topics_defaults_duplicates_collisions_and_validate_only() -> None:
    ctx = CoreContext(CoordinatorConfig(num_partitions=3))
    (default,) = create(ctx, mc.NewTopic("a.b", -1))
    assert (default.error, default.num_partitions, default.replication_factor) == (E.none, 3, 1)
    (manual,) = create(ctx, mc.NewTopic("m", -1, assignments=((0, (0,)), (1, (0,)))))
    assert manual.num_partitions == 2
    assert [t.error for t in create(ctx, mc.NewTopic("a.b", 1), mc.NewTopic("a_b", 1))] == [
        E.topic_already_exists,
        E.invalid_topic_exception,
    ]
    dupes = create(ctx, mc.NewTopic("x", 1), mc.NewTopic("x", 1))
    assert [t.error for t in dupes] == [E.invalid_request, E.invalid_request]
    (dry,) = create(ctx, mc.NewTopic("dry", 4), validate_only=True)
    assert (dry.error, dry.num_partitions) == (E.none, 4)
    assert set(ctx.core.topics) == {"a.b", "m"}


def test_create_partitions_only_grows_a_topic() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 2)

    def grow(*topics: tuple[str, int], validate_only: bool = False) -> list[ErrorCode]:
        req = mc.CreatePartitionsRequest(topics, validate_only)
        return [r.error for r in ctx.reply(ctx.send(req, version=3)).results]

    assert grow(("t", 2), ("t2", 4)) == [E.invalid_partitions, E.unknown_topic_or_partition]
    assert grow(("t", 1)) == [E.invalid_partitions]
    assert grow(("t", 5), validate_only=True) == [E.none]
    assert ctx.core.topics["t"].partitions == 2
    assert grow(("t", 5)) == [E.none]
    topic_id = ctx.core.topics["t"].topic_id
    ctx.restart()
    assert (ctx.core.topics["t"].partitions, ctx.core.topics["t"].topic_id) == (5, topic_id)


def test_delete_topics_by_name_and_by_id() -> None:
    ctx = CoreContext()
    a = ctx.create_topic("a", 1).topic_id
    ctx.create_topic("b", 1)
    refs = (
        mc.TopicRef(None, a),
        mc.TopicRef("b"),
        mc.TopicRef("c"),
        mc.TopicRef(None, uuid.UUID(int=1)),
    )
    results = ctx.reply(ctx.send(mc.DeleteTopicsRequest(refs), version=6)).results
    assert [(r.name, r.error) for r in results] == [
        ("a", E.none),
        ("b", E.none),
        ("c", E.unknown_topic_or_partition),
        (None, E.unknown_topic_id),
    ]
    assert not ctx.core.topics and not ctx.core.topic_names_by_id


def test_metadata_lists_this_node_as_leader_of_every_partition() -> None:
    ctx = CoreContext()
    topic_id = ctx.create_topic("t", 3).topic_id
    response = ctx.reply(ctx.send(mc.MetadataRequest(None), version=12))
    assert response.brokers == (NODE,)
    assert response.controller_id == 0
    assert response.cluster_id == "test-cluster"
    (topic,) = response.topics
    assert (topic.name, topic.topic_id, topic.error) == ("t", topic_id, E.none)
    assert [(p.partition, p.leader, p.replicas, p.isr) for p in topic.partitions] == [
        (i, 0, (0,), (0,)) for i in range(3)
    ]
    by_id = ctx.reply(ctx.send(mc.MetadataRequest((mc.TopicRef(None, topic_id),)), version=12))
    assert by_id.topics[0].name == "t"


def test_metadata_for_unknown_topics_and_auto_creation() -> None:
    ctx = CoreContext()
    req = mc.MetadataRequest(
        (mc.TopicRef("nope"), mc.TopicRef("bad name")), allow_auto_topic_creation=True
    )
    errors = [t.error for t in ctx.reply(ctx.send(req, version=12)).topics]
    assert errors == [E.unknown_topic_or_partition, E.invalid_topic_exception]
    assert not ctx.core.topics
    auto = CoreContext(CoordinatorConfig(auto_create_topics_enable=True, num_partitions=2))
    (topic,) = auto.reply(
        auto.send(mc.MetadataRequest((mc.TopicRef("new"),), True), version=12)
    ).topics
    assert (topic.error, len(topic.partitions)) == (E.none, 2)
    (refused,) = auto.reply(
        auto.send(mc.MetadataRequest((mc.TopicRef("x"),), False), version=12)
    ).topics
    assert refused.error is E.unknown_topic_or_partition


def test_find_coordinator_is_always_this_node_for_groups() -> None:
    ctx = CoreContext()
    response = ctx.reply(ctx.send(mc.FindCoordinatorRequest(("g1", "g2")), version=6))
    assert [(c.key, c.node_id, c.host, c.port, c.error) for c in response.coordinators] == [
        ("g1", 0, NODE.host, NODE.port, E.none),
        ("g2", 0, NODE.host, NODE.port, E.none),
    ]
    txn = ctx.reply(ctx.send(mc.FindCoordinatorRequest(("tx",), key_type=1), version=6))
    assert txn.coordinators[0].error is E.invalid_request


def list_offsets(ctx: CoreContext, *specs: tuple[str, int, int]) -> list[tuple[E, int]]:
    """ListOffsets for (topic, partition, timestamp) specs -> (error, offset) each."""
    topics = tuple(mc.ListOffsetsTopic(t, ((p, ts),)) for t, p, ts in specs)
    answered = ctx.reply(ctx.send(mc.ListOffsetsRequest(topics), version=9)).topics
    return [(o.error, o.offset) for _, listed in answered for o in listed]


LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def test_list_offsets_of_a_partition_nothing_is_known_about_is_an_empty_log() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 1)
    assert list_offsets(
        ctx, ("t", 0, LATEST), ("t", 0, EARLIEST), ("t", 0, 1_000), ("t", 0, MAX_TIMESTAMP),
        ("t", 7, LATEST), ("x", 0, LATEST),
    ) == [
        (E.none, 0), (E.none, 0), (E.none, 0), (E.none, -1),
        (E.unknown_topic_or_partition, -1), (E.unknown_topic_or_partition, -1),
    ]  # fmt: skip


def test_the_log_end_is_the_furthest_any_group_committed_or_a_source_reported() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 2)
    ctx.commit("slow", {("t", 0): 10})
    ctx.commit("fast", {("t", 0): 42})
    ctx.commit("slow", {("t", 0): 12})  # behind the end: the end stays
    assert list_offsets(ctx, ("t", 0, LATEST), ("t", 0, EARLIEST), ("t", 1, LATEST)) == [
        (E.none, 42), (E.none, 0), (E.none, 0),
    ]  # fmt: skip
    # A source that reads the log reports its end with a commit (a tagged field).
    ctx.commit("slow", {("t", 1): 3}, log_ends={("t", 1): 90})
    assert list_offsets(ctx, ("t", 1, LATEST)) == [(E.none, 90)]
    # Reported ends are not persisted: after a restart the committed offsets speak.
    ctx.restart()
    assert list_offsets(ctx, ("t", 0, LATEST), ("t", 1, LATEST)) == [(E.none, 42), (E.none, 3)]
    ctx.send(mc.DeleteTopicsRequest((mc.TopicRef("t"),)), version=6)
    ctx.create_topic("t", 2)  # a new topic of the same name starts empty
    assert list_offsets(ctx, ("t", 0, LATEST)) == [(E.none, 0)]


def test_a_time_finds_the_end_known_by_then_never_a_later_one() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 1)
    start = ctx.core.now_ms
    ctx.commit("g", {("t", 0): 10})  # at start
    ctx.sleep(60_000)
    ctx.commit("g", {("t", 0): 25})  # at start + 60 s
    ctx.sleep(60_000)
    ctx.commit("g", {("t", 0): 40})  # at start + 120 s
    assert list_offsets(
        ctx, ("t", 0, start - 1), ("t", 0, start), ("t", 0, start + 59_999),
        ("t", 0, start + 60_000), ("t", 0, start + 10**9), ("t", 0, MAX_TIMESTAMP),
    ) == [
        (E.none, 0), (E.none, 10), (E.none, 10), (E.none, 25), (E.none, 40), (E.none, 39),
    ]  # fmt: skip


def test_marks_stay_bounded_evenly_spread_and_answers_only_move_earlier() -> None:
    end = LogEnd()
    for i in range(1, 20_000):  # offset 10 i first seen at i seconds
        end.observe(i * 10, i * 1_000)
    assert len(end.mark_times) <= MAX_MARKS
    worst = 0
    for probe in range(1_000, 20_000_000, 7_919):
        exact = (probe // 1_000) * 10
        assert end.offset_at(probe) <= exact  # never past a record stamped after `probe`
        worst = max(worst, exact - end.offset_at(probe))
    # Everywhere in the history, early by at most two spacings' worth of records.
    assert worst <= 2 * 10 * end.spacing_ms // 1_000, (worst, end.spacing_ms)
    assert end.offset_at(19_999_000) == 199_990


def test_fetch_long_polls_and_never_moves_a_consumer_off_its_offset() -> None:
    ctx = CoreContext()
    topic_id = ctx.create_topic("t", 2).topic_id
    spec = (mc.FetchPartitionSpec(0, 42), mc.FetchPartitionSpec(5, 0))
    req = mc.FetchRequest(
        (mc.FetchTopicSpec(mc.TopicRef(None, topic_id), spec),), max_wait_ms=500, min_bytes=1
    )
    response = ctx.reply(ctx.send(req, version=13))
    assert response.wait_ms == 500
    ((_, parts),) = response.topics
    assert (parts[0].error, parts[0].high_watermark) == (E.none, 42)
    assert parts[1].error is E.unknown_topic_or_partition
    unknown = mc.FetchRequest((mc.FetchTopicSpec(mc.TopicRef(None, uuid.UUID(int=9)), spec[:1]),))
    assert ctx.reply(ctx.send(unknown, version=13)).topics[0][1][0].error is E.unknown_topic_id
    assert (
        ctx.reply(ctx.send(mc.FetchRequest((), min_bytes=0, max_wait_ms=500), version=13)).wait_ms
        == 0
    )
    session = mc.FetchRequest((), session_id=7, session_epoch=1)
    assert ctx.reply(ctx.send(session, version=13)).error is E.fetch_session_id_not_found


def test_group_state_survives_in_describe_after_restart() -> None:
    ctx = CoreContext()
    ctx.stable_group(n=2)
    before = ctx.describe()
    ctx.restart()
    assert ctx.describe() == before
    assert ctx.group().state is GroupState.STABLE
