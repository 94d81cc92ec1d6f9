"""Per-request authorization in the sans-IO core: Kafka's actions, Kafka's error shapes.

Every request goes through `AuthzContext.ask`, which does what the server's edge does:
compute `needed`, refuse a chosen subset (each refused action must be one the request
needs, or the test would prove nothing) and hand the refusals to the core in
`RequestContext.denied`. Refusals must leave the state exactly as it was.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from kgroups.coordinator.core import CoordinatorConfig, Effects
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.context import heartbeat_key
from kgroups.coordinator.core.effects import RequestBody
from kgroups.coordinator.wire import encode
from kgroups.protocol.apis import ApiKey
from kgroups.protocol.errors import ErrorCode
from kgroups.security.actions import SUPPORTED, Action, ResourceType, cluster, group, topic
from kgroups.security.actions import Operation as Op
from tests.core_context import CONSUMER, CoreContext, protocols, record_key

E = ErrorCode
OMITTED = -(2**31)
NULL_ID = uuid.UUID(int=0)
BROKER, TOPIC, GROUP = 4, 2, 32
EVERYTHING = sum(1 << op for op in SUPPORTED[ResourceType.GROUP])


@dataclass
class Asked:
    needed: frozenset[Action]
    reply: Any
    effects: Effects


class AuthzContext(CoreContext):
    def ask(self, request: RequestBody, *, deny: Iterable[Action] = (), version: int = 9) -> Asked:
        needed = self.coordinator.needed(request)
        denied = frozenset(deny)
        assert denied <= needed, f"refusing actions the request does not need: {denied - needed}"
        ref = next(self._refs)
        ctx = mg.RequestContext(ref, version, "client", "/127.0.0.1", denied=denied)
        effects = self._absorb(self.coordinator.handle(ctx, request, now_ms=self.now_ms))
        return Asked(needed, self.reply(ref), effects)

    def snapshot(self) -> tuple[Any, ...]:
        core = self.core
        timers = {key: core.timers.deadline(key) for key in core.timers.keys()}  # noqa: SIM118
        groups = {group_id: dataclasses.asdict(g) for group_id, g in core.groups.items()}
        return copy.deepcopy(
            (groups, core.offsets, core.topics, core.group_configs, core.log_ends, timers)
        )

    def refused(self, request: RequestBody, deny: Iterable[Action], *, version: int = 9) -> Asked:
        """Ask with `deny` refused, and check the refusal changed nothing at all."""
        self.sleep(1_000)  # a timer rescheduled now would move
        before = self.snapshot()
        asked = self.ask(request, deny=deny, version=version)
        assert asked.effects.records == ()
        assert self.snapshot() == before
        return asked


def context(*topics: tuple[str, int], auto_create: bool = False) -> AuthzContext:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0, auto_create_topics_enable=auto_create
    )
    ctx = AuthzContext(config)
    for name, partitions in topics:
        assert ctx.create_topic(name, partitions).error is E.none
    return ctx


def join_request(group_id: str = "g", member_id: str = "") -> mg.JoinGroupRequest:
    return mg.JoinGroupRequest(group_id, 10_000, 60_000, member_id, None, CONSUMER, protocols())


def commit_request(
    group_id: str, offsets: dict[str, tuple[int, ...]], generation: int = -1, member: str = ""
) -> mo.OffsetCommitRequest:
    topics = tuple(
        mo.CommitTopic(name, tuple(mo.CommitPartition(p, 10 + p) for p in parts))
        for name, parts in offsets.items()
    )
    return mo.OffsetCommitRequest(group_id, generation, member, topics)


def fetch_request(*groups: tuple[str, dict[str, tuple[int, ...]] | None]) -> mo.OffsetFetchRequest:
    return mo.OffsetFetchRequest(
        tuple(
            mo.FetchGroup(
                g,
                None
                if topics is None
                else tuple(mo.FetchTopic(t, parts) for t, parts in topics.items()),
            )
            for g, topics in groups
        )
    )


def names(request_topics: Iterable[str]) -> tuple[mc.TopicRef, ...]:
    return tuple(mc.TopicRef(t) for t in request_topics)


# -- needed: exactly the actions Kafka checks --------------------------------------------


def test_needed_names_exactly_the_actions_kafka_checks() -> None:
    ctx = context(("t", 2), ("u", 1), auto_create=True)
    ctx.commit("simple", {("t", 0): 1, ("u", 0): 2})
    ctx.stable_group("live", n=1)
    tid = ctx.core.topics["t"].topic_id
    need = ctx.coordinator.needed
    read, describe = Op.READ, Op.DESCRIBE

    assert need(mc.FindCoordinatorRequest(("a", "b"))) == {
        group(describe, "a"),
        group(describe, "b"),
    }
    assert need(mc.FindCoordinatorRequest(("a",), key_type=1)) == frozenset()
    for request in (
        join_request("g"),
        mg.SyncGroupRequest("g", 1, "m", None, CONSUMER, "range", ()),
        mg.HeartbeatRequest("g", 1, "m"),
        mg.LeaveGroupRequest("g", (mg.LeavingMember("m"),)),
    ):
        assert need(request) == {group(read, "g")}
    commit = mo.OffsetCommitRequest(
        "g",
        -1,
        "",
        (
            mo.CommitTopic("ghost", (mo.CommitPartition(0, 1),)),
            mo.CommitTopic(None, (mo.CommitPartition(0, 1),), tid),
            mo.CommitTopic(None, (mo.CommitPartition(0, 1),), uuid.UUID(int=999)),
        ),
    )
    assert need(commit) == {group(read, "g"), topic(read, "ghost"), topic(read, "t")}
    assert need(fetch_request(("simple", None), ("g", {"x": (0,)}))) == {
        group(describe, "simple"),
        topic(describe, "t"),
        topic(describe, "u"),
        group(describe, "g"),
        topic(describe, "x"),
    }
    assert need(mo.OffsetDeleteRequest("g", (("t", (0,)),))) == {
        group(Op.DELETE, "g"),
        topic(read, "t"),
    }
    assert need(mg.DescribeGroupsRequest(("a", "b"))) == {
        group(describe, "a"),
        group(describe, "b"),
    }
    assert need(mg.DescribeGroupsRequest(("a",), include_authorized_operations=True)) == {
        group(op, "a") for op in SUPPORTED[ResourceType.GROUP]
    }
    assert need(mg.ListGroupsRequest()) == {
        cluster(describe),
        group(describe, "simple"),
        group(describe, "live"),
    }
    assert need(mg.DeleteGroupsRequest(("a", "b"))) == {
        group(Op.DELETE, "a"),
        group(Op.DELETE, "b"),
    }
    assert need(mc.MetadataRequest(None)) == {topic(describe, "t"), topic(describe, "u")}
    assert need(mc.MetadataRequest(names(["t", "ghost"]))) == {
        topic(describe, "t"),
        topic(describe, "ghost"),
    }
    assert need(mc.MetadataRequest(names(["t", "ghost"]), allow_auto_topic_creation=False)) == {
        topic(describe, "t"),
        topic(describe, "ghost"),
    }
    assert need(mc.MetadataRequest(names(["t", "ghost"]), allow_auto_topic_creation=True)) == {
        topic(describe, "t"),
        topic(describe, "ghost"),
        cluster(Op.CREATE),
        topic(Op.CREATE, "ghost"),
    }
    assert need(mc.MetadataRequest((mc.TopicRef(None, tid),))) == {topic(describe, "t")}
    assert need(mc.ListOffsetsRequest((mc.ListOffsetsTopic("t", ((0, -1),)),))) == {
        topic(describe, "t")
    }
    fetch = mc.FetchRequest(
        (
            mc.FetchTopicSpec(mc.TopicRef("ghost"), (mc.FetchPartitionSpec(0, 0),)),
            mc.FetchTopicSpec(mc.TopicRef(None, tid), (mc.FetchPartitionSpec(0, 0),)),
        )
    )
    assert need(fetch) == {topic(read, "ghost"), topic(read, "t")}
    assert need(mc.CreateTopicsRequest((mc.NewTopic("a", 1), mc.NewTopic("b", 1)))) == {
        cluster(Op.CREATE),
        topic(Op.CREATE, "a"),
        topic(Op.CREATE, "b"),
    }
    assert need(mc.DeleteTopicsRequest((mc.TopicRef("ghost"), mc.TopicRef(None, tid)))) == {
        cluster(Op.DELETE),
        topic(describe, "ghost"),
        topic(Op.DELETE, "ghost"),
        topic(describe, "t"),
        topic(Op.DELETE, "t"),
    }
    assert need(mc.CreatePartitionsRequest((("t", 4),))) == {topic(Op.ALTER, "t")}
    resources = (("b", BROKER), ("t", TOPIC), ("g", GROUP), ("x", 99))
    assert need(
        mk.DescribeConfigsRequest(
            tuple(mk.DescribeConfigsResource(k, n, None) for n, k in resources)
        )
    ) == {
        cluster(Op.DESCRIBE_CONFIGS),
        topic(Op.DESCRIBE_CONFIGS, "t"),
        group(Op.DESCRIBE_CONFIGS, "g"),
    }
    assert need(
        mk.AlterConfigsRequest(
            tuple(mk.AlterConfigsResource(k, n, ()) for n, k in resources), False
        )
    ) == {cluster(Op.ALTER_CONFIGS), topic(Op.ALTER_CONFIGS, "t"), group(Op.ALTER_CONFIGS, "g")}


def test_needed_is_pure() -> None:
    ctx = context(("t", 1))
    ctx.stable_group(n=1)
    before = ctx.snapshot()
    for request in (
        join_request("new"),
        mc.MetadataRequest(names(["ghost"]), allow_auto_topic_creation=True),
        commit_request("simple", {"t": (0,)}),
    ):
        ctx.coordinator.needed(request)
    assert ctx.snapshot() == before
    assert "new" not in ctx.coordinator.groups and "ghost" not in ctx.core.topics


# -- nothing denied: nothing changes ---------------------------------------------------------

SCENARIO: list[tuple[RequestBody, int]] = [
    (join_request("g"), 9),
    (mc.FindCoordinatorRequest(("g",)), 4),
    (mc.FindCoordinatorRequest(("g",)), 3),
    (commit_request("simple", {"t": (0, 1), "ghost": (0,)}), 8),
    (fetch_request(("simple", None), ("simple", {"t": (0, 5)})), 8),
    (mg.DescribeGroupsRequest(("simple", "nope")), 5),
    (mg.DescribeGroupsRequest(("simple",), include_authorized_operations=True), 5),
    (mg.ListGroupsRequest(), 4),
    (mc.MetadataRequest(None), 9),
    (mc.MetadataRequest(names(["t", "auto"]), allow_auto_topic_creation=True), 9),
    (mc.ListOffsetsRequest((mc.ListOffsetsTopic("t", ((0, -1),)),)), 5),
    (mc.FetchRequest((mc.FetchTopicSpec(mc.TopicRef("t"), (mc.FetchPartitionSpec(0, 3),)),)), 12),
    (mc.CreatePartitionsRequest((("t", 3),)), 1),
    (mk.DescribeConfigsRequest((mk.DescribeConfigsResource(GROUP, "simple", None),)), 4),
    (mo.OffsetDeleteRequest("simple", (("t", (0,)),)), 0),
    (mg.DeleteGroupsRequest(("simple",)), 2),
    (mc.DeleteTopicsRequest(names(["t"])), 6),
]


def test_with_nothing_denied_every_answer_is_the_same_as_without_authorization() -> None:
    plain = context(("t", 2), auto_create=True)
    authorized = context(("t", 2), auto_create=True)
    for request, version in SCENARIO:
        expected = plain.reply(plain.send(request, version=version))
        asked = authorized.ask(request, version=version)
        assert asked.needed, request
        assert asked.reply == expected, request
        if isinstance(request, mg.DescribeGroupsRequest) and request.include_authorized_operations:
            # Asked for, everything allowed: every operation Kafka supports on a group.
            assert [g.authorized_operations for g in asked.reply.groups] == [EVERYTHING]
    assert plain.store.rows == authorized.store.rows
    assert "auto" in authorized.core.topics


# -- the group APIs ----------------------------------------------------------------------


def test_find_coordinator_refuses_each_key_with_no_node() -> None:
    ctx = context()
    deny = [group(Op.DESCRIBE, "secret")]
    batched = ctx.refused(mc.FindCoordinatorRequest(("mine", "secret")), deny, version=4).reply
    mine, secret = batched.coordinators
    assert (mine.node_id, mine.error) == (0, E.none)
    assert (secret.key, secret.node_id, secret.host, secret.port) == ("secret", -1, "", -1)
    assert (secret.error, secret.error_message) == (E.group_authorization_failed, None)

    old = ctx.refused(mc.FindCoordinatorRequest(("secret",)), deny, version=3).reply
    wire = encode(ApiKey.FIND_COORDINATOR, 3, old)
    assert (wire.error_code, wire.error_message) == (
        E.group_authorization_failed,
        "Group authorization failed.",
    )
    assert (wire.node_id, wire.host, wire.port) == (-1, "", -1)


def test_join_refused_creates_no_group() -> None:
    ctx = context()
    reply = ctx.refused(join_request("g"), [group(Op.READ, "g")]).reply
    assert reply == mg.JoinGroupResponse(E.group_authorization_failed)
    assert (reply.generation_id, reply.member_id, reply.leader, reply.members) == (-1, "", "", ())
    assert "g" not in ctx.coordinator.groups


def test_join_sync_heartbeat_leave_of_a_member_refused_leave_the_group_alone() -> None:
    ctx = context()
    (a, b), generation = ctx.stable_group(n=2)
    read = [group(Op.READ, "g")]
    joined = ctx.refused(join_request("g", a), read).reply
    assert (joined.error, joined.member_id) == (E.group_authorization_failed, "")

    sync = mg.SyncGroupRequest("g", generation, a, None, CONSUMER, "range", ())
    assert ctx.refused(sync, read, version=5).reply == mg.SyncGroupResponse(
        E.group_authorization_failed
    )
    # Kafka checks SyncGroup's mandatory protocol fields (v5+) before authorization.
    incomplete = mg.SyncGroupRequest("g", generation, a, None, None, None, ())
    assert ctx.refused(incomplete, read, version=5).reply.error is E.inconsistent_group_protocol

    deadline = ctx.timer(heartbeat_key("g", a))
    beat = ctx.refused(mg.HeartbeatRequest("g", generation, a), read, version=4).reply
    assert beat == mg.HeartbeatResponse(E.group_authorization_failed)
    ctx.assert_timer(heartbeat_key("g", a), deadline)

    leave = mg.LeaveGroupRequest("g", (mg.LeavingMember(b),))
    left = ctx.refused(leave, read, version=5).reply
    assert left == mg.LeaveGroupResponse(E.group_authorization_failed, ())
    assert encode(ApiKey.LEAVE_GROUP, 1, left).error_code is E.group_authorization_failed
    assert set(ctx.group().members) == {a, b}


def test_describe_groups_refuses_each_group_as_kafka_does() -> None:
    ctx = context()
    ctx.stable_group("g", n=1)
    ctx.stable_group("h", n=1)
    request = mg.DescribeGroupsRequest(("g", "h", "nope"))
    deny = [group(Op.DESCRIBE, "g"), group(Op.DESCRIBE, "nope")]
    g, h, nope = ctx.refused(request, deny, version=6).reply.groups
    refused = mg.DescribedGroup("g", "", E.group_authorization_failed)
    assert g == refused
    assert (g.protocol_type, g.protocol_data, g.members, g.authorized_operations) == (
        "",
        "",
        (),
        OMITTED,
    )
    # Existence is not leaked: an unknown group refused is refused, not "not found".
    assert nope == mg.DescribedGroup("nope", "", E.group_authorization_failed)
    assert (h.state, h.error, len(h.members)) == ("Stable", E.none, 1)
    assert h.authorized_operations == OMITTED  # not asked for


def test_describe_groups_authorized_operations_leave_out_the_refused_ones() -> None:
    ctx = context()
    ctx.stable_group("g", n=1)
    request = mg.DescribeGroupsRequest(("g", "nope"), include_authorized_operations=True)
    deny = [group(Op.DELETE, "g"), group(Op.ALTER_CONFIGS, "g")]
    g, nope = ctx.refused(request, deny, version=5).reply.groups
    expected = (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.DESCRIBE_CONFIGS)
    assert g.authorized_operations == expected
    assert nope.authorized_operations == EVERYTHING  # v5: an unknown group is Dead, no error
    response = ctx.ask(request, deny=deny, version=6).reply
    assert response.groups[1].error is E.group_id_not_found
    assert response.groups[1].authorized_operations == OMITTED  # only error-free groups
    wire = encode(ApiKey.DESCRIBE_GROUPS, 5, mg.DescribeGroupsResponse((g,)))
    assert wire.groups[0].authorized_operations == expected
    old = ctx.ask(request, deny=deny, version=2).reply  # v0-2 cannot ask for them
    assert old.groups[0].authorized_operations == OMITTED


def test_list_groups_filters_silently_without_describe_on_the_cluster() -> None:
    ctx = context(("t", 1))
    ctx.stable_group("a", n=1)
    ctx.commit("b", {("t", 0): 1})
    request = mg.ListGroupsRequest()

    def listed(*deny: Action) -> set[str]:
        reply = ctx.refused(request, deny, version=4).reply
        assert reply.error is E.none
        return {g.group_id for g in reply.groups}

    assert listed() == {"a", "b"}
    assert listed(group(Op.DESCRIBE, "b")) == {"a", "b"}  # the cluster grant covers all
    assert listed(cluster(Op.DESCRIBE)) == {"a", "b"}
    assert listed(cluster(Op.DESCRIBE), group(Op.DESCRIBE, "b")) == {"a"}
    assert listed(cluster(Op.DESCRIBE), group(Op.DESCRIBE, "a"), group(Op.DESCRIBE, "b")) == set()


def test_delete_groups_refused_keeps_the_group_and_its_offsets() -> None:
    ctx = context(("t", 1))
    ctx.commit("a", {("t", 0): 1})
    ctx.commit("b", {("t", 0): 2})
    request = mg.DeleteGroupsRequest(("a", "nope"))
    deny = [group(Op.DELETE, "a"), group(Op.DELETE, "nope")]
    reply = ctx.refused(request, deny, version=2).reply
    assert reply.results == (
        ("a", E.group_authorization_failed),
        ("nope", E.group_authorization_failed),
    )
    asked = ctx.ask(mg.DeleteGroupsRequest(("a", "b")), deny=[group(Op.DELETE, "a")], version=2)
    assert asked.reply.results == (("a", E.group_authorization_failed), ("b", E.none))
    assert "a" in ctx.coordinator.groups and "b" not in ctx.coordinator.groups
    assert ctx.committed("a", "t", [0]) == {0: 1}


# -- offsets -------------------------------------------------------------------------------


def test_offset_commit_refused_group_fails_every_partition_and_creates_nothing() -> None:
    ctx = context(("t", 2))
    request = commit_request("simple", {"t": (0, 1), "ghost": (0,)})
    reply = ctx.refused(request, [group(Op.READ, "simple")], version=8).reply
    assert reply == mo.OffsetCommitResponse(
        (
            mo.CommitTopicResult(
                "t", None, ((0, E.group_authorization_failed), (1, E.group_authorization_failed))
            ),
            mo.CommitTopicResult("ghost", None, ((0, E.group_authorization_failed),)),
        )
    )
    assert "simple" not in ctx.coordinator.groups


def test_offset_commit_refused_topic_fails_alone_the_others_are_stored() -> None:
    ctx = context(("t", 2), ("secret", 1))
    request = commit_request("simple", {"t": (0,), "secret": (0,), "ghost": (0,), "u": (0,)})
    deny = [topic(Op.READ, "secret"), topic(Op.READ, "ghost")]
    asked = ctx.ask(request, deny=deny, version=8)
    results = {(t.name, p): code for t in asked.reply.topics for p, code in t.partitions}
    assert results == {
        ("t", 0): E.none,
        ("secret", 0): E.topic_authorization_failed,
        ("ghost", 0): E.topic_authorization_failed,  # refused before "unknown": not leaked
        ("u", 0): E.unknown_topic_or_partition,
    }
    assert [record_key(r) for r in asked.effects.records] == [("offset", "simple", "t", 0)]
    assert ctx.committed("simple", "t", [0]) == {0: 10}
    assert ctx.core.offsets["simple"].keys() == {("t", 0)}


def test_offset_commit_with_every_topic_refused_does_not_reach_the_group() -> None:
    ctx = context(("secret", 1))
    (a,), generation = ctx.stable_group(n=1)
    request = commit_request("g", {"secret": (0,)}, generation, a)
    reply = ctx.refused(request, [topic(Op.READ, "secret")], version=8).reply
    assert reply.topics == (
        mo.CommitTopicResult("secret", None, ((0, E.topic_authorization_failed),)),
    )
    simple = commit_request("fresh", {"secret": (0,)})
    ctx.refused(simple, [topic(Op.READ, "secret")], version=8)
    assert "fresh" not in ctx.coordinator.groups


def test_offset_commit_by_topic_id_is_authorized_under_the_topics_name() -> None:
    ctx = context(("t", 1))
    tid = ctx.core.topics["t"].topic_id
    request = mo.OffsetCommitRequest(
        "g", -1, "", (mo.CommitTopic(None, (mo.CommitPartition(0, 5),), tid),)
    )
    reply = ctx.refused(request, [topic(Op.READ, "t")], version=10).reply
    assert reply.topics == (mo.CommitTopicResult("", tid, ((0, E.topic_authorization_failed),)),)


def test_offset_fetch_refused_group_and_topics() -> None:
    ctx = context(("t", 2), ("secret", 1))
    ctx.commit("g", {("t", 0): 5, ("secret", 0): 7})
    ctx.commit("other", {("t", 0): 9})
    request = fetch_request(("g", {"t": (0,), "secret": (0,), "ghost": (0,)}), ("other", None))
    deny = [topic(Op.DESCRIBE, "secret"), topic(Op.DESCRIBE, "ghost"), group(Op.DESCRIBE, "other")]
    g, other = ctx.refused(request, deny, version=8).reply.groups
    assert other == mo.FetchedGroup("other", (), E.group_authorization_failed)
    by_topic = {t.name: t.partitions for t in g.topics}
    assert by_topic["t"] == (mo.FetchedPartition(0, 5, -1, ""),)
    refused = (mo.FetchedPartition(0, -1, -1, "", E.topic_authorization_failed),)
    assert by_topic["secret"] == refused
    assert by_topic["ghost"] == refused
    assert g.error is E.none


def test_offset_fetch_of_all_topics_leaves_out_the_refused_ones() -> None:
    ctx = context(("t", 1), ("secret", 1))
    ctx.commit("g", {("t", 0): 5, ("secret", 0): 7})
    request = fetch_request(("g", None))
    asked = ctx.refused(request, [topic(Op.DESCRIBE, "secret")], version=8)
    assert [t.name for t in asked.reply.groups[0].topics] == ["t"]
    assert asked.reply.groups[0].error is E.none


def test_offset_fetch_v1_carries_the_group_refusal_on_every_partition() -> None:
    ctx = context(("t", 2))
    ctx.commit("g", {("t", 0): 5})
    request = fetch_request(("g", {"t": (0, 1)}))
    reply = ctx.refused(request, [group(Op.DESCRIBE, "g")], version=1).reply
    wire = encode(ApiKey.OFFSET_FETCH, 1, reply)
    parts = [
        (p.partition_index, p.committed_offset, p.error_code)
        for t in wire.topics
        for p in t.partitions
    ]
    assert parts == [(0, -1, E.group_authorization_failed), (1, -1, E.group_authorization_failed)]
    top = encode(
        ApiKey.OFFSET_FETCH, 3, ctx.refused(request, [group(Op.DESCRIBE, "g")], version=3).reply
    )
    assert (top.error_code, top.topics) == (E.group_authorization_failed, ())


def test_offset_delete_refused_group_or_topic_keeps_the_offsets() -> None:
    ctx = context(("t", 1), ("u", 1))
    ctx.commit("g", {("t", 0): 5, ("u", 0): 6})
    request = mo.OffsetDeleteRequest("g", (("t", (0,)), ("u", (0,)), ("ghost", (0,))))
    reply = ctx.refused(request, [group(Op.DELETE, "g")], version=0).reply
    assert reply == mo.OffsetDeleteResponse((), E.group_authorization_failed)
    deny = [topic(Op.READ, "t"), topic(Op.READ, "ghost")]
    asked = ctx.ask(request, deny=deny, version=0)
    assert asked.reply == mo.OffsetDeleteResponse(
        (
            ("t", ((0, E.topic_authorization_failed),)),
            ("u", ((0, E.none),)),
            ("ghost", ((0, E.topic_authorization_failed),)),
        )
    )
    assert ctx.core.offsets["g"].keys() == {("t", 0)}


# -- the cluster's topics --------------------------------------------------------------------


def test_metadata_refuses_named_topics_without_leaking_their_existence() -> None:
    ctx = context(("t", 1), ("secret", 2))
    tid = ctx.core.topics["secret"].topic_id
    request = mc.MetadataRequest(names(["t", "secret", "ghost"]))
    deny = [topic(Op.DESCRIBE, "secret"), topic(Op.DESCRIBE, "ghost")]
    t, secret, ghost = ctx.refused(request, deny, version=9).reply.topics
    assert (t.name, t.error, len(t.partitions)) == ("t", E.none, 1)
    assert secret == mc.TopicMetadata("secret", NULL_ID, (), E.topic_authorization_failed)
    assert ghost == mc.TopicMetadata("ghost", NULL_ID, (), E.topic_authorization_failed)
    by_id = mc.MetadataRequest((mc.TopicRef(None, tid),))
    (refused,) = ctx.refused(by_id, [topic(Op.DESCRIBE, "secret")], version=12).reply.topics
    assert refused == mc.TopicMetadata(None, tid, (), E.topic_authorization_failed)


def test_metadata_of_all_topics_leaves_out_the_refused_ones() -> None:
    ctx = context(("t", 1), ("secret", 1))
    reply = ctx.refused(mc.MetadataRequest(None), [topic(Op.DESCRIBE, "secret")]).reply
    assert [t.name for t in reply.topics] == ["t"]


def test_metadata_auto_creation_needs_create_on_the_cluster_or_the_topic() -> None:
    ctx = context(auto_create=True)
    request = mc.MetadataRequest(names(["auto"]), allow_auto_topic_creation=True)
    both = [cluster(Op.CREATE), topic(Op.CREATE, "auto")]
    (refused,) = ctx.refused(request, both).reply.topics
    assert refused == mc.TopicMetadata("auto", NULL_ID, (), E.topic_authorization_failed)
    assert "auto" not in ctx.core.topics
    (created,) = ctx.ask(request, deny=[cluster(Op.CREATE)]).reply.topics
    assert (created.name, created.error) == ("auto", E.none)
    assert "auto" in ctx.core.topics
    invalid = mc.MetadataRequest(names(["bad name"]), allow_auto_topic_creation=True)
    (bad,) = ctx.refused(invalid, [cluster(Op.CREATE), topic(Op.CREATE, "bad name")]).reply.topics
    assert bad.error is E.topic_authorization_failed  # Kafka authorizes before it validates


def test_list_offsets_and_fetch_refuse_every_partition() -> None:
    ctx = context(("t", 2))
    listing = mc.ListOffsetsRequest((mc.ListOffsetsTopic("t", ((0, -1), (1, -2))),))
    reply = ctx.refused(listing, [topic(Op.DESCRIBE, "t")], version=5).reply
    refused = E.topic_authorization_failed
    assert reply.topics == (
        ("t", (mc.ListedOffset(0, refused, -1, -1), mc.ListedOffset(1, refused, -1, -1))),
    )

    tid = ctx.core.topics["t"].topic_id
    fetch = mc.FetchRequest(
        (
            mc.FetchTopicSpec(mc.TopicRef("t", tid), (mc.FetchPartitionSpec(0, 3),)),
            mc.FetchTopicSpec(mc.TopicRef("ghost"), (mc.FetchPartitionSpec(0, 0),)),
        )
    )
    deny = [topic(Op.READ, "t"), topic(Op.READ, "ghost")]
    answered = ctx.refused(fetch, deny, version=12).reply.topics
    assert [(ref.name, parts) for ref, parts in answered] == [
        ("t", (mc.FetchedPartitionData(0, refused, -1, -1, -1),)),
        ("ghost", (mc.FetchedPartitionData(0, refused, -1, -1, -1),)),
    ]


def test_create_topics_needs_create_on_the_cluster_or_the_topic() -> None:
    ctx = context()
    request = mc.CreateTopicsRequest((mc.NewTopic("a", 1), mc.NewTopic("b", 1)))
    deny = [cluster(Op.CREATE), topic(Op.CREATE, "a"), topic(Op.CREATE, "b")]
    reply = ctx.refused(request, deny, version=7).reply
    assert reply.topics == (
        mc.CreatedTopic("a", E.topic_authorization_failed, "Authorization failed."),
        mc.CreatedTopic("b", E.topic_authorization_failed, "Authorization failed."),
    )
    asked = ctx.ask(request, deny=[cluster(Op.CREATE), topic(Op.CREATE, "b")], version=7)
    assert [(t.name, t.error) for t in asked.reply.topics] == [
        ("a", E.none),
        ("b", E.topic_authorization_failed),
    ]
    assert set(ctx.core.topics) == {"a"}
    # Duplicates are refused before authorization.
    dup = mc.CreateTopicsRequest((mc.NewTopic("c", 1), mc.NewTopic("c", 1)))
    dup_reply = ctx.refused(dup, [cluster(Op.CREATE), topic(Op.CREATE, "c")], version=7).reply
    assert {t.error for t in dup_reply.topics} == {E.invalid_request}
    # Refused topics do not count towards the request's partition limit.
    big = mc.CreateTopicsRequest((mc.NewTopic("d", 1), mc.NewTopic("huge", 20_000)))
    big_reply = ctx.ask(big, deny=[cluster(Op.CREATE), topic(Op.CREATE, "huge")], version=7).reply
    assert [(t.name, t.error) for t in big_reply.topics] == [
        ("d", E.none),
        ("huge", E.topic_authorization_failed),
    ]


def test_delete_topics_needs_delete_on_the_cluster_or_describe_and_delete_on_the_topic() -> None:
    ctx = context(("t", 1), ("u", 1))
    tid = ctx.core.topics["t"].topic_id
    message = "Topic authorization failed."
    refused = E.topic_authorization_failed

    def delete(refs: tuple[mc.TopicRef, ...], *deny: Action) -> tuple[mc.TopicOutcome, ...]:
        return ctx.refused(
            mc.DeleteTopicsRequest(refs), (cluster(Op.DELETE), *deny), version=6
        ).reply.results

    assert delete(names(["t"]), topic(Op.DELETE, "t")) == (mc.TopicOutcome("t", refused, message),)
    assert delete(names(["t"]), topic(Op.DESCRIBE, "t"), topic(Op.DELETE, "t")) == (
        mc.TopicOutcome("t", refused, message),
    )
    # Not describable: refused whether or not it exists; describable: existence is told.
    assert delete(names(["ghost"]), topic(Op.DESCRIBE, "ghost")) == (
        mc.TopicOutcome("ghost", refused, message),
    )
    assert delete(names(["ghost"]), topic(Op.DELETE, "ghost")) == (
        mc.TopicOutcome("ghost", E.unknown_topic_or_partition),
    )
    # By id: the name only to a principal that may describe the topic.
    by_id = (mc.TopicRef(None, tid),)
    assert delete(by_id, topic(Op.DELETE, "t")) == (mc.TopicOutcome("t", refused, message, tid),)
    assert delete(by_id, topic(Op.DESCRIBE, "t"), topic(Op.DELETE, "t")) == (
        mc.TopicOutcome(None, refused, message, tid),
    )
    assert set(ctx.core.topics) == {"t", "u"}
    asked = ctx.ask(mc.DeleteTopicsRequest(names(["u"])), deny=[cluster(Op.DELETE)], version=6)
    assert asked.reply.results[0].error is E.none
    assert set(ctx.core.topics) == {"t"}


def test_create_partitions_refused_leaves_the_topic_as_it_was() -> None:
    ctx = context(("t", 1), ("u", 1))
    request = mc.CreatePartitionsRequest((("t", 3), ("u", 2), ("ghost", 2)))
    deny = [topic(Op.ALTER, "t"), topic(Op.ALTER, "ghost")]
    results = ctx.ask(request, deny=deny, version=1).reply.results
    refused = E.topic_authorization_failed
    assert results == (
        mc.TopicOutcome("t", refused),
        mc.TopicOutcome("u"),
        mc.TopicOutcome("ghost", refused),
    )
    assert (ctx.core.topics["t"].partitions, ctx.core.topics["u"].partitions) == (1, 2)
    ctx.refused(mc.CreatePartitionsRequest((("t", 3),)), [topic(Op.ALTER, "t")], version=1)


# -- configs -------------------------------------------------------------------------------


def test_describe_configs_refuses_each_resource_with_its_own_kind_of_error() -> None:
    ctx = context(("t", 1))
    request = mk.DescribeConfigsRequest(
        tuple(
            mk.DescribeConfigsResource(k, n, None)
            for n, k in (("0", BROKER), ("t", TOPIC), ("g", GROUP))
        )
    )
    deny = [
        cluster(Op.DESCRIBE_CONFIGS),
        topic(Op.DESCRIBE_CONFIGS, "t"),
        group(Op.DESCRIBE_CONFIGS, "g"),
    ]
    assert ctx.refused(request, deny, version=4).reply.results == (
        mk.DescribedResource(
            BROKER, "0", E.cluster_authorization_failed, "Cluster authorization failed."
        ),
        mk.DescribedResource(
            TOPIC, "t", E.topic_authorization_failed, "Topic authorization failed."
        ),
        mk.DescribedResource(
            GROUP, "g", E.group_authorization_failed, "Group authorization failed."
        ),
    )
    ghost = mk.DescribeConfigsRequest((mk.DescribeConfigsResource(TOPIC, "ghost", None),))
    (refused,) = ctx.refused(ghost, [topic(Op.DESCRIBE_CONFIGS, "ghost")], version=4).reply.results
    assert refused.error is E.topic_authorization_failed


def test_alter_configs_refused_changes_nothing() -> None:
    ctx = context(("t", 1))
    changes_g = (mk.ConfigChange("group.max.size", 0, "5"),)
    changes_t = (mk.ConfigChange("retention.ms", 0, "1000"),)
    request = mk.AlterConfigsRequest(
        (
            mk.AlterConfigsResource(GROUP, "g", changes_g),
            mk.AlterConfigsResource(TOPIC, "t", changes_t),
            mk.AlterConfigsResource(BROKER, "0", ()),
        ),
        False,
    )
    deny = [group(Op.ALTER_CONFIGS, "g"), topic(Op.ALTER_CONFIGS, "t"), cluster(Op.ALTER_CONFIGS)]
    assert ctx.refused(request, deny, version=1).reply.results == (
        mk.ResourceOutcome(GROUP, "g", E.group_authorization_failed, "Group authorization failed."),
        mk.ResourceOutcome(TOPIC, "t", E.topic_authorization_failed, "Topic authorization failed."),
        mk.ResourceOutcome(
            BROKER, "0", E.cluster_authorization_failed, "Cluster authorization failed."
        ),
    )
    asked = ctx.ask(request, deny=[topic(Op.ALTER_CONFIGS, "t")], version=1)
    assert [r.error for r in asked.reply.results] == [
        E.none,
        E.topic_authorization_failed,
        E.invalid_request,  # kgroups configures no broker, as before
    ]
    assert ctx.core.group_configs == {"g": {"group.max.size": 5}}
    assert ctx.core.topics["t"].configs == {}


@pytest.mark.parametrize(
    "make",
    [
        lambda: mc.FindCoordinatorRequest(()),
        lambda: mg.DescribeGroupsRequest(()),
        lambda: mk.DescribeConfigsRequest(()),
    ],
)
def test_empty_requests_need_nothing(make: Callable[[], RequestBody]) -> None:
    assert context().coordinator.needed(make()) == frozenset()
