"""OffsetCommit / OffsetFetch: generation fencing, simple commits, retention and expiry."""

from __future__ import annotations

import uuid

from kgroups.coordinator.core import CoordinatorConfig, GroupState
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.context import EXPIRE_OFFSETS_KEY, heartbeat_key
from kgroups.coordinator.core.msg_cluster import DeleteTopicsRequest, TopicRef
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

E = ErrorCode
MINUTE = 60_000
RETENTION_MIN = 60


def ctx_with_topic(partitions: int = 2, **config: int) -> CoreContext:
    cfg = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_minutes=RETENTION_MIN,
        offsets_retention_check_interval_ms=MINUTE,
        **config,  # type: ignore[arg-type]
    )
    ctx = CoreContext(cfg)
    assert ctx.create_topic("t", partitions).error is E.none
    return ctx


def test_simple_commit_creates_a_group_for_offsets_only() -> None:
    ctx = ctx_with_topic()
    assert ctx.commit("simple", {("t", 0): 5, ("t", 1): 9}) == {("t", 0): E.none, ("t", 1): E.none}
    group = ctx.group("simple")
    assert group.state is GroupState.EMPTY and group.is_simple()
    assert ctx.committed("simple", "t", [0, 1, 2]) == {0: 5, 1: 9, 2: -1}


def test_member_commit_in_its_generation_is_accepted() -> None:
    ctx = ctx_with_topic()
    (a, b), generation = ctx.stable_group(n=2)
    result = ctx.commit("g", {("t", 0): 100}, member_id=a, generation=generation)
    assert result == {("t", 0): E.none}
    assert ctx.committed("g", "t", [0]) == {0: 100}


def test_commit_from_a_previous_generation_is_fenced() -> None:
    ctx = ctx_with_topic()
    (a, b), generation = ctx.stable_group(n=2)
    ref = ctx.join("g", a)
    # PreparingRebalance: the old generation may still commit (its last chance)...
    assert ctx.commit("g", {("t", 0): 1}, member_id=b, generation=generation) == {("t", 0): E.none}
    ctx.join("g", b)
    ctx.reply(ref)
    # ...CompletingRebalance: not yet, the new assignment is not out...
    assert ctx.commit("g", {("t", 0): 2}, member_id=b, generation=generation + 1) == {
        ("t", 0): E.rebalance_in_progress
    }
    # ...and the old generation is fenced for good.
    assert ctx.commit("g", {("t", 0): 3}, member_id=b, generation=generation) == {
        ("t", 0): E.illegal_generation
    }
    assert ctx.committed("g", "t", [0]) == {0: 1}


def test_commit_by_an_unknown_member_or_without_member_to_a_live_group() -> None:
    ctx = ctx_with_topic()
    _, generation = ctx.stable_group(n=1)
    assert ctx.commit("g", {("t", 0): 1}, member_id="ghost", generation=generation) == {
        ("t", 0): E.unknown_member_id
    }
    assert ctx.commit("g", {("t", 0): 1}) == {("t", 0): E.unknown_member_id}


def test_commit_to_an_unknown_group_with_a_generation_depends_on_version() -> None:
    ctx = ctx_with_topic()
    assert ctx.commit("nope", {("t", 0): 1}, member_id="m", generation=3, version=8) == {
        ("t", 0): E.illegal_generation
    }
    assert ctx.commit("nope", {("t", 0): 1}, member_id="m", generation=3, version=9) == {
        ("t", 0): E.group_id_not_found
    }
    assert "nope" not in ctx.coordinator.groups


def test_commit_metadata_too_large_fails_only_that_partition() -> None:
    ctx = ctx_with_topic(offset_metadata_max_bytes=10)
    result = ctx.commit("simple", {("t", 0): 1}, metadata="x" * 11)
    assert result == {("t", 0): E.offset_metadata_too_large}
    assert ctx.commit("simple", {("t", 1): 1}, metadata="x" * 10) == {("t", 1): E.none}


def test_commit_to_unknown_topics_or_partitions() -> None:
    ctx = ctx_with_topic(partitions=2)
    result = ctx.commit("simple", {("t", 1): 1, ("t", 2): 1, ("missing", 0): 1})
    assert result == {
        ("t", 1): E.none,
        ("t", 2): E.unknown_topic_or_partition,
        ("missing", 0): E.unknown_topic_or_partition,
    }


def test_commit_keeps_the_member_session_alive() -> None:
    ctx = ctx_with_topic()
    (a,), generation = ctx.stable_group(n=1, session_ms=10_000)
    ctx.sleep(9_000)
    ctx.commit("g", {("t", 0): 1}, member_id=a, generation=generation)
    ctx.assert_timer(heartbeat_key("g", a), ctx.now_ms + 10_000)


def test_commit_and_fetch_by_topic_id() -> None:
    ctx = ctx_with_topic()
    topic_id = ctx.core.topics["t"].topic_id
    req = mo.OffsetCommitRequest(
        "simple", -1, "", (mo.CommitTopic(None, (mo.CommitPartition(0, 77),), topic_id),)
    )
    response = ctx.reply(ctx.send(req, version=10))
    assert response.topics[0].topic_id == topic_id
    assert response.topics[0].partitions == ((0, E.none),)
    unknown = uuid.UUID(int=12345)
    req = mo.OffsetCommitRequest(
        "simple", -1, "", (mo.CommitTopic(None, (mo.CommitPartition(0, 1),), unknown),)
    )
    assert ctx.reply(ctx.send(req, version=10)).topics[0].partitions == ((0, E.unknown_topic_id),)
    fetch = mo.OffsetFetchRequest(
        (mo.FetchGroup("simple", (mo.FetchTopic(None, (0,), topic_id),)),)
    )
    fetched = ctx.reply(ctx.send(fetch, version=10)).groups[0].topics[0]
    assert (fetched.name, fetched.partitions[0].offset) == ("t", 77)


def test_fetch_all_offsets_and_unknown_groups() -> None:
    ctx = ctx_with_topic()
    ctx.commit("simple", {("t", 1): 4, ("t", 0): 3})
    all_of = mo.OffsetFetchRequest((mo.FetchGroup("simple", None), mo.FetchGroup("nope", None)))
    response = ctx.reply(ctx.send(all_of, version=8))
    (topic,) = response.groups[0].topics
    assert [(p.partition, p.offset) for p in topic.partitions] == [(0, 3), (1, 4)]
    assert response.groups[1].topics == ()
    assert ctx.committed("nope", "t", [0]) == {0: -1}


def test_offsets_of_a_group_expire_retention_after_it_became_empty() -> None:
    """KIP-211: offsets live while the group does, then `retention` after it empties."""
    ctx = ctx_with_topic()
    (a,), generation = ctx.stable_group(n=1, session_ms=45_000)
    ctx.commit("g", {("t", 0): 42}, member_id=a, generation=generation)
    for _ in range(4 * RETENTION_MIN):  # two retention periods of life: nothing expires
        ctx.sleep(MINUTE // 2)
        assert ctx.heartbeat("g", a, generation) is E.none
    assert ctx.committed("g", "t", [0]) == {0: 42}
    ctx.leave("g", (a, None))
    emptied_at = ctx.now_ms
    ctx.sleep(RETENTION_MIN * MINUTE - MINUTE)
    assert ctx.committed("g", "t", [0]) == {0: 42}
    ctx.sleep(2 * MINUTE)
    assert ctx.now_ms - emptied_at >= RETENTION_MIN * MINUTE
    assert ctx.committed("g", "t", [0]) == {0: -1}
    assert "g" not in ctx.coordinator.groups  # an empty group with no offsets is removed
    ctx.restart()
    assert "g" not in ctx.coordinator.groups


def test_simple_group_offsets_expire_from_their_commit_time() -> None:
    ctx = ctx_with_topic()
    ctx.commit("simple", {("t", 0): 1})
    ctx.sleep(30 * MINUTE)
    ctx.commit("simple", {("t", 1): 2})
    ctx.sleep(31 * MINUTE)
    assert ctx.committed("simple", "t", [0, 1]) == {0: -1, 1: 2}
    ctx.sleep(30 * MINUTE)
    assert "simple" not in ctx.coordinator.groups


def test_stable_consumer_group_keeps_offsets_of_subscribed_topics_only() -> None:
    ctx = ctx_with_topic()
    assert ctx.create_topic("old", 1).error is E.none
    (a,), generation = ctx.stable_group(n=1, topics=("t",), session_ms=45_000)
    ctx.commit("g", {("t", 0): 1, ("old", 0): 2}, member_id=a, generation=generation)
    for _ in range(4 * RETENTION_MIN):
        ctx.sleep(MINUTE // 2)
        assert ctx.heartbeat("g", a, generation) is E.none
    assert ctx.committed("g", "t", [0]) == {0: 1}
    assert ctx.committed("g", "old", [0]) == {0: -1}


def test_explicit_retention_time_sets_an_expiry() -> None:
    ctx = ctx_with_topic()
    req = mo.OffsetCommitRequest(
        "simple",
        -1,
        "",
        (mo.CommitTopic("t", (mo.CommitPartition(0, 9),)),),
        retention_time_ms=MINUTE,
    )
    ctx.send(req, version=2)
    ctx.sleep(2 * MINUTE)
    assert ctx.committed("simple", "t", [0]) == {0: -1}


def test_the_expiry_sweep_runs_every_check_interval() -> None:
    ctx = ctx_with_topic()
    first = ctx.timer(EXPIRE_OFFSETS_KEY)
    assert first == ctx.now_ms + MINUTE
    ctx.sleep(MINUTE)
    ctx.assert_timer(EXPIRE_OFFSETS_KEY, first + MINUTE)


def test_deleting_a_topic_deletes_its_offsets_in_every_group() -> None:
    ctx = ctx_with_topic()
    ctx.create_topic("keep", 1)
    ctx.commit("g1", {("t", 0): 1, ("keep", 0): 2})
    ctx.commit("g2", {("t", 1): 3})
    ctx.send(DeleteTopicsRequest((TopicRef("t"),)), version=6)
    assert ctx.committed("g1", "t", [0]) == {0: -1}
    assert ctx.committed("g1", "keep", [0]) == {0: 2}
    ctx.restart()
    assert ctx.committed("g2", "t", [1]) == {1: -1}
    assert ctx.committed("g1", "keep", [0]) == {0: 2}
