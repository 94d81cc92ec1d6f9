"""What the operator writes into a ConsumerGroup's status, from one coordinator poll."""

from __future__ import annotations

import json
from typing import Any

from kgroups.admin import GroupView, MemberView
from kgroups.operator.access import NEEDED, AccessWatch, allowed, review
from kgroups.operator.handlers import _status_patch, backoff
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
    assert _status_patch(first, second) == {}


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
    patch = _status_patch(busy, empty)
    assert patch["leader"] is None
    assert patch["members"] == []


def test_backoff_doubles_up_to_a_cap() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4, 10)] == [1, 2, 4, 8, 30]


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
