"""Per-group setting overrides (a ConsumerGroup's spec.settings): set through
IncrementalAlterConfigs on a GROUP resource, read through DescribeConfigs, enforced by
JoinGroup, the initial rebalance and offset expiry, persisted and replayed, atomic."""

from __future__ import annotations

import io

from kafka.protocol.admin import DescribeGroupsResponse

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.effects import JoinPhaseCompleted, RebalanceCompleted
from kgroups.coordinator.wire import encode
from kgroups.protocol.apis import response_class
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.frames import writer_for
from kgroups.protocol.tags import reader_for
from tests.core_context import CoreContext

E = ErrorCode
GROUP_SOURCE, DEFAULT_SOURCE = 8, 4


def test_overrides_show_in_describe_configs_beside_the_defaults() -> None:
    ctx = CoreContext()
    assert ctx.alter_group_config("g", {"group.max.size": "3"}).error is E.none
    configs = ctx.group_config("g")
    assert configs["group.max.size"] == ("3", GROUP_SOURCE)
    assert configs["group.min.session.timeout.ms"] == ("6000", DEFAULT_SOURCE)
    assert set(configs) == {
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms",
        "group.max.size",
        "offsets.retention.minutes",
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    }
    assert configs["consumer.session.timeout.ms"] == ("45000", DEFAULT_SOURCE)
    assert ctx.group_config("other")["group.max.size"] == (str(2**31 - 1), DEFAULT_SOURCE)


def test_session_timeout_bounds_are_enforced_per_group() -> None:
    ctx = CoreContext()
    ctx.alter_group_config("strict", {"group.min.session.timeout.ms": "20000"})
    refused = ctx.reply(ctx.join("strict", session_ms=10_000))
    assert refused.error is E.invalid_session_timeout
    # another group keeps the coordinator's bounds
    assert ctx.reply(ctx.join("relaxed", session_ms=10_000)).error is E.member_id_required


def test_max_size_is_enforced_per_group() -> None:
    ctx = CoreContext()
    ctx.alter_group_config("g", {"group.max.size": "1"})
    ctx.stable_group("g", n=1)
    assert ctx.reply(ctx.join("g")).error is E.group_max_size_reached
    assert ctx.reply(ctx.join("other")).error is E.member_id_required


def test_initial_rebalance_delay_is_per_group() -> None:
    ctx = CoreContext(CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    ctx.alter_group_config("fast", {"group.initial.rebalance.delay.ms": "0"})
    _, fast = ctx.join_new_member("fast")
    _, slow = ctx.join_new_member("slow")
    ctx.sleep(0)
    assert not ctx.parked(fast)
    assert ctx.parked(slow)
    ctx.sleep(3000)
    assert not ctx.parked(slow)


def test_a_bad_change_leaves_every_setting_of_the_resource_unchanged() -> None:
    ctx = CoreContext()
    ctx.alter_group_config("g", {"group.max.size": "5"})
    for changes in (
        {"group.max.size": "7", "no.such.config": "1"},
        {"group.max.size": "7", "group.min.session.timeout.ms": "x"},
        {"group.max.size": "7", "group.min.session.timeout.ms": "9999999"},  # crosses max
        {"group.max.size": "0"},
    ):
        outcome = ctx.alter_group_config("g", changes)
        assert outcome.error is E.invalid_config, changes
        assert outcome.error_message
        assert ctx.group_config("g")["group.max.size"] == ("5", GROUP_SOURCE)


def test_validate_only_changes_nothing_and_delete_restores_the_default() -> None:
    ctx = CoreContext()
    assert ctx.alter_group_config("g", {"group.max.size": "2"}, validate_only=True).error is E.none
    assert ctx.group_config("g")["group.max.size"][1] == DEFAULT_SOURCE
    ctx.alter_group_config("g", {"group.max.size": "2"})
    ctx.alter_group_config("g", {"group.max.size": None})
    assert ctx.group_config("g")["group.max.size"][1] == DEFAULT_SOURCE


def test_overrides_survive_a_restart() -> None:
    ctx = CoreContext()
    ctx.alter_group_config("g", {"group.max.session.timeout.ms": "8000"})
    ctx.restart()
    assert ctx.group_config("g")["group.max.session.timeout.ms"] == ("8000", GROUP_SOURCE)
    assert ctx.reply(ctx.join("g", session_ms=9000)).error is E.invalid_session_timeout


def test_deleting_the_group_deletes_its_overrides() -> None:
    ctx = CoreContext()
    ctx.alter_group_config("g", {"group.max.size": "4"})
    (a, b), _ = ctx.stable_group("g", n=2)
    ctx.leave("g", (a, None), (b, None))
    ctx.send(mg.DeleteGroupsRequest(("g",)), version=2)
    assert ctx.group_config("g")["group.max.size"][1] == DEFAULT_SOURCE
    ctx.restart()
    assert ctx.group_config("g")["group.max.size"][1] == DEFAULT_SOURCE


def test_other_resource_types_are_refused() -> None:
    ctx = CoreContext()
    req = mk.AlterConfigsRequest(
        (mk.AlterConfigsResource(4, "0", (mk.ConfigChange("x", 0, "1"),)),), False
    )
    response = ctx.reply(ctx.send(req, version=1))
    assert response.results[0].error is E.invalid_request


def describe_topic(ctx: CoreContext, name: str, *keys: str) -> mk.DescribedResource:
    resource = mk.DescribeConfigsResource(2, name, keys or None)
    (described,) = ctx.reply(ctx.send(mk.DescribeConfigsRequest((resource,)), version=4)).results
    return described


def alter_topic(
    ctx: CoreContext, name: str, *changes: mk.ConfigChange, validate_only: bool = False
) -> mk.ResourceOutcome:
    resource = mk.AlterConfigsResource(2, name, changes)
    req = mk.AlterConfigsRequest((resource,), validate_only)
    (outcome,) = ctx.reply(ctx.send(req, version=1)).results
    return outcome


def test_topic_configs_are_validated_kept_across_restarts_and_described_as_kafka_does() -> None:
    ctx = CoreContext()
    compacted = mc.NewTopic("t", 3, configs=(("cleanup.policy", "compact"), ("retention.ms", "5")))
    bad = mc.NewTopic("bad", 3, configs=(("retention.ms", "soon"),))
    unknown = mc.NewTopic("unknown", 3, configs=(("no.such.config", "1"),))
    created = ctx.reply(
        ctx.send(mc.CreateTopicsRequest((compacted, bad, unknown), False), version=7)
    )
    assert [(t.name, t.error) for t in created.topics] == [
        ("t", E.none), ("bad", E.invalid_config), ("unknown", E.invalid_config),
    ]  # fmt: skip
    assert "bad" not in ctx.core.topics and "unknown" not in ctx.core.topics
    every = describe_topic(ctx, "t")
    sources = {e.name: (e.value, e.source) for e in every.entries}
    assert sources["cleanup.policy"] == ("compact", 1)  # DYNAMIC_TOPIC_CONFIG
    assert sources["retention.ms"] == ("5", 1)
    assert sources["segment.ms"] == ("604800000", 5)  # DEFAULT_CONFIG: Kafka's default
    assert describe_topic(ctx, "missing").error is E.unknown_topic_or_partition
    # The wire answer carries each entry's type (cleanup.policy is a LIST, 7).
    req = mk.DescribeConfigsRequest(
        (mk.DescribeConfigsResource(2, "t", ("retention.ms", "cleanup.policy")),)
    )
    wire = encode(32, 4, ctx.reply(ctx.send(req, version=4)))
    assert {c.name: c.config_type for c in wire.results[0].configs} == {
        "retention.ms": 5, "cleanup.policy": 7,
    }  # fmt: skip
    # IncrementalAlterConfigs: all or nothing, validate_only changes nothing.
    refused = alter_topic(ctx, "t", mk.ConfigChange("retention.ms", 0, "9"),
                          mk.ConfigChange("min.insync.replicas", 0, "x"))  # fmt: skip
    assert refused.error is E.invalid_config and "min.insync.replicas" in (
        refused.error_message or ""
    )
    assert (
        alter_topic(ctx, "t", mk.ConfigChange("retention.ms", 0, "9"), validate_only=True).error
        is E.none
    )
    assert alter_topic(ctx, "t", mk.ConfigChange("cleanup.policy", 1, None)).error is E.none
    assert alter_topic(ctx, "t", mk.ConfigChange("retention.ms", 2, "1")).error is E.invalid_config
    assert alter_topic(ctx, "missing", mk.ConfigChange("retention.ms", 0, "1")).error is (
        E.unknown_topic_or_partition
    )
    ctx.restart()
    ctx.send(mc.CreatePartitionsRequest((("t", 5),), False), version=3)  # keeps its configs
    ctx.restart()
    described = {
        e.name: (e.value, e.source)
        for e in describe_topic(ctx, "t", "retention.ms", "cleanup.policy").entries
    }
    assert described == {"retention.ms": ("5", 1), "cleanup.policy": ("delete", 5)}
    assert ctx.core.topics["t"].partitions == 5


def test_describe_groups_v5_and_v6_carry_generation_and_leader_in_tagged_fields() -> None:
    ctx = CoreContext()
    (a, _b), generation = ctx.stable_group("g", n=2)
    for version in (5, 6):
        described = ctx.reply(ctx.send(mg.DescribeGroupsRequest(("g",)), version=version))
        kio_response = encode(15, version, described)
        frame = io.BytesIO()
        writer_for(type(kio_response))(frame, kio_response)
        ours, _ = reader_for(response_class(15, version))(memoryview(frame.getvalue()), 0)
        assert (ours.groups[0].generation_id, ours.groups[0].leader_id) == (generation, a)
        # kafka-python, which knows nothing of the tags, reads the same bytes
        parsed = DescribeGroupsResponse.decode(frame.getvalue(), version=version)
        assert parsed.groups[0].group_id == "g"
        assert len(parsed.groups[0].members) == 2


def test_a_completed_rebalance_is_reported_with_its_duration() -> None:
    ctx = CoreContext()
    (a, b), first = ctx.stable_group("g", n=2)
    ctx.sleep(1000)
    join_a = ctx.join("g", a)  # the rebalance starts here
    ctx.sleep(200)
    join_b = ctx.join("g", b)
    generation = ctx.reply(join_a).generation_id
    assert ctx.reply(join_b).generation_id == generation == first + 1
    ctx.sleep(50)
    leader = a if ctx.reply(join_a).leader == a else b
    ctx.sync("g", leader, generation, {a: b"x", b: b"y"})
    seen = [o for e in ctx.all_effects for o in e.observations]
    done = [o for o in seen if isinstance(o, RebalanceCompleted)]
    assert [(o.group_id, o.generation, o.members) for o in done] == [
        ("g", first, 2),
        ("g", generation, 2),
    ]
    assert done[1].duration_ms == 250  # first join to the leader's assignment
    assert done[1].sync_ms == 50  # the join phase ended when b rejoined
    joins = [o.duration_ms for o in seen if isinstance(o, JoinPhaseCompleted)]
    assert joins[-1] == 200
