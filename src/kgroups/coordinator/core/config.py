"""Coordinator settings: Kafka's broker configs for the classic group coordinator.

Names follow the Kafka config with dots turned into underscores; defaults are Kafka's
(`GroupCoordinatorConfig.java`), except where a field says otherwise.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kgroups.protocol.groups import COORDINATOR

MINUTE_MS = 60_000
INT_FIELDS = (
    "group_min_session_timeout_ms",
    "group_max_session_timeout_ms",
    "group_initial_rebalance_delay_ms",
    "group_max_size",
    "offsets_retention_minutes",
    "offset_metadata_max_bytes",
    "max_group_record_bytes",
    "group_consumer_session_timeout_ms",
    "group_consumer_heartbeat_interval_ms",
    "group_consumer_waiting_heartbeat_interval_ms",
)
"""The settings that are Kafka INT configs: 32 bits."""


class MigrationPolicy(enum.StrEnum):
    """Kafka's `group.consumer.migration.policy`: may a group with members move between
    the classic and the consumer protocol (an empty group always may)?"""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = COORDINATOR.min_session_timeout_ms
    """JoinGroup with a smaller session timeout gets INVALID_SESSION_TIMEOUT."""
    group_max_session_timeout_ms: int = COORDINATOR.max_session_timeout_ms
    """JoinGroup with a larger session timeout gets INVALID_SESSION_TIMEOUT."""
    group_initial_rebalance_delay_ms: int = COORDINATOR.initial_rebalance_delay_ms
    """How long the first rebalance of an empty group waits for more members (KIP-134)."""
    group_max_size: int = COORDINATOR.max_size
    """Members beyond this get GROUP_MAX_SIZE_REACHED."""
    group_new_member_join_timeout_ms: int = 300_000
    """How long a new member may sit in a join phase (KAFKA-9752); fixed in Kafka."""
    offsets_retention_minutes: int = COORDINATOR.offsets_retention_minutes
    """How long offsets outlive an empty group (or a simple group's last commit)."""
    offsets_retention_check_interval_ms: int = 600_000
    """How often expired offsets and groups are swept."""
    offset_metadata_max_bytes: int = 4_096
    """Longer commit metadata gets OFFSET_METADATA_TOO_LARGE for that partition."""
    num_partitions: int = 1
    """Partitions of a topic created without a count (CreateTopics with -1)."""
    auto_create_topics_enable: bool = False
    """Create unknown topics on Metadata requests that allow it. Off by default, unlike
    Kafka: topics are meant to be declared (Topic resources, `kgroups topic create`)."""
    max_groups_per_principal: int = COORDINATOR.max_groups_per_principal
    """Groups one authenticated principal may create; more get POLICY_VIOLATION (kgroups'
    own limit, see `ownership.py`; Kafka has none). 0: no limit."""
    max_group_record_bytes: int = COORDINATOR.max_record_bytes
    """The largest group record (its members' ids, protocol metadata and assignments):
    Kafka's message.max.bytes, the bound a group's record in __consumer_offsets meets. A
    JoinGroup that would pass it gets UNKNOWN_SERVER_ERROR, and so does a leader's
    SyncGroup whose assignment would (Kafka's answer when the record is too large)."""
    group_consumer_session_timeout_ms: int = COORDINATOR.consumer_session_timeout_ms
    """How long a consumer-protocol member (KIP-848) lives without a heartbeat."""
    group_consumer_heartbeat_interval_ms: int = COORDINATOR.consumer_heartbeat_interval_ms
    """How often consumer-protocol members are told to heartbeat."""
    group_consumer_waiting_heartbeat_interval_ms: int = (
        COORDINATOR.consumer_waiting_heartbeat_interval_ms
    )
    """The heartbeat interval told to a consumer-protocol member waiting for partitions
    that others are releasing (kgroups' own: Kafka tells every member the same interval,
    so a partition reaches its new owner up to a whole interval after it was freed)."""
    group_consumer_migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    """Whether a live classic group becomes a consumer-protocol group when a member of
    that protocol joins (upgrade), and back when its last such member leaves (downgrade);
    classic members inside a consumer group are refused only when `disabled`."""
    fetch_max_wait_ms: int = 30_000
    """Upper bound on how long a Fetch long-poll is held, whatever the client asks."""

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * MINUTE_MS

    def validate(self) -> None:
        """Reject settings Kafka would refuse to start with."""
        for name in INT_FIELDS:
            if not -(2**31) <= getattr(self, name) <= 2**31 - 1:
                raise ValueError(f"{name} is not a number of type INT (32 bits)")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group_min_session_timeout_ms exceeds group_max_session_timeout_ms")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError("group_initial_rebalance_delay_ms must be >= 0")
        if self.group_max_size < 1:
            raise ValueError("group_max_size must be >= 1")
        if self.offsets_retention_minutes < 1:
            raise ValueError("offsets_retention_minutes must be >= 1")
        if self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets_retention_check_interval_ms must be >= 1")
        if self.max_groups_per_principal < 0:
            raise ValueError("max_groups_per_principal must be >= 0")
        if self.max_group_record_bytes < 1024:
            raise ValueError("max_group_record_bytes must be >= 1024")
        if (
            not 1
            <= self.group_consumer_heartbeat_interval_ms
            < (self.group_consumer_session_timeout_ms)
        ):
            raise ValueError(
                "group_consumer_heartbeat_interval_ms must be >= 1 and below "
                "group_consumer_session_timeout_ms"
            )
        if self.group_consumer_waiting_heartbeat_interval_ms < 1:
            raise ValueError("group_consumer_waiting_heartbeat_interval_ms must be >= 1")
        if self.num_partitions < 1:
            raise ValueError("num_partitions must be >= 1")
