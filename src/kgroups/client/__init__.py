"""The member side of kgroups: joining groups, assignors, the sidecar.

`GroupMember` (asyncio) and `SyncGroupMember` (threads) join a consumer group on the
kgroups coordinator or any Kafka broker; `ConsumerProtocolMember` (asyncio) joins one with
Kafka 4's consumer protocol (KIP-848: the coordinator assigns); `assignors` holds the
partition assignors.
Members report Kafka's consumer-coordinator metrics to a prometheus_client registry
(`metrics`; pass `registry=`, default prometheus_client's).
"""

from kgroups.client.consumer_member import ConsumerProtocolMember
from kgroups.client.errors import (
    CommitError,
    CommitFailedError,
    FencedInstanceError,
    ListenerError,
    MemberError,
    OffsetAndMetadata,
    RebalanceInProgressError,
    TopicPartition,
)
from kgroups.client.link import CoordinatorUnavailable
from kgroups.client.listener import RebalanceListener
from kgroups.client.member import GroupMember, MemberState
from kgroups.client.sync import SyncGroupMember

__all__ = [
    "CommitError",
    "CommitFailedError",
    "ConsumerProtocolMember",
    "CoordinatorUnavailable",
    "FencedInstanceError",
    "GroupMember",
    "ListenerError",
    "MemberError",
    "MemberState",
    "OffsetAndMetadata",
    "RebalanceInProgressError",
    "RebalanceListener",
    "SyncGroupMember",
    "TopicPartition",
]
