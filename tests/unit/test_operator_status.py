"""What the operator writes into a ConsumerGroup's status, from one coordinator poll."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from kgroups.admin import GroupView, MemberView
from kgroups.api.models import OffsetRequestAction, OffsetRequestResult
from kgroups.api.offset_requests import (
    MAX_PLAN,
    Done,
    Invalid,
    OffsetRequest,
    TopicScope,
    find,
    finished,
    interrupted,
    invalid,
    parse_request,
    planned,
    push,
    running,
    text_id,
    to_reset,
)
from kgroups.api.reset import Reset, Scope, Spec
from kgroups.operator.access import NEEDED, AccessWatch, allowed, review
from kgroups.operator.reporting import backoff, status_patch
from kgroups.operator.status import (
    MAX_MEMBERS,
    MAX_OFFSETS,
    GroupObservation,
    RebalanceStorm,
    group_status,
    set_condition,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"


def _group(state: str = "Stable", generation: int = 3, owners: int = 2) -> GroupView:
    members = tuple(
        MemberView(f"m{i}", None, f"c{i}", "/127.0.0.1", {"t": tuple(range(i, 6, owners))})
        for i in range(owners)
    )
    return GroupView("g", state, "consumer", "range", members, generation, "m0")


def _status(old: dict[str, Any], group: GroupView, topics: dict[str, int] | None = None,
            now: str = T0) -> tuple[dict[str, Any], str | None]:  # fmt: skip
    seen = GroupObservation(group, {("t", 0): 42}, {"t": 6} if topics is None else topics)
    return group_status(old, ["t"], seen, group_id="g", generation=1, now=now)


def _ready(status: dict[str, Any]) -> tuple[str, str]:
    c = next(c for c in status["conditions"] if c["type"] == "Ready")
    return c["status"], c["reason"]


def test_a_stable_group_owning_every_partition_is_ready() -> None:
    status, event = _status({}, _group())
    assert _ready(status) == ("True", "Stable")
    assert status["partitions"] == {"assigned": 6, "total": 6, "summary": "6/6"}
    assert (status["generation"], status["leader"], status["memberCount"]) == (3, "m0", 2)
    assert status["offsets"] == [{"topic": "t", "partition": 0, "offset": 42}]
    assert event == "generation 3, 2 members, protocol range"
    assert status["rebalances"] == 1


def test_recomputing_an_unchanged_group_changes_nothing() -> None:
    first, _ = _status({}, _group(), now=T0)
    second, event = _status(first, _group(), now=T1)
    assert second == first
    assert event is None
    assert status_patch(first, second) == {}


def test_a_new_generation_counts_a_rebalance_and_moves_the_time() -> None:
    first, _ = _status({}, _group(generation=3), now=T0)
    second, event = _status(first, _group(generation=4), now=T1)
    assert (second["rebalances"], second["lastRebalanceTime"]) == (2, T1)
    assert event is not None


def test_not_ready_reasons() -> None:
    assert _ready(_status({}, _group(state="PreparingRebalance"))[0]) == ("False", "Rebalancing")
    assert _ready(_status({}, _group(state="Empty", owners=0))[0]) == ("False", "NoMembers")
    assert _ready(_status({}, _group(), topics={})[0]) == ("False", "TopicNotFound")
    # 8 partitions now, members still own the old 6
    grown, _ = _status({}, _group(), topics={"t": 8})
    assert _ready(grown) == ("False", "PartitionsUnassigned")
    assert grown["partitions"]["summary"] == "6/8"


def test_conditions_keep_their_transition_time_until_status_flips() -> None:
    c = set_condition([], "Ready", "False", "A", "x", generation=1, now=T0)
    c = set_condition(c, "Ready", "False", "B", "y", generation=1, now=T1)
    assert c[0]["lastTransitionTime"] == T0
    c = set_condition(c, "Ready", "True", "C", "z", generation=1, now=T1)
    assert c[0]["lastTransitionTime"] == T1


def test_fields_that_disappear_are_removed_by_the_patch() -> None:
    busy, _ = _status({}, _group())
    empty, _ = _status(busy, GroupView("g", "Empty", "consumer", "", (), 3, ""))
    patch = status_patch(busy, empty)
    assert patch["leader"] is None
    assert patch["members"] == []


def test_backoff_doubles_up_to_a_cap() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4, 5, 10)] == [1, 2, 4, 8, 10, 10]


def test_a_huge_group_is_summarised_not_written_whole() -> None:
    members = tuple(
        MemberView(f"m{i:04d}", None, "c", "h", {"t": (i,)}) for i in range(MAX_MEMBERS + 50)
    )
    offsets = {("t", p): p for p in range(MAX_OFFSETS + 10)}
    group = GroupView("g", "Stable", "consumer", "range", members, 1, "m0000")
    status, _ = group_status({}, ["t"], GroupObservation(group, offsets, {"t": len(members)}),
                             group_id="g", generation=1, now=T0)  # fmt: skip
    assert len(status["members"]) == MAX_MEMBERS and status["membersTruncated"] is True
    assert status["memberCount"] == MAX_MEMBERS + 50
    assert status["partitions"]["summary"] == f"{len(members)}/{len(members)}"
    assert len(status["offsets"]) == MAX_OFFSETS and status["offsetsTruncated"] is True
    assert len(json.dumps(status)) < 500_000
    small, _ = _status({}, _group())
    assert "membersTruncated" not in small and "offsetsTruncated" not in small


def test_frequent_rebalances_warn_then_again_as_the_storm_goes_on() -> None:
    """A crash-looping member rebalances its group every time it dies and comes back: the
    fifth rebalance within the window warns; while the storm goes on, every fifth one
    after warns again (at most once a minute); a group rebalancing four times per window
    never warns."""
    storm = RebalanceStorm()
    warned = [t for t in range(0, 400, 10) if storm.seen(float(t)) is not None]
    assert warned == [40, 100, 160, 220, 280, 340]  # 5 apart, >= 60 s apart
    burst = RebalanceStorm()
    assert [t for t in range(10) if burst.seen(float(t)) is not None] == [4]  # not at 9: < 60 s
    message = burst.seen(64.0)
    assert message is not None and "11 rebalances in the last 300 s" in message
    quiet = RebalanceStorm()
    assert [quiet.seen(float(t)) for t in range(0, 1000, 76)] == [None] * 14  # 4 per window


def test_access_changes_are_said_once_each() -> None:
    """What the operator may not do is said when it changes: a Forbidden Warning naming
    every missing permission, nothing while it stays so, PermissionsRestored once back."""
    watch = AccessWatch()
    assert watch.seen([]) is None  # everything allowed from the start: nothing to say
    missing = [p.describe("team-a") for p in NEEDED if p.subresource == "status"]
    type_, reason, message = watch.seen(missing) or ("", "", "")
    assert (type_, reason) == ("Warning", "Forbidden")
    assert "patch consumergroups/status.kgroups.io in namespace team-a" in message
    assert "patch topics/status.kgroups.io in namespace team-a" in message
    assert watch.seen(list(reversed(missing))) is None
    assert watch.seen([]) == (
        "Normal",
        "PermissionsRestored",
        "the operator has every permission it needs again",
    )
    assert review(NEEDED[0], "")["spec"]["resourceAttributes"] == {
        "group": "kgroups.io",
        "resource": "consumergroups",
        "verb": "get",
    }  # no namespace: asked cluster-wide
    assert allowed({"status": {"allowed": True}}) and not allowed({"status": {}})


# --- offset requests (kubectl kgroups reset-offsets / delete-offsets) -----------------------


def _request(**fields: Any) -> str:
    base = {"id": "r-1", "action": "reset", "scenario": "to-earliest", "allTopics": True,
            "requestedBy": "alice", "requestedAt": "2026-01-01T12:00:00.000Z"}  # fmt: skip
    return json.dumps({k: v for k, v in {**base, **fields}.items() if v is not None})


def test_the_poll_keeps_the_request_records_and_reports_lag() -> None:
    """The once-a-second status is recomputed from the coordinator: it must leave the
    request records as they are (so a poll holding an older status writes nothing over
    them), and adds each committed partition's log end and lag."""
    records = [{"id": "r-1", "result": "Succeeded", "requestedBy": "alice"}]
    seen = GroupObservation(_group(), {("t", 0): 42, ("t", 1): 7}, {"t": 6}, {("t", 0): 50})
    status, _ = group_status({"offsetRequests": records}, ["t"], seen, group_id="g",
                             generation=1, now=T0, coordinator="c:9092")  # fmt: skip
    assert status["offsetRequests"] == records
    assert status["offsets"] == [
        {"topic": "t", "partition": 0, "offset": 42, "logEndOffset": 50, "lag": 8},
        {"topic": "t", "partition": 1, "offset": 7},
    ]
    assert (status["lag"], status["coordinator"]) == (8, "c:9092")
    assert status_patch({"offsetRequests": records, **status}, status) == {}
    assert "lag" not in _status({}, _group())[0]  # no log end known: no lag


def test_a_request_round_trips_through_the_annotation() -> None:
    request = OffsetRequest(
        id="r-1", action=OffsetRequestAction.RESET, scenario="shift-by", argument=-2,
        topics=[TopicScope(topic="orders", partitions=[3, 1])], requestedBy="alice",
        requestedAt=datetime.datetime(2026, 1, 1, 12, 0, 0, 123000, tzinfo=datetime.UTC),
    )  # fmt: skip
    text = request.encode()
    assert json.loads(text)["requestedAt"] == "2026-01-01T12:00:00.123Z"
    assert parse_request(text) == request
    spec, scope = to_reset(request)
    assert (spec, scope) == (Reset(Spec.SHIFT_BY, -2), Scope(False, (("orders", (3, 1)),)))


def test_time_scenarios_mean_the_same_whenever_they_are_executed() -> None:
    at = "2026-01-01T12:00:00.000Z"
    by = parse_request(_request(scenario="by-duration", argument="PT1H", requestedAt=at))
    assert isinstance(by, OffsetRequest)
    noon = int(datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC).timestamp() * 1000)
    assert to_reset(by)[0] == Reset(Spec.BY_DURATION, noon - 3_600_000)  # from requestedAt
    when = parse_request(_request(scenario="to-datetime", argument="2026-01-01T11:00:00"))
    assert isinstance(when, OffsetRequest)
    assert to_reset(when)[0] == Reset(Spec.TO_DATETIME, noon - 3_600_000)  # UTC without a zone
    every = parse_request(_request())
    assert isinstance(every, OffsetRequest)
    assert to_reset(every) == (Reset(Spec.TO_EARLIEST), Scope(True, ()))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "kgroups.io/offset-request is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        (_request(scenario="from-file"), "scenario must be one of to-earliest, to-latest"),
        (_request(scenario="to-offset"), "to-offset needs a whole number"),
        (_request(scenario="to-offset", argument="5"), "to-offset needs a whole number"),
        (_request(scenario="to-earliest", argument=3), "to-earliest takes no argument"),
        (_request(scenario="by-duration", argument="1H"), "'1H' is not a duration"),
        (_request(allTopics=None), "give topics or allTopics"),
        (_request(topics=[{"topic": "t"}]), "give topics or allTopics"),
        (_request(topics=[{"topic": "a b"}], allTopics=None), "topics.0.topic: String should match"),
        (_request(topics=[{"topic": "t", "partitions": [-1]}], allTopics=None), "greater than or equal to 0"),
        (_request(action="delete-offsets", scenario=None, allTopics=None), "delete-offsets needs topics"),
        (_request(action="delete-offsets", scenario=None, allTopics=None, dryRun=True,
                  topics=[{"topic": "t"}]), "delete-offsets has no dry run"),
        (_request(action="rewind"), "action: Input should be 'reset' or 'delete-offsets'"),
        (_request(dryRun="yes"), "dryRun: Input should be a valid boolean"),
        (_request(requestedAt="2026-01-01T12:00:00"), "requestedAt needs a time zone"),
        (_request(extra=1), "extra: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_malformed_requests_are_failed_with_why(text: str, message: str) -> None:
    parsed = parse_request(text)
    assert isinstance(parsed, Invalid)
    assert message in parsed.message
    record = invalid(parsed, now=T1)
    assert (record["result"], record["completedAt"]) == ("Failed", T1)
    assert record["id"] == ("r-1" if text.startswith("{") else text_id(text))
    assert text_id(text) == text_id(text)  # stable: recorded once, whatever the events


def test_a_bad_id_is_replaced_by_one_from_the_text() -> None:
    text = _request(id="../../x", requestedBy="mallory")
    parsed = parse_request(text)
    assert isinstance(parsed, Invalid)
    assert (parsed.id, parsed.requested_by) == (text_id(text), "mallory")


def test_records_keep_the_last_ten_and_replace_by_id() -> None:
    request = parse_request(_request(scenario="to-offset", argument=3, dryRun=True))
    assert isinstance(request, OffsetRequest)
    claim = running(request)
    assert claim == {"id": "r-1", "action": "reset", "scenario": "to-offset", "argument": "3",
                     "allTopics": True, "dryRun": True, "requestedBy": "alice",
                     "requestedAt": "2026-01-01T12:00:00.000Z", "result": "Running"}  # fmt: skip
    older = [{"id": f"o{i}", "result": "Succeeded"} for i in range(10)]
    records = push(older, claim)
    assert [r["id"] for r in records] == [*(f"o{i}" for i in range(1, 10)), "r-1"]
    plan = planned({("t", 0): 1, ("t", 1): 2}, {("t", 0): 5}, {("t", 2): "UNKNOWN_MEMBER_ID"})
    assert plan == (
        {"topic": "t", "partition": 0, "previousOffset": 5, "newOffset": 1},
        {"topic": "t", "partition": 1, "newOffset": 2},
        {"topic": "t", "partition": 2, "error": "UNKNOWN_MEMBER_ID"},
    )
    done = finished(request, Done(OffsetRequestResult.DRY_RUN, "planned", plan, ("w",)), now=T1)
    records = push(records, done)
    assert [r["id"] for r in records][-1] == "r-1" and len(records) == 10
    assert find(records, "r-1") == done
    assert (done["result"], done["completedAt"], done["partitions"], done["warnings"]) == (
        "DryRun", T1, 3, ["w"])  # fmt: skip


def test_a_large_plan_is_listed_in_part_and_counted_whole() -> None:
    request = parse_request(_request())
    assert isinstance(request, OffsetRequest)
    plan = planned({("t", p): 0 for p in range(MAX_PLAN + 7)}, {})
    warnings = tuple(f"New offset ({p}) is higher ..." for p in range(MAX_PLAN + 7))
    outcome = Done(OffsetRequestResult.FAILED, "Error line\n" * 2000, plan, warnings)
    done = finished(request, outcome, now=T1)
    assert len(done["plan"]) == MAX_PLAN and done["partitions"] == MAX_PLAN + 7
    assert len(done["warnings"]) == 50 and done["warnings"][-1] == "... and 458 more"
    assert len(done["message"]) == 4096 and done["message"].endswith("...")
    assert len(json.dumps(done)) < 50_000  # ten of these stay far below etcd's limit


def test_an_interrupted_request_is_failed_not_run_again() -> None:
    request = parse_request(_request(scenario="shift-by", argument=-1))
    assert isinstance(request, OffsetRequest)
    gone = interrupted(running(request), now=T1)
    assert (gone["result"], gone["completedAt"], gone["scenario"]) == ("Failed", T1, "shift-by")
    assert gone["message"].startswith("interrupted: the operator stopped")


def test_a_consumer_protocol_group_shows_its_epochs_and_each_members_target() -> None:
    members = (
        MemberView("a", None, "ca", "/10.0.0.1", {"t": (0, 1, 2)}, epoch=7, target={"t": (0, 1)}),
        MemberView("b", None, "cb", "/10.0.0.2", {}, epoch=8, target={"t": (2, 3, 4, 5)}),
    )
    group = GroupView("g", "Reconciling", "consumer", "uniform", members, 8,
                      group_type="consumer", assignment_epoch=8)  # fmt: skip
    status, event = _status({}, group)
    assert (status["groupType"], status["groupEpoch"], status["assignmentEpoch"]) == (
        "consumer", 8, 8)  # fmt: skip
    assert [
        (m["memberId"], m["memberEpoch"], m["targetAssignment"]) for m in status["members"]
    ] == [
        ("a", 7, [{"topic": "t", "partitions": [0, 1]}]),
        ("b", 8, [{"topic": "t", "partitions": [2, 3, 4, 5]}]),
    ]
    assert _ready(status) == ("False", "Rebalancing")
    assert event == "generation 8, 2 members, protocol uniform"
    settled = GroupView("g", "Stable", "consumer", "uniform", tuple(
        MemberView(m.member_id, None, m.client_id, m.host, m.target or {}, epoch=8, target=m.target)
        for m in members), 8, group_type="consumer", assignment_epoch=8)  # fmt: skip
    status, _ = _status(status, settled)
    assert _ready(status) == ("True", "Stable")
    classic, _ = _status({}, _group())
    assert classic["groupType"] == "classic" and "groupEpoch" not in classic
    assert all("memberEpoch" not in m for m in classic["members"])
