"""Offset commits and fetches of consumer-protocol groups, fenced by member epoch.

Kafka 4's rules (`ConsumerGroup.validateOffsetCommit`/`validateOffsetFetch`):

* a commit with a negative epoch is an admin's, accepted only while the group has no
  members; otherwise the member must exist (UNKNOWN_MEMBER_ID) and commit with
  OffsetCommit v9 or later (UNSUPPORTED_VERSION);
* the member's own epoch is accepted; a newer one is STALE_MEMBER_EPOCH;
* an older one is accepted per partition (KIP-1251, Kafka 4.3+) if every partition
  committed is still the member's (assigned or being revoked) and was assigned to it at
  or before that epoch: `assignment epoch <= epoch <= member epoch`. kgroups takes 4.3's
  rule rather than 4.0-4.2's equality, under which a member whose epoch moved while its
  commit was in flight (any rebalance) sees the commit fail with STALE_MEMBER_EPOCH, for
  partitions nobody else can have committed to since: 4.3's rule is as safe and spares
  clients an error some of them cannot handle (franz-go's documentation says so);
* a fetch with a member id or epoch must come from a member, at its epoch exactly;
* a classic member inside the group (`consumer_classic`) commits as classic members do:
  its generation must be its member epoch (ILLEGAL_GENERATION), at any version.
"""

from __future__ import annotations

from kgroups.coordinator.core.consumer_group import ConsumerGroup
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.msg_offsets import FetchGroup, OffsetCommitRequest
from kgroups.protocol.errors import ErrorCode, GroupError

CONSUMER_COMMIT_FROM = 9
"""OffsetCommit versions consumer-protocol members must use."""


def _stale(epoch: int, member_epoch: int) -> GroupError:
    message = f"The member epoch {epoch} is stale; the member is at {member_epoch}."
    return GroupError(ErrorCode.stale_member_epoch, message)


def validate_commit(
    core: Core, ctx: RequestContext, req: OffsetCommitRequest, group: ConsumerGroup
) -> None:
    epoch = req.generation_id
    if epoch < 0 and not group.members:
        return
    member = group.members.get(req.member_id)
    if member is None:
        raise GroupError(ErrorCode.unknown_member_id)
    if member.classic is not None:
        # A classic member commits with its generation, which is its member epoch.
        if epoch != member.epoch:
            raise GroupError(ErrorCode.illegal_generation)
        return
    if ctx.api_version < CONSUMER_COMMIT_FROM:
        raise GroupError(ErrorCode.unsupported_version,
                         "OffsetCommit version 9 or above must be used by members using "
                         "the consumer group protocol")  # fmt: skip
    if epoch == member.epoch:
        return
    if epoch > member.epoch:
        raise _stale(epoch, member.epoch)
    held = member.current
    for topic in req.topics:
        name = topic.name
        if name is None and topic.topic_id is not None:
            name = core.topic_names_by_id.get(topic.topic_id)
        if name is None:
            continue  # answered UNKNOWN_TOPIC_ID on its own
        epochs = {**held.revoking.get(name, {}), **held.assigned.get(name, {})}
        for p in topic.partitions:
            assigned_at = epochs.get(p.partition)
            if assigned_at is None or assigned_at > epoch:
                raise _stale(epoch, member.epoch)


def validate_fetch(spec: FetchGroup, group: ConsumerGroup) -> None:
    if spec.member_id is None and spec.member_epoch < 0:
        return
    member = group.members.get(spec.member_id or "")
    if member is None:
        raise GroupError(ErrorCode.unknown_member_id)
    if spec.member_epoch != member.epoch:
        raise _stale(spec.member_epoch, member.epoch)
