"""The classic group and its members, as the coordinator holds them in memory.

A close reading of Kafka's `ClassicGroup`/`ClassicGroupMember`, with two deliberate
differences that make the core deterministic and sans-IO:

* A parked JoinGroup or SyncGroup is the `ref` of the request, not a future. Completing it
  appends a `Reply` to the call's `Outbox`; the server sends it once the call's records are
  durable.
* Where Java iterates a `HashMap` (leader re-election, protocol-vote ties, member order in
  responses), we iterate insertion order. Ordered dicts also stand in for sets, so no
  outcome depends on string hashing and a simulation replays bit for bit from its seed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kgroups.coordinator.core.effects import Outbox
from kgroups.coordinator.core.msg_group import (
    JoinGroupMember,
    JoinGroupResponse,
    Protocol,
    SyncGroupResponse,
)
from kgroups.coordinator.core.records import MemberValue
from kgroups.coordinator.core.states import CAN_REBALANCE, GroupState, check_transition
from kgroups.protocol.consumer import subscription_topics
from kgroups.protocol.errors import ErrorCode, GroupError

CONSUMER_PROTOCOL_TYPE = "consumer"
MEMBER_RECORD_OVERHEAD = 64
"""A member's fixed-size fields and framing in a group record, roughly."""
GROUP_RECORD_OVERHEAD = 128
"""A group record's fixed-size fields and framing, roughly."""


def _names(protocols: tuple[Protocol, ...]) -> list[str]:
    """A member's protocol names, each once, in its order of preference."""
    return list(dict.fromkeys(p.name for p in protocols))


@dataclass(slots=True, eq=False)
class Member:
    """One member of a classic group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    awaiting_join: int | None = None
    """The ref of this member's parked JoinGroup, if any."""
    awaiting_sync: int | None = None
    """The ref of this member's parked SyncGroup, if any."""
    is_new: bool = False
    """Joined but not yet through a completed join phase: expirable even while parked."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        """This member's metadata for `protocol_name` (empty if it does not support it)."""
        for protocol in self.protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        return b""

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        """Same protocols, same metadata bytes, same order: nothing changed for the group."""
        return self.protocols == protocols

    def vote(self, candidates: dict[str, None]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for protocol in self.protocols:
            if protocol.name in candidates:
                return protocol.name
        raise GroupError(ErrorCode.inconsistent_group_protocol, "member supports no candidate")

    def to_value(self) -> MemberValue:
        """The durable part of this member, for a group record."""
        return MemberValue(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            session_timeout_ms=self.session_timeout_ms,
            protocols=self.protocols,
            assignment=self.assignment,
        )

    @classmethod
    def from_value(cls, value: MemberValue, protocol_type: str) -> Member:
        """A member as replayed from a group record (never new, nothing parked)."""
        return cls(
            member_id=value.member_id,
            group_instance_id=value.group_instance_id,
            client_id=value.client_id,
            client_host=value.client_host,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            session_timeout_ms=value.session_timeout_ms,
            protocol_type=protocol_type,
            protocols=value.protocols,
            assignment=value.assignment,
        )

    def record_bytes(self) -> int:
        """About what this member adds to its group's record: its ids, its protocols'
        names and metadata, its assignment (bounded by `max_group_record_bytes`)."""
        return (
            MEMBER_RECORD_OVERHEAD
            + len(self.member_id)
            + len(self.group_instance_id or "")
            + len(self.client_id)
            + len(self.client_host)
            + sum(len(p.name) + len(p.metadata) for p in self.protocols)
            + len(self.assignment)
        )

    def has_satisfied_heartbeat(self) -> bool:
        """A parked member is alive by definition, unless it has never completed a join."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


@dataclass(slots=True, eq=False)
class Group:
    """A classic group: state, generation, members and the bookkeeping of a rebalance."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.DEAD
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id."""
    pending_join: dict[str, None] = field(default_factory=dict)
    """Dynamic members told MEMBER_ID_REQUIRED that have not rejoined yet (KIP-394)."""
    pending_sync: dict[str, None] = field(default_factory=dict)
    """Members of this generation that have not sent SyncGroup yet (KAFKA-12890)."""
    num_awaiting_join: int = 0
    supported_protocols: Counter[str] = field(default_factory=Counter)
    """Protocol name -> how many members support it (each member counted once per name,
    even if it lists a name twice: a count equal to the group's size must mean every
    member can vote for it)."""
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    rebalance_started_ms: int | None = None
    """When the current rebalance began (for metrics and status), None when not rebalancing."""
    owner: str | None = None
    """The principal that created the group, if counted (groups per principal)."""
    member_bytes: int = 0
    """The sum of the members' `record_bytes`, kept as members come, change and go."""

    # -- state ---------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in CAN_REBALANCE

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join

    def rebalance_timeout_ms(self) -> int:
        """The group's rebalance timeout: the largest of its members' (0 when empty)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_simple(self) -> bool:
        """A group used only for offset storage (commits with generation -1)."""
        return self.protocol_type is None and not self.members and not self.pending_join

    # -- membership ----------------------------------------------------------------------

    def add(self, member: Member, join_ref: int | None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise AssertionError(f"static member {member.group_instance_id} already present")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.member_bytes += member.record_bytes()
        self.supported_protocols.update(_names(member.protocols))
        member.awaiting_join = join_ref
        if join_ref is not None:
            self.num_awaiting_join += 1
        self.pending_join.pop(member.member_id, None)

    def remove(self, member_id: str, out: Outbox) -> Member | None:
        """Drop a member (or a pending member); answer anything it still had parked."""
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self.member_bytes -= removed.record_bytes()
            self.supported_protocols.subtract(_names(removed.protocols))
            if removed.awaiting_join is not None:
                out.reply(
                    removed.awaiting_join,
                    JoinGroupResponse(error=ErrorCode.unknown_member_id, member_id=""),
                )
                removed.awaiting_join = None
                self.num_awaiting_join -= 1
            if removed.awaiting_sync is not None:
                out.reply(removed.awaiting_sync, SyncGroupResponse(ErrorCode.unknown_member_id))
                removed.awaiting_sync = None
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join.pop(member_id, None)
        self.pending_sync.pop(member_id, None)
        return removed

    def update_member(
        self,
        member: Member,
        protocols: tuple[Protocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_ref: int | None,
        out: Outbox,
    ) -> None:
        self.supported_protocols.subtract(_names(member.protocols))
        self.member_bytes -= member.record_bytes()
        member.protocols = protocols
        self.member_bytes += member.record_bytes()
        self.supported_protocols.update(_names(protocols))
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.awaiting_join is not None and join_ref is not None:
            # Kafka drops the superseded request silently, which leaves that connection
            # waiting forever; answer it so the client retries.
            out.reply(
                member.awaiting_join,
                JoinGroupResponse(
                    error=ErrorCode.rebalance_in_progress, member_id=member.member_id
                ),
            )
        elif join_ref is not None:
            self.num_awaiting_join += 1
        elif member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        member.awaiting_join = join_ref

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str, out: Outbox
    ) -> Member:
        """Give a static member a new id, fencing whatever the old id had parked (KIP-345)."""
        old = self.members.pop(old_member_id)
        self.member_bytes -= old.record_bytes()
        if old.awaiting_join is not None:
            out.reply(
                old.awaiting_join,
                JoinGroupResponse(error=ErrorCode.fenced_instance_id, member_id=old_member_id),
            )
            self.num_awaiting_join -= 1
        if old.awaiting_sync is not None:
            out.reply(old.awaiting_sync, SyncGroupResponse(ErrorCode.fenced_instance_id))
        new = Member(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        self.member_bytes += new.record_bytes()
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        if old_member_id in self.pending_sync:
            del self.pending_sync[old_member_id]
            self.pending_sync[new_member_id] = None
        return new

    def set_assignment(self, member: Member, assignment: bytes) -> None:
        self.member_bytes += len(assignment) - len(member.assignment)
        member.assignment = assignment

    def record_bytes(self) -> int:
        """About the size of this group's record (see `Member.record_bytes`)."""
        return GROUP_RECORD_OVERHEAD + len(self.group_id) + self.member_bytes

    def validate_member(self, member_id: str, instance_id: str | None) -> Member:
        """The member, or UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka checks them."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise GroupError(ErrorCode.unknown_member_id)
            if existing != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id)
        return member

    def complete_join(self, member: Member, response: JoinGroupResponse, out: Outbox) -> bool:
        if member.awaiting_join is None:
            return False
        out.reply(member.awaiting_join, response)
        member.awaiting_join = None
        self.num_awaiting_join -= 1
        return True

    def complete_sync(self, member: Member, response: SyncGroupResponse, out: Outbox) -> bool:
        if member.awaiting_sync is None:
            return False
        out.reply(member.awaiting_sync, response)
        member.awaiting_sync = None
        return True

    # -- protocols -----------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: tuple[Protocol, ...]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[p.name] == n for p in protocols
        )

    def select_protocol(self) -> str:
        """Kafka's vote: each member picks its favourite common protocol; most votes wins.

        Ties go to the protocol that received its first vote earliest (members in join
        order), where Java's answer depends on HashMap iteration.
        """
        n = len(self.members)
        candidates = {name: None for name, count in self.supported_protocols.items() if count == n}
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to, when the group speaks the consumer protocol.

        Parsed from the v0 prefix every ConsumerProtocolSubscription version shares;
        None when unknown (another protocol type, or metadata that does not parse).
        """
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(subscription_topics(member.metadata(self.protocol_name)))
        except ValueError:
            return None
        return frozenset(topics)

    def current_members(self) -> tuple[JoinGroupMember, ...]:
        """The member list the leader receives in its JoinGroup response."""
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )
