"""The coordinator's whole in-memory state, shared by the per-request modules.

Handlers are plain functions of `(core, ...)`; the `Core` object holds the groups,
offsets, topics and timers, the settings, the identity of this node, the clock value of
the call in progress and the `Outbox` that call fills. Nothing here does I/O.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kgroups.coordinator.core.config import CoordinatorConfig
from kgroups.coordinator.core.consumer_group import ConsumerGroup
from kgroups.coordinator.core.effects import Outbox
from kgroups.coordinator.core.log_ends import LogEnds
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.msg_cluster import Node
from kgroups.coordinator.core.records import OffsetValue
from kgroups.coordinator.core.shards import Sharding
from kgroups.coordinator.core.timers import KeyedTimers
from kgroups.shown import LogBudget


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    created_ms: int
    configs: dict[str, str] = field(default_factory=dict)
    """Overrides of Kafka's topic defaults (kept and described; they change nothing)."""


def _no_work_clock() -> float:
    """No clock given: every piece of work takes no time."""
    return 0.0


@dataclass(slots=True)
class Core:
    config: CoordinatorConfig
    node: Node
    cluster_id: str
    nodes: dict[str, Node] = field(default_factory=dict)
    """This node's address per listener name (advertised.listeners); `node` for others."""
    new_member_id: Callable[[str], str] = _random_member_id
    """`prefix -> unique id`; Kafka uses `clientId-UUID` (or `instanceId-UUID`)."""
    new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4
    work_clock: Callable[[], float] = _no_work_clock
    """Seconds, for how long a piece of work took (a target assignment: a metric), never
    for a decision: the server passes its performance counter, tests their own."""
    groups: dict[str, Group] = field(default_factory=dict)
    """Classic groups. Added and removed only through `ownership.put` and `ownership.drop`."""
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    """Consumer-protocol groups (KIP-848), through `ownership.put_consumer`/`drop_consumer`.
    A group id is in one of the two dicts at most."""
    owned: Counter[str] = field(default_factory=Counter)
    """principal -> groups it created that still exist (`ownership.py`)."""
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)
    """group id -> (topic, partition) -> committed offset."""
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    group_configs: dict[str, dict[str, int]] = field(default_factory=dict)
    """group id -> Kafka config name -> override (see `group_configs.py`)."""
    configs_made: dict[str, tuple[dict[str, int], CoordinatorConfig, CoordinatorConfig]] = field(
        default_factory=dict
    )
    """group id -> (its overrides, the coordinator's config, the two combined): what
    `group_config` made last, so that a group with overrides (a heartbeat asks twice) does
    not build its settings again until either changes."""
    topic_names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)
    topics_version: int = 0
    """Moves whenever a topic is created, changed or deleted (what consumer groups cache
    their subscriptions' resolution against)."""
    log_ends: LogEnds = field(default_factory=dict)
    """(topic, partition) -> how far its log is known to reach (see `log_ends.py`)."""
    timers: KeyedTimers = field(default_factory=KeyedTimers)
    out: Outbox = field(default_factory=Outbox)
    now_ms: int = 0
    """The time of the call in progress, in epoch milliseconds."""
    sharding: Sharding | None = None
    """Which groups this replica serves, when replicas share them (`routing.py`)."""
    quiet: LogBudget = field(default_factory=lambda: LogBudget(60.0, burst=5))
    """Log lines a client can cause (a refused oversized join) are kept to this budget."""


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def session_key(group_id: str, member_id: str) -> str:
    """A consumer-protocol group's member's session."""
    return f"consumer-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    """A consumer-protocol group's member's rebalance timeout (for a classic member
    there: its time to send SyncGroup, or to rejoin when told to)."""
    return f"consumer-rebalance-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


EXPIRE_OFFSETS_KEY = "expire-offsets"
