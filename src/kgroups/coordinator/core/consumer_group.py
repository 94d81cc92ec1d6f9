"""A consumer-protocol group (KIP-848) as the coordinator holds it in memory.

Three epochs order everything (Kafka's `ConsumerGroup`/`ModernGroup`):

* the **group epoch** moves whenever the target assignment must be computed again (a
  member joins, leaves or changes its subscription or assignor, a subscribed topic is
  created, grown or deleted);
* the **assignment epoch** is the group epoch the current target was computed at;
* each **member epoch** reaches the assignment epoch once the member has released what
  is no longer its (`reconciliation.py`).

`holders` answers "who holds this partition, at which epoch" for every partition some
member has assigned or is still revoking; adding a holder where another member already
is one is a bug (the one-owner rule), and raises.

Topics are keyed by name inside the core (the wire maps topic ids, `consumer_heartbeat`).
Members are kept in insertion order, and so is every iteration over them, so an outcome
never depends on string hashing.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from kgroups.coordinator.core.msg_group import Protocol
from kgroups.coordinator.core.reconciliation import FREE, MemberAssignment, MemberState
from kgroups.coordinator.core.records import (
    ConsumerGroupValue,
    ConsumerMemberValue,
    TopicPartitionEpochs,
    TopicPartitions,
)

DEFAULT_ASSIGNORS = ("uniform", "range")
"""Kafka's `group.consumer.assignors`: the first is used unless members prefer another."""
INITIAL_EPOCH = 1
"""Kafka 4.3+ starts a new group at group and assignment epoch 1 (KAFKA-20268)."""
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupState(enum.StrEnum):
    """As ConsumerGroupDescribe and ListGroups spell them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member speaking the classic protocol inside a consumer group keeps of its
    JoinGroup (Kafka's ClassicMemberMetadata): its session timeout and its protocols."""

    session_timeout_ms: int
    protocols: tuple[Protocol, ...]

    @property
    def protocol_name(self) -> str:
        """The protocol it is told it uses: its first (Kafka's choice)."""
        return self.protocols[0].name


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    current: MemberAssignment[str] = field(default_factory=MemberAssignment)
    target: dict[str, tuple[int, ...]] = field(default_factory=dict)
    metadata_version: int = 0
    """Moves whenever a field of `metadata_key` changes (`touch`)."""
    value: (
        tuple[MemberAssignment[str], dict[str, tuple[int, ...]], int, ConsumerMemberValue] | None
    ) = None
    """(its assignment, its target, its metadata version, its record then): `to_value`'s
    cache, checked by identity (an assignment is immutable, a target replaced whole)."""
    classic: ClassicMetadata | None = None
    """Set for a member that speaks the classic protocol (JoinGroup, SyncGroup,
    Heartbeat) inside this group: `consumer_classic`."""
    resolved: tuple[object, frozenset[str]] | None = None
    """The existing topics its subscription names, and for which topics and subscription
    (not persisted: `consumer_heartbeat.subscribed_topics` recomputes it)."""

    @property
    def epoch(self) -> int:
        return self.current.epoch

    def touch(self) -> None:
        """Its metadata changed: its record must be made again."""
        self.metadata_version += 1

    def metadata_key(self) -> tuple[object, ...]:
        """What ConsumerGroupMemberMetadata holds: a change is persisted."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                self.subscribed_topic_names, self.subscribed_topic_regex,
                self.rebalance_timeout_ms, self.server_assignor, self.classic)  # fmt: skip

    def to_value(self) -> ConsumerMemberValue:
        """The member's record, made again only when it changed (a group's snapshot is
        written after every heartbeat that changed any of its members)."""
        cached = self.value
        if (
            cached is not None
            and cached[0] is self.current
            and cached[1] is self.target
            and cached[2] == self.metadata_version
        ):
            return cached[3]
        value = self._value()
        self.value = (self.current, self.target, self.metadata_version, value)
        return value

    def _value(self) -> ConsumerMemberValue:
        c = self.current
        return ConsumerMemberValue(
            member_id=self.member_id,
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            epoch=c.epoch,
            previous_epoch=c.previous_epoch,
            state=int(c.state),
            assigned=_with_epochs(c.assigned),
            revoking=_with_epochs(c.revoking),
            target=tuple(sorted((t, tuple(sorted(ps))) for t, ps in self.target.items() if ps)),
            classic_session_timeout_ms=None
            if self.classic is None
            else self.classic.session_timeout_ms,
            classic_protocols=() if self.classic is None else self.classic.protocols,
        )

    @classmethod
    def from_value(cls, v: ConsumerMemberValue) -> ConsumerMember:
        try:
            state = MemberState(v.state)
        except ValueError:
            state = MemberState.UNKNOWN
        current = MemberAssignment(v.epoch, v.previous_epoch, state,
                                   _from_epochs(v.assigned), _from_epochs(v.revoking))  # fmt: skip
        return cls(
            member_id=v.member_id,
            instance_id=v.instance_id,
            rack_id=v.rack_id,
            client_id=v.client_id,
            client_host=v.client_host,
            subscribed_topic_names=v.subscribed_topic_names,
            subscribed_topic_regex=v.subscribed_topic_regex,
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor,
            current=current,
            target=dict(v.target),
            classic=None
            if v.classic_session_timeout_ms is None
            else ClassicMetadata(v.classic_session_timeout_ms, v.classic_protocols),
        )


def _with_epochs(partitions: Mapping[str, Mapping[int, int]]) -> TopicPartitionEpochs:
    return tuple(sorted((t, tuple(sorted(ps.items()))) for t, ps in partitions.items() if ps))


def _from_epochs(partitions: TopicPartitionEpochs) -> dict[str, dict[int, int]]:
    return {t: dict(ps) for t, ps in partitions}


def assigned_partitions(assignment: Mapping[str, Mapping[int, int]]) -> TopicPartitions:
    """The partitions of an assignment without their epochs, sorted: what a member is told."""
    return tuple(sorted((t, tuple(sorted(ps))) for t, ps in assignment.items() if ps))


class DoubleOwnership(AssertionError):
    """Two members would hold one partition: a bug the core must stop on."""


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = INITIAL_EPOCH
    assignment_epoch: int = INITIAL_EPOCH
    assignment_timestamp_ms: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """instance id -> member id."""
    holders: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    """(topic, partition) -> (member id, its epoch) for every partition held."""
    metadata_hash: int = 0
    """The subscribed topics' hash when the group epoch last moved (`topics_hash`)."""
    subscriptions_version: int = 0
    """Moves when a member joins, leaves or changes its subscription (in memory only)."""
    preferred: tuple[int, str] | None = None
    """(subscriptions version, the preferred assignor then)."""
    hashed: tuple[tuple[int, int], int] | None = None
    """((topics version, subscriptions version), the topics' hash then): a heartbeat
    that changes neither costs no rehash of the whole group's topics."""
    owner: str | None = None
    """The principal that created the group (`ownership.py`)."""

    unreconciled: set[str] = field(default_factory=set)
    """Members not yet at the assignment epoch with nothing left to do (kept as members
    move, so the state costs nothing to read)."""
    waiting: set[str] = field(default_factory=set)
    """Members waiting for partitions others are releasing (UNRELEASED_PARTITIONS)."""
    first_to_give: frozenset[str] = frozenset()
    """The few members whose target holds more than a share of the group one member
    larger: the next member to join takes from them whatever their heartbeats' phase
    (`consumer_heartbeat.FIRST_TO_GIVE`; in memory only, made with each target)."""
    unsettled_since_ms: int | None = None
    """When the group epoch first moved since the group was last Stable (for metrics;
    in memory only)."""
    values: dict[str, ConsumerMemberValue | None] = field(default_factory=dict)
    """Member id -> its record as last made, in `members`' order (None: not made yet).
    `to_value` makes again only the records of the members `stale` names: a group's
    snapshot is written after every heartbeat that changed one of its members, and
    remaking a thousand members' records each time made a rebalance of a large group
    cost as much CPU as its members' heartbeats could bring."""
    stale: set[str] = field(default_factory=set)
    """Members changed since the last snapshot: joined, moved (`update_assignment`), given
    a new target (`set_target`) or new metadata (`touch`)."""

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if self.unreconciled:
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def set_assignment_epoch(self, epoch: int) -> None:
        self.assignment_epoch = epoch
        self.unreconciled = {
            m.member_id for m in self.members.values() if not m.current.reconciled_to(epoch)
        }

    def _track(self, member: ConsumerMember) -> None:
        if member.current.reconciled_to(self.assignment_epoch):
            self.unreconciled.discard(member.member_id)
        else:
            self.unreconciled.add(member.member_id)
        if member.current.state is MemberState.UNRELEASED_PARTITIONS:
            self.waiting.add(member.member_id)
        else:
            self.waiting.discard(member.member_id)

    def holder_epoch(self, topic: str, partition: int) -> int:
        held = self.holders.get((topic, partition))
        return FREE if held is None else held[1]

    def subscribed_topics(self) -> Counter[str]:
        """Topic -> how many members subscribe to it by name."""
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update(member.subscribed_topic_names)
        return counts

    def preferred_assignor(self) -> str:
        """The assignor most members ask for (ties: the first asked for), else the default
        (cached until a member joins, leaves or changes its subscription or assignor)."""
        if self.preferred is not None and self.preferred[0] == self.subscriptions_version:
            return self.preferred[1]
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        name = asked.most_common(1)[0][0] if asked else DEFAULT_ASSIGNORS[0]
        self.preferred = (self.subscriptions_version, name)
        return name

    # -- membership and holdings -------------------------------------------------------

    def add(self, member: ConsumerMember) -> None:
        self.subscriptions_version += 1
        self.members[member.member_id] = member
        self.values[member.member_id] = None
        self.stale.add(member.member_id)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._hold(member)
        self._track(member)

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.subscriptions_version += 1
        self.unreconciled.discard(member_id)
        self.waiting.discard(member_id)
        del self.values[member_id]
        self.stale.discard(member_id)
        if member.instance_id is not None and (
            self.static_members.get(member.instance_id) == member_id
        ):
            del self.static_members[member.instance_id]
        self._release(member)
        return member

    def update_assignment(self, member: ConsumerMember, current: MemberAssignment[str]) -> None:
        """Move `member` to `current`, keeping `holders` in step."""
        self._release(member)
        member.current = current
        self._hold(member)
        self._track(member)
        self.stale.add(member.member_id)

    def set_target(self, member: ConsumerMember, target: dict[str, tuple[int, ...]]) -> None:
        member.target = target
        self.stale.add(member.member_id)

    def touch(self, member: ConsumerMember) -> None:
        """`member`'s metadata changed (its record must be made again)."""
        member.touch()
        self.stale.add(member.member_id)

    def _release(self, member: ConsumerMember) -> None:
        for partitions in (member.current.assigned, member.current.revoking):
            for topic, ps in partitions.items():
                for p in ps:
                    held = self.holders.get((topic, p))
                    if held is not None and held[0] == member.member_id:
                        del self.holders[(topic, p)]

    def _hold(self, member: ConsumerMember) -> None:
        epoch = member.current.epoch
        for partitions in (member.current.assigned, member.current.revoking):
            for topic, ps in partitions.items():
                for p in ps:
                    held = self.holders.get((topic, p))
                    if held is not None and held[0] != member.member_id:
                        raise DoubleOwnership(
                            f"{self.group_id}: {topic}-{p} held by {held[0]} at epoch "
                            f"{held[1]}, given to {member.member_id} at {epoch}"
                        )
                    self.holders[(topic, p)] = (member.member_id, epoch)

    # -- records -------------------------------------------------------------------------

    def to_value(self) -> ConsumerGroupValue:
        return ConsumerGroupValue(
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignment_timestamp_ms=self.assignment_timestamp_ms,
            members=self._member_values(),
            metadata_hash=self.metadata_hash,
            owner=self.owner,
        )

    def _member_values(self) -> tuple[ConsumerMemberValue, ...]:
        values, members = self.values, self.members
        for member_id in self.stale:
            values[member_id] = members[member_id].to_value()
        self.stale.clear()
        return tuple(values.values())  # type: ignore[arg-type]  # none is None now

    @classmethod
    def from_value(cls, group_id: str, v: ConsumerGroupValue) -> ConsumerGroup:
        group = cls(group_id, v.group_epoch, v.assignment_epoch, v.assignment_timestamp_ms,
                    metadata_hash=v.metadata_hash, owner=v.owner)  # fmt: skip
        for m in v.members:
            group.add(ConsumerMember.from_value(m))
        return group
