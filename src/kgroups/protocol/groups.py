"""The group protocol's vocabulary, defined once for every layer.

The coordinator, the admin client, the member library, the CLI and the operator all speak
about the same things: the states a group is in (their names are on the wire, in
DescribeGroups and ListGroups), the "no generation" a member has before it joins, the
config resource type under which a group's settings live (AlterConfigs/DescribeConfigs,
KIP-848), the names of those settings, and Kafka's defaults for a member and for the
coordinator. A value written in two places drifts; here it is written once, and the
Helm chart's defaults are checked against it by tests/unit/test_vocabulary.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

NO_GENERATION = -1
"""The generation of a member that has none (before its first join, after a reset)."""

GROUP_RESOURCE_TYPE = 32
"""ConfigResource type GROUP: the resource AlterConfigs/DescribeConfigs name a group by."""

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    """A classic group's state; the value is the name Kafka puts on the wire."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def lower(self) -> str:
        """The lower-case name ListGroups' state filter is matched against."""
        return self.value.lower()


REBALANCING = frozenset({GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE})


class GroupConfig(enum.StrEnum):
    """The settings a group may override (Kafka's dynamic group configs)."""

    MIN_SESSION_TIMEOUT_MS = "group.min.session.timeout.ms"
    MAX_SESSION_TIMEOUT_MS = "group.max.session.timeout.ms"
    INITIAL_REBALANCE_DELAY_MS = "group.initial.rebalance.delay.ms"
    MAX_SIZE = "group.max.size"
    OFFSETS_RETENTION_MINUTES = "offsets.retention.minutes"
    CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
    """Kafka 4's group config for consumer-protocol groups (KIP-848)."""
    CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True, slots=True)
class CoordinatorDefaults:
    """Kafka's broker defaults for the classic group coordinator (and kgroups' own limit
    on groups per principal, which Kafka does not have)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1
    offsets_retention_minutes: int = 10_080
    max_record_bytes: int = 1_048_588
    """message.max.bytes: the bound a group's record in __consumer_offsets meets."""
    max_groups_per_principal: int = 1000
    consumer_session_timeout_ms: int = 45_000
    """group.consumer.session.timeout.ms (consumer-protocol members)."""
    consumer_heartbeat_interval_ms: int = 5_000
    """group.consumer.heartbeat.interval.ms: told to consumer-protocol members."""
    consumer_waiting_heartbeat_interval_ms: int = 20
    """kgroups' own: told to a consumer-protocol member waiting for partitions (at
    least: 2 ms more per member waiting)."""


@dataclass(frozen=True, slots=True)
class MemberDefaults:
    """Kafka's consumer defaults for the group client."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000


COORDINATOR = CoordinatorDefaults()
MEMBER = MemberDefaults()
