"""What a store writes of a consumer group's members: only the rows that changed.

Both stores can keep a consumer-protocol group's members as rows of their own beside the
group's head (`codec.encode_consumer_head`), so that a heartbeat that changes one member
of a thousand writes that member, not the group's 300 KB. A store remembers what it
wrote of each group (`WrittenMembers`) and `member_writes` turns the group's next
snapshot into deletes and upserts against it; a store that has not written the group
yet (just opened, or a replica that has just loaded its shard, which another replica
may have written meanwhile) writes every row again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kgroups.coordinator.core.records import ConsumerMemberValue
from kgroups.coordinator.store.codec import member_json


class WrittenMembers:
    """A consumer group's members as written: each one's value (compared by identity: the
    core makes a member's value again only when it changed) and `seq`, in the group's
    order."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, tuple[ConsumerMemberValue, int]]) -> None:
        self.values = values

    def followed_by(self, members: Sequence[ConsumerMemberValue]) -> WrittenMembers | None:
        """The members written next as `members`: the ones kept keep their `seq`, new
        ones go after the last; None when `members` is not in that order (the rows would
        load in another), so that all are written again."""
        values = self.values
        kept = {m.member_id for m in members if m.member_id in values}
        order = [member_id for member_id in values if member_id in kept]
        if [m.member_id for m in members[: len(order)]] != order:
            return None
        seq = next(reversed(values.values()))[1] + 1 if values else 0  # in seq order
        out: dict[str, tuple[ConsumerMemberValue, int]] = {}
        for i, m in enumerate(members):
            if i < len(order):
                out[m.member_id] = (m, values[m.member_id][1])
            else:
                if m.member_id in values:
                    return None  # a kept member after a new one
                out[m.member_id] = (m, seq)
                seq += 1
        return WrittenMembers(out)


@dataclass(frozen=True, slots=True)
class MemberWrites:
    """The rows to write for one snapshot of a consumer group."""

    after: WrittenMembers
    """What the rows hold once written (the store remembers it after COMMIT)."""
    rewrite: bool
    """Every row of the group is deleted first (`upserts` are then all its members)."""
    gone: list[str]
    """The member ids whose rows are deleted."""
    upserts: list[tuple[str, int, str]]
    """(member id, seq, document) of the rows written."""


def member_writes(
    before: WrittenMembers | None, members: Sequence[ConsumerMemberValue]
) -> MemberWrites:
    """The rows that turn `before` (None: not known) into `members`."""
    after = None if before is None else before.followed_by(members)
    if before is None or after is None:
        whole = WrittenMembers({m.member_id: (m, seq) for seq, m in enumerate(members)})
        rows = [(m.member_id, seq, member_json(m)) for m, seq in whole.values.values()]
        return MemberWrites(whole, True, [], rows)
    was = before.values
    gone = [member_id for member_id in was if member_id not in after.values]
    upserts = [
        (m.member_id, seq, member_json(m))
        for m, seq in after.values.values()
        if was.get(m.member_id, (None, 0))[0] is not m
    ]
    return MemberWrites(after, False, gone, upserts)
