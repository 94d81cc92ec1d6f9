"""What a member tells its application when something goes wrong, and the plain types.

The errors follow the Java consumer's, because that is what Kafka users know:
`CommitFailedError` (the group moved on: your generation is stale, the partitions may
already belong to someone else, do not retry), `RebalanceInProgressError` (commit again
once the rebalance completes, if you still own the partition), and `FencedInstanceError`
(another process took this static member's instance id: fatal). `ListenerError` is ours:
a rebalance listener raised, which is fatal too.
"""

from __future__ import annotations

from typing import NamedTuple

from kgroups.protocol.errors import ErrorCode


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""


class MemberError(RuntimeError):
    """A group member cannot go on as asked; `code` is the Kafka error, if any."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class CommitFailedError(MemberError):
    """The commit was rejected because this member's generation is stale or it is no
    longer a member: the group rebalanced without it. Retrying cannot succeed."""


class RebalanceInProgressError(MemberError):
    """A rebalance is under way; commit again after it completes (if you still own the
    partitions then)."""


class FencedInstanceError(MemberError):
    """Another member joined with this member's group.instance.id and fenced it."""


class ListenerError(MemberError):
    """The application's rebalance listener raised. The member cannot know whether work
    on those partitions stopped, so it does not carry on as if it had: it fails, reports
    what it held as lost, and raises this (with the listener's exception as the cause)."""


class CommitError(MemberError):
    """A commit failed for a reason other than the group moving on (e.g. metadata too
    large, unknown topic); `errors` maps each failed partition to its error code."""

    def __init__(self, message: str, errors: dict[TopicPartition, ErrorCode]) -> None:
        super().__init__(message, next(iter(errors.values()), None))
        self.errors = errors
