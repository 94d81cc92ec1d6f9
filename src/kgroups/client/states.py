"""The member's states and the one table of legal transitions between them.

Like the coordinator's `GroupState` (and Kafka's `MemberState` in `AbstractCoordinator`),
a member is always in exactly one of these states, and every change goes through
`check_transition`, which refuses a move the table does not list. A bug that would move
the member somewhere undefined raises instead, and the member's task guard turns that
into FAILED with the partitions reported lost, never into a silent "stable".

    UNJOINED   holds no generation: before the first join, after a reset or a loss
    PREPARING  about to join: revocation (eager) or loss callbacks run, heartbeats go on
    JOINING    JoinGroup sent; heartbeats go on (on their own connection) while it parks
    SYNCING    the join answered; the leader assigns, SyncGroup sent
    STABLE     holds its generation's assignment; heartbeats, commits
    FAILED     a fatal error; the application gets it from every call
    CLOSED     closed by the application

A generation that is lost (no proof of membership for a session, ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, a revocation past the rebalance timeout) moves the member to UNJOINED
from wherever it was; the next join reports what it held as lost.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class MemberState(enum.StrEnum):
    UNJOINED = "unjoined"
    PREPARING = "preparing"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    FAILED = "failed"
    CLOSED = "closed"


S = MemberState

LEGAL_PREVIOUS: Mapping[MemberState, frozenset[MemberState]] = {
    S.UNJOINED: frozenset({S.PREPARING, S.JOINING, S.SYNCING, S.STABLE}),
    # A join attempt that failed while the member kept its generation prepares again.
    S.PREPARING: frozenset({S.UNJOINED, S.STABLE, S.JOINING, S.SYNCING}),
    S.JOINING: frozenset({S.PREPARING}),
    S.SYNCING: frozenset({S.JOINING}),
    S.STABLE: frozenset({S.SYNCING}),
    S.FAILED: frozenset({S.UNJOINED, S.PREPARING, S.JOINING, S.SYNCING, S.STABLE}),
    S.CLOSED: frozenset(S),
}
"""For each state, the states it may be entered from (Kafka's ClassicGroupState style)."""

HEARTBEATING = frozenset({S.PREPARING, S.JOINING, S.SYNCING, S.STABLE})
"""States in which a member that holds a generation sends heartbeats."""


class IllegalTransition(RuntimeError):
    """A bug: the member tried a state change the table does not allow."""


def check_transition(current: MemberState, target: MemberState) -> None:
    if current not in LEGAL_PREVIOUS[target]:
        raise IllegalTransition(f"member cannot go from {current} to {target}")
