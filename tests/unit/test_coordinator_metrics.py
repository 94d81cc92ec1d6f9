"""The coordinator's metrics: why each rebalance started, and what a scrape shows.

The core's facts come from real request sequences on the sans-IO core (fake time); the
collector renders them with prometheus_client and the text is parsed back, as Prometheus
would read it.
"""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.effects import (
    JoinPhaseCompleted,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceStarted,
    SessionExpired,
)
from kgroups.coordinator.metrics import CoordinatorMetrics, response_error
from kgroups.protocol.apis import ApiKey, metric_api_name
from kgroups.protocol.consumer import Assignment, encode_assignment
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def started(ctx: CoreContext) -> list[str]:
    return [
        o.reason.value
        for e in ctx.all_effects
        for o in e.observations
        if isinstance(o, RebalanceStarted)
    ]


def test_each_rebalance_is_started_for_the_reason_that_triggered_it() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group("g", n=2)
    assert started(ctx) == ["member_joined"]

    ctx.join("g", a)  # a known member rejoins in Stable: new metadata or the leader asks
    assert started(ctx)[-1] == "metadata_changed"
    ctx.join("g", b)
    generation += 1
    ctx.sync("g", a, generation, {a: b"", b: b""})
    ctx.sync("g", b, generation)

    ctx.leave("g", (b, None))
    assert started(ctx)[-1] == "member_left"
    ctx.join("g", a)
    generation += 1
    ctx.sync("g", a, generation, {a: b""})

    # a new member joins and then never sends SyncGroup: it is removed at the sync timeout
    new, ref = ctx.join_new_member("g", rebalance_ms=5_000)
    assert started(ctx)[-1] == "member_joined"
    ctx.join("g", a, rebalance_ms=5_000)
    generation = ctx.reply(ref).generation_id
    ctx.sync("g", a, generation, {a: b"", new: b""})
    ctx.sleep(5_000)
    assert started(ctx)[-1] == "sync_timeout"

    # a stays silent past its session timeout
    ctx.sleep(10_001)
    expired = [o for e in ctx.all_effects for o in e.observations if isinstance(o, SessionExpired)]
    assert [o.group_id for o in expired] == ["g"]
    assert started(ctx)[-1] != "session_expired"  # a PreparingRebalance group does not restart


def test_a_session_expiry_in_a_stable_group_starts_a_rebalance_for_that_reason() -> None:
    ctx = CoreContext()
    (a, _b), generation = ctx.stable_group("g", n=2)
    for _ in range(4):
        ctx.sleep(3_000)
        ctx.heartbeat("g", a, generation)
    assert started(ctx) == ["member_joined", "session_expired"]


def test_a_static_member_replaced_during_sync_restarts_the_round_for_that_reason() -> None:
    ctx = CoreContext()
    refs = [ctx.join("g", instance_id=i) for i in ("i1", "i2")]
    ctx.sleep(0)
    assert all(ctx.reply(r).generation_id == 1 for r in refs)  # CompletingRebalance now
    ctx.join("g", instance_id="i2")  # i2 restarted with a new member id before syncing
    assert started(ctx) == ["member_joined", "static_replacement"]


def scrape(metrics: CoordinatorMetrics) -> Samples:
    text = generate_latest(metrics.registry).decode()
    assert "_created" not in text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_shows_state_partitions_and_the_rebalance_histograms() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 4)
    (a, b), first = ctx.stable_group("g", n=2)
    ctx.sleep(1_000)
    ja, jb = ctx.join("g", a), None
    ctx.sleep(300)
    jb = ctx.join("g", b)
    generation = ctx.reply(ja).generation_id
    leader = ctx.reply(ja).leader
    ctx.sleep(40)
    holds = {a: {"t": (0, 1)}, b: {"t": (2,)}}  # partition 3 is left unassigned
    ctx.sync(
        "g", leader, generation, {m: encode_assignment(Assignment(p)) for m, p in holds.items()}
    )
    assert ctx.reply(jb).generation_id == generation
    clock = [1_800_000_000.5]
    metrics = CoordinatorMetrics(lambda: ctx.coordinator, lambda: 3, lambda: clock[0])
    metrics.observe(o for e in ctx.all_effects for o in e.observations)
    seen = scrape(metrics)

    g = (("group", "g"),)
    assert seen["kgroups_group_state", (("group", "g"), ("state", "Stable"))] == 1
    assert seen["kgroups_group_state", (("group", "g"), ("state", "PreparingRebalance"))] == 0
    assert seen["kgroups_groups", (("state", "Stable"),)] == 1
    assert seen["kgroups_groups", (("state", "Dead"),)] == 0
    assert seen["kgroups_group_generation", g] == generation == first + 1
    assert seen["kgroups_group_members", g] == 2
    assert seen["kgroups_group_assigned_partitions", g] == 3
    assert seen["kgroups_group_unassigned_partitions", g] == 1
    assert (
        seen["kgroups_group_rebalances_total", (("group", "g"), ("reason", "member_joined"))] == 1
    )
    assert (
        seen["kgroups_group_rebalances_total", (("group", "g"), ("reason", "metadata_changed"))]
        == 1
    )
    assert seen["kgroups_group_rebalance_duration_seconds_count", g] == 2
    # the second rebalance: 0.3 s waiting for b, then 0.04 s for the leader's assignment
    assert (
        seen["kgroups_group_rebalance_duration_seconds_bucket", (("group", "g"), ("le", "0.25"))]
        == 1
    )
    assert (
        seen["kgroups_group_rebalance_duration_seconds_bucket", (("group", "g"), ("le", "0.5"))]
        == 2
    )
    assert abs(seen["kgroups_group_join_phase_duration_seconds_sum", g] - 0.3) < 1e-9
    assert abs(seen["kgroups_group_sync_phase_duration_seconds_sum", g] - 0.04) < 1e-9
    assert seen["kgroups_group_last_rebalance_timestamp_seconds", g] == clock[0]
    assert seen["kgroups_partitions", ()] == 4
    assert seen["kgroups_connections", ()] == 3
    assert seen["kgroups_build_info", (("version", "0.1.0"),)] == 1


def test_answers_are_counted_by_api_and_error_and_commits_by_partition() -> None:
    ctx = CoreContext()
    ctx.stable_group("g")
    metrics = CoordinatorMetrics(lambda: ctx.coordinator, lambda: 0, lambda: 0.0)
    refused = mo.CommitTopicResult(
        "t", None, ((0, ErrorCode.none), (1, ErrorCode.none), (2, ErrorCode.illegal_generation))
    )
    metrics.answered("OffsetCommit", mo.OffsetCommitResponse((refused,)), 0.002, "g")
    metrics.answered("Heartbeat", type("H", (), {"error": ErrorCode.none})(), 0.0001, None)
    metrics.written(7, 0.003)
    seen = scrape(metrics)
    assert (
        seen["kgroups_requests_total", (("api", "OffsetCommit"), ("error", "ILLEGAL_GENERATION"))]
        == 1
    )
    assert seen["kgroups_requests_total", (("api", "Heartbeat"), ("error", "NONE"))] == 1
    assert seen["kgroups_offset_commits_total", (("error", "NONE"), ("group", "g"))] == 2
    assert (
        seen["kgroups_offset_commits_total", (("error", "ILLEGAL_GENERATION"), ("group", "g"))] == 1
    )
    assert (
        seen["kgroups_request_duration_seconds_bucket", (("api", "Heartbeat"), ("le", "0.0005"))]
        == 1
    )
    assert seen["kgroups_store_write_records_sum", ()] == 7
    assert seen["kgroups_store_write_duration_seconds_count", ()] == 1


def test_the_error_of_an_answer_is_its_own_code_first() -> None:
    assert response_error(mo.OffsetCommitResponse(())) is ErrorCode.none
    assert metric_api_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    observed = [JoinPhaseCompleted("g", 5), RebalanceCompleted("g", 2, 1, 9, 4)]
    metrics = CoordinatorMetrics(lambda: None, lambda: 0, lambda: 0.0)
    metrics.observe(observed)
    seen = scrape(metrics)
    assert seen["kgroups_group_rebalance_duration_seconds_sum", (("group", "g"),)] == 0.009
    assert "kgroups_groups" not in {name for name, _ in seen}  # no coordinator yet: no state
    assert RebalanceReason("over_capacity") is RebalanceReason.OVER_CAPACITY


def test_commits_to_groups_that_do_not_exist_leave_no_series() -> None:
    """Issue 23, finding 2: before, every refused commit to a made-up group id left a
    series (20,000 refusals, a 82 MB /metrics); now only existing groups have one, and a
    deleted group's series go with it."""
    ctx = CoreContext()
    ctx.stable_group("real")
    metrics = CoordinatorMetrics(lambda: ctx.coordinator, lambda: 0, lambda: 0.0)
    refused = mo.OffsetCommitResponse(
        (mo.CommitTopicResult("t", None, ((0, ErrorCode.group_authorization_failed),)),)
    )
    for n in range(3000):
        metrics.answered("OffsetCommit", refused, 0.001, f"made-up-{n}")
    metrics.answered("OffsetCommit", refused, 0.001, "real")
    commits = {labels for name, labels in scrape(metrics) if name == "kgroups_offset_commits_total"}
    groups = {dict(labels)["group"] for labels in commits}
    assert groups == {"real"}
    assert len(metrics._t.commits) <= 2
    ctx.core.groups.pop("real")  # the group is deleted: its series go at the next scrape
    assert not any(dict(labels).get("group") == "real" for _, labels in scrape(metrics))
