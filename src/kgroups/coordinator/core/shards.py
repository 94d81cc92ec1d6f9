"""Which shard a group belongs to: Kafka's mapping of a group to a `__consumer_offsets` partition.

Kafka's `GroupCoordinatorService.partitionFor` is `Utils.abs(groupId.hashCode()) %
offsets.topic.num.partitions` (50 by default), and the count "should not change after
deployment": every group would move. kgroups keeps the same function, so a group lands
on the shard number a Kafka operator would expect, and the same rule: the count is fixed
when the store is created (the store refuses another). Clients never compute it; they ask
FindCoordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kgroups.coordinator.core.msg_cluster import Node

DEFAULT_SHARDS = 50
"""Kafka's `offsets.topic.num.partitions` default."""
MAX_SHARDS = 1000
"""More shards than this buys nothing on a handful of replicas and costs a lease each."""

_INT_MIN = -(2**31)


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode`: 31-polynomial over UTF-16 code units, wrapping at 32 bits."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h & 0x80000000 else h


def shard_of(group_id: str, shards: int) -> int:
    """The shard of `group_id` among `shards`: `Utils.abs(hashCode) % shards`, where Kafka's
    `Utils.abs(Integer.MIN_VALUE)` is 0, not Java's negative `Math.abs`."""
    h = java_string_hash(group_id)
    return (0 if h == _INT_MIN else abs(h)) % shards


def fair_share(shards: int, replicas: int) -> int:
    """The most shards one of `replicas` live replicas should own: the ceiling, so they
    cover every shard (50 over 3: 17, 17, 16)."""
    return -(-shards // max(replicas, 1))


def to_claim(owned: int, share: int, free: list[int]) -> list[int]:
    """Which free shards a replica owning `owned` claims: up to its share, lowest first."""
    return sorted(free)[: max(share - owned, 0)]


def to_release(owned: list[int], share: int) -> list[int]:
    """Which of its shards a replica over its share hands over (the highest numbered, so
    replicas agree on nothing and need not: every handover moves only the excess)."""
    excess = len(owned) - share
    return sorted(owned)[-excess:] if excess > 0 else []


@dataclass(slots=True)
class Sharding:
    """A replica's view of the cluster (`Core.sharding`; None: one coordinator serves every
    group). Set by the edge from its leases; the core answers from it."""

    count: int
    serving: set[int] = field(default_factory=set)
    """Shards loaded here and served."""
    loading: set[int] = field(default_factory=set)
    """Shards claimed here whose records are being read."""
    owners: dict[int, int] = field(default_factory=dict)
    """shard -> node id of the live replica that owns it (absent: none yet)."""
    brokers: dict[int, dict[str, Node]] = field(default_factory=dict)
    """node id -> listener name -> how clients of that listener reach that replica."""
