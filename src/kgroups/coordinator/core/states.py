"""The classic group states and the one table of legal transitions.

The states, their names on the wire and the legal previous states are Kafka's
(`ClassicGroupState.java`). Every state change goes through `check_transition`, so an
illegal edge is a loud bug in the coordinator, never a silently wedged group.

Per state (what the coordinator does there):

Empty
    No members; the group lingers for its committed offsets. JoinGroup from a new member
    starts the initial (delayed) rebalance; SyncGroup, Heartbeat and member commits get
    UNKNOWN_MEMBER_ID; simple (generation -1) commits are accepted.
PreparingRebalance
    Waiting for every expected member to (re)join. JoinGroup requests are parked; Heartbeat
    and SyncGroup get REBALANCE_IN_PROGRESS; commits of the previous generation are allowed.
CompletingRebalance
    The join phase is over and the generation is bumped; waiting for the leader's
    SyncGroup with the assignment. Follower SyncGroups are parked; commits get
    REBALANCE_IN_PROGRESS.
Stable
    Assignment delivered; heartbeats keep members alive; commits of this generation are
    accepted.
Dead
    The group is being removed (DeleteGroups, expiry). Nothing is served for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgroups.protocol.groups import GroupState

__all__ = ["CAN_REBALANCE", "VALID_PREVIOUS", "GroupState"]


VALID_PREVIOUS: Mapping[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}
"""For each state, the states a group may be in just before entering it."""

CAN_REBALANCE = VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]
"""States from which a membership change starts a new rebalance."""


class IllegalTransition(RuntimeError):
    """A bug: the coordinator tried to move a group along an edge Kafka does not allow."""


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise `IllegalTransition` unless `current -> target` is in the table."""
    if current not in VALID_PREVIOUS[target]:
        allowed = sorted(s.value for s in VALID_PREVIOUS[target])
        raise IllegalTransition(
            f"group {group_id!r} must be in one of {allowed} before moving to "
            f"{target.value}, but it is {current.value}"
        )
