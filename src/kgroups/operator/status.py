"""What a ConsumerGroup's and a Topic's status should say, as pure functions.

The operator's handlers fetch (from the coordinator) and patch (into the API server);
everything in between is here, with the time passed in, so it is tested without either.
Conditions follow metav1.Condition: `lastTransitionTime` moves only when `status` flips,
which is what keeps a re-computed status equal to the stored one, so an unchanged group
costs no API write.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kgroups.admin import GroupView
from kgroups.protocol.groups import REBALANCING, GroupState

REBALANCING_STATES = frozenset(s.value for s in REBALANCING) | {"Assigning", "Reconciling"}
"""A classic group's rebalance, and a consumer-protocol group moving to a new target."""
PROTOCOLS = {True: "consumer", False: "classic"}
"""A consumer-protocol group's member's `protocol`, by MemberView.upgraded."""
MAX_MEMBERS = 200
MAX_OFFSETS = 2000
"""Status lists are capped: an object must stay well under etcd's 1.5 MB limit however
large the group, or every status write would fail. Counts stay exact."""


STORM_REBALANCES = 5
STORM_WINDOW_S = 300.0
STORM_REPEAT_S = 60.0
"""A group rebalancing this often is churning: a member crash-looping, or missing its
session timeout (a pod CPU-starved or frozen), keeps taking partitions from the others."""


@dataclass
class RebalanceStorm:
    """Rebalances seen for one group, time passed in. `seen(now)`, called on every new
    generation, answers a warning when STORM_REBALANCES happened within STORM_WINDOW_S;
    while the storm goes on it warns again after as many more rebalances, at most once a
    STORM_REPEAT_S, so a long storm is a few Warning events with its count, not one per
    rebalance nor one only at its start."""

    times: deque[float] = field(default_factory=deque)
    warned: float | None = None
    since_warned: int = 0

    def seen(self, now: float) -> str | None:
        self.times.append(now)
        self.since_warned += 1
        while self.times and self.times[0] <= now - STORM_WINDOW_S:
            self.times.popleft()
        if len(self.times) < STORM_REBALANCES or self.since_warned < STORM_REBALANCES:
            return None
        if self.warned is not None and now - self.warned < STORM_REPEAT_S:
            return None
        self.warned, self.since_warned = now, 0
        return (
            f"{len(self.times)} rebalances in the last {STORM_WINDOW_S:.0f} s: a member may be "
            f"crashing and rejoining, or missing its session timeout"
        )


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """`conditions` with `type_` set; the old transition time is kept unless status flips."""
    old = next((c for c in conditions if c.get("type") == type_), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status else now
    new: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    rest = [c for c in conditions if c.get("type") != type_]
    return sorted([*rest, new], key=lambda c: str(c["type"]))


@dataclass(frozen=True, slots=True)
class GroupObservation:
    """One poll of the coordinator for one group."""

    group: GroupView
    offsets: dict[tuple[str, int], int]
    topics: dict[str, int]
    """Partition counts of the spec's topics that exist (missing ones are absent)."""
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    """Where the committed partitions' logs end (ListOffsets latest), where known."""


PRESERVED = ("offsetRequests",)
"""Status fields the poll does not compute and keeps as they are (the offset requests'
records are written by the request handler alone)."""


def _partitions(assignment: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(assignment.items())]


def group_status(
    old: dict[str, Any],
    spec_topics: list[str],
    seen: GroupObservation,
    *,
    group_id: str,
    generation: int | None,
    now: str,
    problem: tuple[str, str] | None = None,
    coordinator: str | None = None,
) -> tuple[dict[str, Any], str | None]:
    """(new status, event message or None) for a group seen on the coordinator.

    `problem` is a (reason, message) that keeps the group from being Ready whatever its
    state (e.g. settings the coordinator refused); `coordinator` is where it was seen."""
    g = seen.group
    members = [
        {
            "memberId": m.member_id,
            **({"instanceId": m.instance_id} if m.instance_id else {}),
            "clientId": m.client_id,
            "host": m.host,
            "assignment": _partitions(m.assignment),
            **({} if m.epoch is None else {"memberEpoch": m.epoch}),
            **({} if m.target is None else {"targetAssignment": _partitions(m.target)}),
            **({} if m.upgraded is None else {"protocol": PROTOCOLS[m.upgraded]}),
        }
        for m in sorted(g.members, key=lambda m: m.member_id)[:MAX_MEMBERS]
    ]
    lags = {tp: seen.ends[tp] - o for tp, o in seen.offsets.items() if tp in seen.ends}
    offsets = [
        {
            "topic": t,
            "partition": p,
            "offset": o,
            **({"logEndOffset": seen.ends[(t, p)], "lag": lags[(t, p)]} if (t, p) in lags else {}),
        }
        for (t, p), o in sorted(seen.offsets.items())[:MAX_OFFSETS]
    ]
    counted = spec_topics or sorted({t for m in g.members for t in m.assignment})
    total = sum(seen.topics.get(t, 0) for t in counted)
    owned = {
        (t, p)
        for m in g.members
        for t, ps in m.assignment.items()
        if t in counted
        for p in ps
        if p < seen.topics.get(t, 0)
    }
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "groupId": group_id,
        "state": g.state,
        "groupType": g.group_type if g.exists else None,
        "groupEpoch": g.generation if g.group_type == "consumer" else None,
        "assignmentEpoch": g.assignment_epoch,
        "protocolType": g.protocol_type,
        "protocol": g.protocol,
        "leader": g.leader,
        "memberCount": len(g.members),
        "members": members,
        "membersTruncated": True if len(g.members) > MAX_MEMBERS else None,
        "partitions": {
            "assigned": len(owned),
            "total": total,
            "summary": f"{len(owned)}/{total}",
        },
        "offsets": offsets,
        "offsetsTruncated": True if len(seen.offsets) > MAX_OFFSETS else None,
        "coordinator": coordinator,
        "lag": sum(lags.values()) if lags else None,
    }
    status.update({key: old[key] for key in PRESERVED if key in old})
    event = None
    if g.generation >= 0:
        status["generation"] = g.generation
    old_generation = old.get("generation")
    rebalances = int(old.get("rebalances") or 0)
    last = old.get("lastRebalanceTime")
    if g.generation > 0 and g.generation != old_generation:
        rebalances += 1
        last = now
        event = f"generation {g.generation}, {len(g.members)} members, protocol {g.protocol or '-'}"
    status["rebalances"] = rebalances
    if last:
        status["lastRebalanceTime"] = last

    missing = [t for t in spec_topics if t not in seen.topics]
    if problem is not None:
        ready = ("False", *problem)
    elif missing:
        ready = ("False", "TopicNotFound", f"topics not on the coordinator: {', '.join(missing)}")
    elif g.state in REBALANCING_STATES:
        ready = ("False", "Rebalancing", f"the group is in {g.state}")
    elif not g.members:
        ready = ("False", "NoMembers", f"the group is {g.state or 'unknown'} with no members")
    elif len(owned) < total:
        ready = ("False", "PartitionsUnassigned", f"{total - len(owned)} of {total} unassigned")
    else:
        ready = (
            "True",
            GroupState.STABLE.value,
            f"{len(g.members)} members own all {total} partitions",
        )
    conditions = list(old.get("conditions") or [])
    conditions = set_condition(conditions, "Ready", *ready, generation=generation, now=now)
    rebalancing = g.state in REBALANCING_STATES
    conditions = set_condition(
        conditions,
        "Rebalancing",
        "True" if rebalancing else "False",
        g.state.replace(" ", "") if rebalancing else "NotRebalancing",
        f"state {g.state}",
        generation=generation,
        now=now,
    )
    status["conditions"] = conditions
    return _prune(status), event


def unreachable_status(
    old: dict[str, Any],
    message: str,
    *,
    generation: int | None,
    now: str,
    reason: str = "CoordinatorUnreachable",
) -> dict[str, Any]:
    """The old status with Ready=False and `reason` (CoordinatorUnreachable, or
    NotAuthorized / CoordinatorRejected when it answered no): the rest as last seen."""
    status = dict(old)
    status["observedGeneration"] = generation
    status["conditions"] = set_condition(
        list(old.get("conditions") or []),
        "Ready",
        "False",
        reason,
        message,
        generation=generation,
        now=now,
    )
    return _prune(status)


GROUP_ID_CONFLICT = "GroupIdConflict"
TOPIC_NAME_CONFLICT = "TopicNameConflict"


def conflict_status(
    old: dict[str, Any],
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: str,
    keep: tuple[str, ...] = PRESERVED,
) -> dict[str, Any]:
    """A resource whose Kafka name another (older) resource owns: Ready=False with
    `reason`, and nothing about the group or topic it names. What it showed before
    (members, assignment, offsets of a group that is not its own) is dropped; only its
    own records (`keep`) stay."""
    status: dict[str, Any] = {k: old[k] for k in keep if k in old}
    status["observedGeneration"] = generation
    status["conditions"] = set_condition(
        [c for c in old.get("conditions") or [] if c.get("type") == "Ready"],
        "Ready", "False", reason, message, generation=generation, now=now,
    )  # fmt: skip
    return _prune(status)


def in_conflict(old: dict[str, Any], reason: str) -> bool:
    """Whether the status already says `reason` (the Event was posted then)."""
    return any(c.get("type") == "Ready" and c.get("reason") == reason
               for c in old.get("conditions") or [])  # fmt: skip


def _prune(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v is not None and v != ""}


def changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing `new` would change anything the API server stores."""
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())
