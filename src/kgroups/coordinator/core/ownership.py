"""Groups per principal: who created each group, and how many each principal has.

Members per group are bounded (group.max.size), but nothing in Kafka bounds how many
groups one client may create: every JoinGroup or simple-group OffsetCommit with a new
group id costs memory and a stored record for as long as the group's offsets are kept. So
each group remembers the principal that created it (persisted in its group record), and a
principal at `max_groups_per_principal` may not create another (POLICY_VIOLATION) until
one of its groups is deleted or expires. ANONYMOUS (a listener without authentication) is
not counted: it is every client of that listener at once, and limiting it would let one
of them use up everyone's share.

Every place that adds or removes a group goes through `put` and `drop`, so the counts are
always those of `core.groups`, after replay too.
"""

from __future__ import annotations

from kgroups.coordinator.core.consumer_group import ConsumerGroup
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.model import Group

UNCOUNTED = frozenset({"", "User:ANONYMOUS"})


def owner_of(principal: str) -> str | None:
    """The owner recorded for a group `principal` creates (None: not counted)."""
    return None if principal in UNCOUNTED else principal


def may_create(core: Core, principal: str) -> bool:
    limit = core.config.max_groups_per_principal
    owner = owner_of(principal)
    return not limit or owner is None or core.owned[owner] < limit


def put(core: Core, group: Group) -> None:
    """Add (or replace) `group` in the coordinator's groups, counting its owner."""
    drop(core, group.group_id)
    drop_consumer(core, group.group_id)
    core.groups[group.group_id] = group
    _count(core, group.owner, 1)


def put_consumer(core: Core, group: ConsumerGroup) -> None:
    """The same for a consumer-protocol group."""
    drop(core, group.group_id)
    drop_consumer(core, group.group_id)
    core.consumer_groups[group.group_id] = group
    _count(core, group.owner, 1)


def drop(core: Core, group_id: str) -> Group | None:
    """Remove the classic group, if any, and stop counting it."""
    group = core.groups.pop(group_id, None)
    if group is not None:
        _count(core, group.owner, -1)
    return group


def drop_consumer(core: Core, group_id: str) -> ConsumerGroup | None:
    """Remove the consumer-protocol group, if any, and stop counting it."""
    group = core.consumer_groups.pop(group_id, None)
    if group is not None:
        _count(core, group.owner, -1)
    return group


def _count(core: Core, owner: str | None, delta: int) -> None:
    if owner is None:
        return
    core.owned[owner] += delta
    if core.owned[owner] <= 0:
        del core.owned[owner]
