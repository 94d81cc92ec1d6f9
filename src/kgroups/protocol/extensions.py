"""kgroups' additions to Kafka messages, carried in tagged fields that Kafka clients skip.

Two additions. OffsetCommit v8-v9 partitions may carry `log_end_offset`: a kgroups source
that reads the real log (the file log, a Kafka topic) says where that log ends, so the
coordinator can answer ListOffsets with a true end and Kafka's tools show true lag
(`coordinator/core/log_ends.py`); a Kafka broker skips the tag.

And DescribeGroups tells an admin everything about a classic group except its generation
and its leader; the operator needs both for a ConsumerGroup's status. Flexible versions
(v5, v6) of the response let a server add tagged fields, and the protocol requires clients
to ignore tags they do not know (KIP-482; Java keeps them as unknown tagged fields,
kafka-python skips them). kgroups adds two per group, at tags far above any Kafka uses,
so a future Kafka field cannot collide with them.
"""

# No `from __future__ import annotations` here: kio reads the field types at runtime.
from dataclasses import dataclass, field

from kio.schema.describe_groups.v5 import response as dg5
from kio.schema.describe_groups.v6 import response as dg6
from kio.schema.offset_commit.v8 import request as oc8
from kio.schema.offset_commit.v9 import request as oc9
from kio.static.primitive import i32, i64

GENERATION_TAG = 10_001
LEADER_TAG = 10_002
LOG_END_TAG = 10_003


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitPartitionV8(oc8.OffsetCommitRequestPartition):
    log_end_offset: i64 = field(
        metadata={"kafka_type": "int64", "tag": LOG_END_TAG}, default=i64(-1)
    )
    """Where the committer's source log ends (kgroups extension); -1 when it does not say."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitTopicV8(oc8.OffsetCommitRequestTopic):
    partitions: tuple[OffsetCommitPartitionV8, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV8(oc8.OffsetCommitRequest):
    topics: tuple[OffsetCommitTopicV8, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitPartitionV9(oc9.OffsetCommitRequestPartition):
    log_end_offset: i64 = field(
        metadata={"kafka_type": "int64", "tag": LOG_END_TAG}, default=i64(-1)
    )
    """Where the committer's source log ends (kgroups extension); -1 when it does not say."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitTopicV9(oc9.OffsetCommitRequestTopic):
    partitions: tuple[OffsetCommitPartitionV9, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV9(oc9.OffsetCommitRequest):
    topics: tuple[OffsetCommitTopicV9, ...]


REQUESTS: dict[tuple[int, int], type] = {
    (8, 8): OffsetCommitRequestV8,
    (8, 9): OffsetCommitRequestV9,
}
"""(api key, version) -> the extended request class kgroups writes and the server reads."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroupV5(dg5.DescribedGroup):
    generation_id: i32 = field(
        metadata={"kafka_type": "int32", "tag": GENERATION_TAG}, default=i32(-1)
    )
    """The group's generation (kgroups extension); -1 when unknown."""
    leader_id: str = field(metadata={"kafka_type": "string", "tag": LEADER_TAG}, default="")
    """The leader's member id (kgroups extension); empty when none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsResponseV5(dg5.DescribeGroupsResponse):
    groups: tuple[DescribedGroupV5, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroupV6(dg6.DescribedGroup):
    generation_id: i32 = field(
        metadata={"kafka_type": "int32", "tag": GENERATION_TAG}, default=i32(-1)
    )
    """The group's generation (kgroups extension); -1 when unknown."""
    leader_id: str = field(metadata={"kafka_type": "string", "tag": LEADER_TAG}, default="")
    """The leader's member id (kgroups extension); empty when none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsResponseV6(dg6.DescribeGroupsResponse):
    groups: tuple[DescribedGroupV6, ...]


RESPONSES: dict[tuple[int, int], type] = {
    (15, 5): DescribeGroupsResponseV5,
    (15, 6): DescribeGroupsResponseV6,
}
"""(api key, version) -> the extended response class the server writes and kgroups reads."""
