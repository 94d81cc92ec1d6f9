"""The custom resources' shapes, as pydantic models: the single source of the CRDs.

`crdgen` turns these into the CRD manifests under `crds/` (and the chart), so a field's
type, bounds, default, description and CEL rules are written once, here. The operator reads
specs through the same models, so what the API server accepts is what the operator expects.
Field names are the API's (camelCase); Python attribute names follow them to keep one
vocabulary from `kubectl explain` to the code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

API_GROUP = "kgroups.io"
API_VERSION = "v1alpha1"
KAFKA_NAME = r"^[a-zA-Z0-9._-]{1,249}$"
"""Kafka's legal topic and group-id characters (`Topic.java`); 249 is its length limit."""


def cel(rule: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    """One `x-kubernetes-validations` entry (a CEL rule the API server enforces)."""
    return {"rule": rule, "message": message, "reason": reason}


def _rules(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """A metav1.Condition: one aspect of the resource's observed state."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Condition type in CamelCase, e.g. Ready or Rebalancing.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    observedGeneration: int | None = Field(
        default=None, ge=0, description="The metadata.generation this condition was set for."
    )
    lastTransitionTime: str = Field(
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339).",
    )
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="One CamelCase word saying why the condition has its status.",
    )
    message: str = Field(max_length=32768, description="Details for people.")


CONDITIONS: Any = Field(
    default_factory=list,
    description="Observed conditions; Ready summarises the resource.",
    json_schema_extra={
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    },
)


# --- Topic -----------------------------------------------------------------------------------


class TopicSpec(_Model):
    """The desired topic on the coordinator."""

    topicName: str | None = Field(
        default=None,
        pattern=KAFKA_NAME,
        description="The Kafka topic name; defaults to metadata.name. Immutable.",
    )
    partitions: int = Field(
        ge=1,
        le=1_000_000,
        description="Number of partitions. May grow (members rebalance onto the new "
        "partitions) but never shrink: Kafka cannot remove partitions.",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            cel(
                "self.partitions >= oldSelf.partitions",
                "partitions may only grow: Kafka cannot remove partitions",
            ),
            cel(
                "has(self.topicName) == has(oldSelf.topicName) && "
                "(!has(self.topicName) || self.topicName == oldSelf.topicName)",
                "topicName is immutable",
                "FieldValueForbidden",
            ),
        )
    )


class TopicStatus(_Model):
    """What the operator last saw of the topic on the coordinator."""

    observedGeneration: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status reflects."
    )
    topicName: str | None = Field(default=None, description="The Kafka topic name in use.")
    partitions: int | None = Field(
        default=None, ge=0, description="Partitions the coordinator reports for the topic."
    )
    conditions: list[Condition] = CONDITIONS


class Topic(_Model):
    """A Kafka topic, registered with the kgroups coordinator."""

    spec: TopicSpec
    status: TopicStatus | None = None


# --- ConsumerGroup ---------------------------------------------------------------------------


class DeletionPolicy(StrEnum):
    """What deleting a ConsumerGroup does to its group on the coordinator. Retain by
    default, as Kubernetes keeps data (a PersistentVolume's reclaim policy): a GitOps
    prune or a namespace deletion must not destroy a group's progress. Delete is asked
    for explicitly."""

    RETAIN = "Retain"
    DELETE = "Delete"


INT_MAX = 2**31 - 1
"""Kafka's INT configs are 32 bits: a larger value is refused at `kubectl apply`."""


class GroupSettings(_Model):
    """Per-group overrides of the coordinator's group settings (Kafka's broker configs).

    Unset fields use the coordinator's defaults."""

    minSessionTimeoutMs: int | None = Field(
        default=None,
        ge=1,
        le=INT_MAX,
        description="Members asking for a shorter session timeout are refused "
        "(INVALID_SESSION_TIMEOUT); Kafka's group.min.session.timeout.ms.",
    )
    maxSessionTimeoutMs: int | None = Field(
        default=None,
        ge=1,
        le=INT_MAX,
        description="Members asking for a longer session timeout are refused; "
        "Kafka's group.max.session.timeout.ms.",
    )
    initialRebalanceDelayMs: int | None = Field(
        default=None,
        ge=0,
        le=INT_MAX,
        description="How long the first rebalance of an empty group waits for more "
        "members; Kafka's group.initial.rebalance.delay.ms.",
    )
    maxSize: int | None = Field(
        default=None,
        ge=1,
        le=INT_MAX,
        description="Most members the group admits (GROUP_MAX_SIZE_REACHED beyond); "
        "Kafka's group.max.size.",
    )
    offsetsRetentionMinutes: int | None = Field(
        default=None,
        ge=1,
        le=INT_MAX,
        description="How long committed offsets outlive an empty group; Kafka's "
        "offsets.retention.minutes.",
    )
    consumerSessionTimeoutMs: int | None = Field(
        default=None,
        ge=1,
        le=INT_MAX,
        description="How long a member of Kafka 4's consumer protocol (group.protocol="
        "consumer) lives without a heartbeat; Kafka's group config "
        "consumer.session.timeout.ms.",
    )
    consumerHeartbeatIntervalMs: int | None = Field(
        default=None,
        ge=1,
        le=INT_MAX,
        description="How often consumer-protocol members heartbeat (the coordinator tells "
        "them; below the session timeout); Kafka's consumer.heartbeat.interval.ms.",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            cel(
                "!has(self.minSessionTimeoutMs) || !has(self.maxSessionTimeoutMs) || "
                "self.minSessionTimeoutMs <= self.maxSessionTimeoutMs",
                "minSessionTimeoutMs must not exceed maxSessionTimeoutMs",
            )
        )
    )


class ConsumerGroupSpec(_Model):
    """The group the operator registers with the coordinator and mirrors into status."""

    groupId: str | None = Field(
        default=None,
        pattern=KAFKA_NAME,
        description="The Kafka group id members join with; defaults to metadata.name. Immutable.",
    )
    topics: list[str] = Field(
        default_factory=list,
        max_length=10_000,
        json_schema_extra={"items": {"type": "string", "pattern": KAFKA_NAME}},
        description="Topics the group is expected to consume: their partitions are the "
        "total that status.partitions counts against, and each must exist.",
    )
    settings: GroupSettings = Field(
        default_factory=GroupSettings,
        description="Coordinator settings enforced for this group only.",
    )
    deletionPolicy: DeletionPolicy = Field(
        default=DeletionPolicy.RETAIN,
        description="Retain (the default): deleting this resource leaves the group and its "
        "committed offsets on the coordinator (a new ConsumerGroup with the same group id "
        "takes them up). Delete: wait until the group is Empty, then delete it and its "
        "committed offsets.",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            cel(
                "has(self.groupId) == has(oldSelf.groupId) && "
                "(!has(self.groupId) || self.groupId == oldSelf.groupId)",
                "groupId is immutable",
                "FieldValueForbidden",
            )
        )
    )


class TopicPartitions(_Model):
    """Partitions of one topic."""

    topic: str = Field(description="Topic name.")
    partitions: list[int] = Field(description="Partition numbers, ascending.")


class Member(_Model):
    """One member of the current generation, as DescribeGroups reports it."""

    memberId: str = Field(description="The member id the coordinator assigned.")
    instanceId: str | None = Field(
        default=None, description="group.instance.id of a static member."
    )
    clientId: str = Field(description="The client.id the member connected with.")
    host: str = Field(description="The address the member connected from.")
    assignment: list[TopicPartitions] = Field(
        default_factory=list, description="Partitions assigned to the member."
    )
    memberEpoch: int | None = Field(
        default=None,
        description="Kafka 4's consumer protocol (KIP-848): the member's epoch; it reaches "
        "the group's assignmentEpoch once the member holds exactly its target.",
    )
    targetAssignment: list[TopicPartitions] | None = Field(
        default=None,
        description="Kafka 4's consumer protocol: the partitions the coordinator means the "
        "member to hold (assignment moves toward it, revoking first).",
    )
    protocol: Literal["consumer", "classic"] | None = Field(
        default=None,
        description="In a group of Kafka 4's consumer protocol: the protocol the member "
        "speaks (classic: an instance not yet rolled to group.protocol=consumer).",
    )


class CommittedOffset(_Model):
    """The group's committed offset for one partition."""

    topic: str = Field(description="Topic name.")
    partition: int = Field(ge=0, description="Partition number.")
    offset: int = Field(description="The committed offset (the next record to read).")
    logEndOffset: int | None = Field(
        default=None,
        ge=0,
        description="Where the partition's log ends, as far as the coordinator knows "
        "(ListOffsets latest).",
    )
    lag: int | None = Field(
        default=None, description="logEndOffset minus offset: records not yet consumed."
    )


class OffsetRequestAction(StrEnum):
    RESET = "reset"
    DELETE_OFFSETS = "delete-offsets"


class OffsetRequestResult(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    REFUSED = "Refused"
    FAILED = "Failed"
    DRY_RUN = "DryRun"


class PlannedOffset(_Model):
    """One partition of an offset request: its offset before and after."""

    topic: str = Field(description="Topic name.")
    partition: int | None = Field(
        default=None, ge=0, description="Partition number (absent: the whole topic failed)."
    )
    previousOffset: int | None = Field(
        default=None, description="The committed offset before the request (absent: none)."
    )
    newOffset: int | None = Field(
        default=None,
        description="The offset committed (reset) or planned (dry run); absent for delete-offsets.",
    )
    error: str | None = Field(
        default=None, description="Why this partition was not changed (Kafka's error)."
    )


class OffsetRequestRecord(_Model):
    """An offset request made through the kgroups.io/offset-request annotation (by
    `kubectl kgroups reset-offsets` or `delete-offsets`) and what became of it."""

    id: str = Field(max_length=128, description="The request's id (a UUID).")
    action: str | None = Field(
        default=None, description="reset or delete-offsets (absent if unreadable)."
    )
    scenario: str | None = Field(
        default=None,
        description="The reset scenario, by kafka-consumer-groups' option name: "
        "to-earliest, to-latest, to-current, to-offset, shift-by, to-datetime, by-duration.",
    )
    argument: str | None = Field(
        default=None,
        description="The scenario's argument as given (an offset, a shift, a date-time, "
        "a duration).",
    )
    topics: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="The --topic arguments (TOPIC or TOPIC:P,P,...); at most 50.",
    )
    allTopics: bool | None = Field(
        default=None, description="--all-topics: every partition the group has committed."
    )
    dryRun: bool | None = Field(default=None, description="Planned only, nothing written.")
    requestedBy: str = Field(
        description="Who asked, as the requesting client said (kubectl auth whoami); "
        "the API server's audit log holds who wrote the annotation."
    )
    requestedAt: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When it was asked (RFC 3339).",
    )
    completedAt: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the operator finished it (absent while Running).",
    )
    result: OffsetRequestResult = Field(
        description="Running, Succeeded, Refused (the group has members), Failed or "
        "DryRun (planned, nothing written)."
    )
    message: str = Field(
        default="", max_length=4096, description="What happened, in Kafka's words."
    )
    warnings: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="Kafka's warnings while planning (offsets clamped into the log's range); "
        "at most 50.",
    )
    partitions: int | None = Field(
        default=None, ge=0, description="Partitions in the plan (plan lists at most 500)."
    )
    plan: list[PlannedOffset] = Field(
        default_factory=list,
        max_length=500,
        description="Per partition: the committed offset before, and the new one; at most "
        "500 (partitions counts them all).",
    )


class PartitionCount(_Model):
    """How many partitions of spec.topics have an owner."""

    assigned: int = Field(ge=0, description="Partitions of spec.topics assigned to a member.")
    total: int = Field(ge=0, description="Partitions of spec.topics on the coordinator.")
    summary: str = Field(description="assigned/total, for the ASSIGNED column.")


class ConsumerGroupStatus(_Model):
    """The live group, mirrored from the coordinator."""

    observedGeneration: int | None = Field(
        default=None, ge=0, description="The metadata.generation this status reflects."
    )
    groupId: str | None = Field(default=None, description="The Kafka group id in use.")
    state: str | None = Field(
        default=None,
        description="Group state: Empty, PreparingRebalance, CompletingRebalance, Stable or "
        "Dead; a consumer-protocol group: Empty, Assigning, Reconciling or Stable.",
    )
    generation: int | None = Field(
        default=None, description="The group's generation id (one per completed rebalance)."
    )
    groupType: str | None = Field(
        default=None,
        description='"classic" (JoinGroup/SyncGroup members) or "consumer" (Kafka 4\'s '
        "consumer protocol, KIP-848: group.protocol=consumer).",
    )
    groupEpoch: int | None = Field(
        default=None,
        description="A consumer-protocol group's epoch (moves when a member joins, leaves or "
        "changes its subscription, or a subscribed topic changes).",
    )
    assignmentEpoch: int | None = Field(
        default=None, description="The epoch of a consumer-protocol group's target assignment."
    )
    protocolType: str | None = Field(default=None, description='Usually "consumer".')
    protocol: str | None = Field(
        default=None, description="The assignor the group chose, e.g. range or cooperative-sticky."
    )
    leader: str | None = Field(default=None, description="The leader's member id.")
    memberCount: int | None = Field(default=None, ge=0, description="Members in the group.")
    members: list[Member] = Field(
        default_factory=list,
        description="Members and their partitions, by member id; at most the first 200 "
        "(memberCount counts them all; membersTruncated says when some are left out).",
    )
    membersTruncated: bool | None = Field(
        default=None, description="True when members lists only part of the group."
    )
    partitions: PartitionCount | None = Field(
        default=None, description="Assigned against total partitions of spec.topics."
    )
    offsets: list[CommittedOffset] = Field(
        default_factory=list,
        description="Committed offsets per partition, by topic and partition; at most the "
        "first 2000 (offsetsTruncated says when some are left out).",
    )
    offsetsTruncated: bool | None = Field(
        default=None, description="True when offsets lists only part of the committed offsets."
    )
    lastRebalanceTime: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the operator first saw the current generation.",
    )
    rebalances: int | None = Field(
        default=None, ge=0, description="Rebalances the operator has observed."
    )
    coordinator: str | None = Field(
        default=None, description="HOST:PORT of the coordinator the operator reads the group at."
    )
    lag: int | None = Field(
        default=None,
        description="Total lag over the committed partitions whose log end is known.",
    )
    offsetRequests: list[OffsetRequestRecord] = Field(
        default_factory=list,
        max_length=10,
        description="The last 10 offset requests (resets, offset deletions) and their "
        "outcomes, oldest first.",
    )
    conditions: list[Condition] = CONDITIONS


class ConsumerGroup(_Model):
    """A Kafka-style consumer group whose live state the operator mirrors."""

    spec: ConsumerGroupSpec
    status: ConsumerGroupStatus | None = None
