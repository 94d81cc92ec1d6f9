"""`kgroups group describe`: what Kafka's tool shows of a group, plus what it cannot.

Three views, as in kafka-consumer-groups: offsets (each partition the group owns or has
committed, with the log end and the lag), members, and state. Kafka's tool cannot show
a classic group's generation or its leader (DescribeGroups does not carry them); kgroups'
coordinator adds both in tagged fields, so the state view has GENERATION and LEADER
columns and the members view marks the leader and shows each member's assignment. From
a Kafka broker those columns read `-`: it does not send the tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kgroups.admin import LATEST, TP, Committed, GroupView, MemberView, Node
from kgroups.api.table import MISSING, Column, render
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import GroupState

if TYPE_CHECKING:
    from kgroups.admin import Cluster

REBALANCING = {
    GroupState.PREPARING_REBALANCE.value,
    GroupState.COMPLETING_REBALANCE.value,
    "Assigning",
    "Reconciling",
}


@dataclass(frozen=True, slots=True)
class Described:
    """One group as describe shows it: who coordinates it, DescribeGroups' view, its
    committed offsets and the log ends of its partitions (these two for offsets only)."""

    coordinator: Node
    group: GroupView
    committed: dict[TP, Committed]
    ends: dict[TP, int]

    @property
    def leader(self) -> str | None:
        return self.group.leader or None

    @property
    def generation(self) -> int | None:
        return self.group.generation if self.group.generation >= 0 else None


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    current: int | None
    leader_epoch: int | None
    end: int | None
    member: MemberView | None

    @property
    def lag(self) -> int | None:
        if self.current is None or self.end is None:
            return None
        return self.end - self.current


async def collect(cluster: Cluster, group_ids: Sequence[str], *, offsets: bool) -> list[Described]:
    """Describe the groups (sorted by id, as Kafka's tool sorts them); with `offsets`,
    also fetch their committed offsets and the ends of their partitions' logs."""
    described = await cluster.describe_groups(group_ids)
    out = []
    for group_id in sorted(set(group_ids)):
        node, view = described[group_id]
        committed: dict[TP, Committed] = {}
        ends: dict[TP, int] = {}
        if offsets and view.exists:
            committed = await (await cluster.admin(node)).offsets(group_id)
            owned = {(t, p) for m in view.members for t, ps in m.assignment.items() for p in ps}
            listed = await cluster.list_offsets(dict.fromkeys(owned | set(committed), LATEST))
            ends = {
                tp: end for tp, end in listed.items() if not isinstance(end, ErrorCode) and end >= 0
            }
        out.append(Described(node, view, committed, ends))
    return out


def notice(group: GroupView) -> tuple[str, bool] | None:
    """Kafka's line about a group that is not simply Stable, and whether it is an error."""
    name = group.group_id
    if not group.exists:
        return f"Error: Consumer group '{name}' does not exist.", True
    if group.state == GroupState.EMPTY.value:
        return f"Consumer group '{name}' has no active members.", False
    if group.state in REBALANCING:
        return f"Warning: Consumer group '{name}' is rebalancing.", False
    return None


def partition_rows(d: Described) -> list[PartitionRow]:
    """Kafka's order: members by how many partitions they own (most first), each one's
    partitions sorted; then the committed partitions nobody owns."""

    def row(tp: TP, member: MemberView | None) -> PartitionRow:
        committed = d.committed.get(tp)
        epoch = committed.leader_epoch if committed and committed.leader_epoch >= 0 else None
        current = committed.offset if committed else None
        return PartitionRow(tp[0], tp[1], current, epoch, d.ends.get(tp), member)

    rows: list[PartitionRow] = []
    owned: set[TP] = set()
    members = sorted(
        (m for m in d.group.members if _owned(m)), key=lambda m: -len(_owned(m))
    )  # sorted() is stable: ties keep DescribeGroups' order, as in Kafka
    for member in members:
        for tp in _owned(member):
            owned.add(tp)
            rows.append(row(tp, member))
    rows.extend(row(tp, None) for tp in sorted(set(d.committed) - owned))
    return rows


def _owned(member: MemberView) -> list[TP]:
    return sorted((t, p) for t, ps in member.assignment.items() for p in ps)


def kafka_assignment(member: MemberView) -> str:
    """Kafka's CURRENT-ASSIGNMENT: `t:0,1;u:0`."""
    return _kafka_partitions(member.assignment)


def _kafka_partitions(partitions: dict[str, tuple[int, ...]]) -> str:
    parts = [f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in partitions.items() if ps]
    return ";".join(sorted(parts)) or MISSING


def _or_missing(value: int | None) -> object:
    return MISSING if value is None else value


def assignment(member: MemberView) -> str:
    """kgroups' ASSIGNMENT: `t(0,1),u(0)`."""
    parts = [f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in member.assignment.items() if ps]
    return ",".join(sorted(parts)) or MISSING


def is_leader(d: Described, member: MemberView) -> str:
    if d.leader is None:
        return MISSING
    return "yes" if member.member_id == d.leader else "no"


def view_table(d: Described, *, members: bool, state: bool, verbose: bool) -> str | None:
    """The view asked for: members, state, or (the default) offsets."""
    if members:
        return members_table(d, verbose=verbose)
    if state:
        return state_table(d, verbose=verbose)
    return offsets_table(d, verbose=verbose)


def offsets_table(d: Described, *, verbose: bool) -> str | None:
    rows = partition_rows(d)
    if not rows:
        return None
    epoch = [Column("LEADER-EPOCH")] if verbose else []
    columns = [
        Column("GROUP"), Column("TOPIC"), Column("PARTITION", 10), *epoch,
        Column("CURRENT-OFFSET"), Column("LOG-END-OFFSET"), Column("LAG"),
        Column("CONSUMER-ID"), Column("HOST"), Column("CLIENT-ID"),
    ]  # fmt: skip
    rows_out = []
    for r in rows:
        who = (r.member.member_id, r.member.host, r.member.client_id) if r.member else (None,) * 3
        epochs = [r.leader_epoch] if verbose else []
        rows_out.append(
            [d.group.group_id, r.topic, r.partition, *epochs, r.current, r.end, r.lag, *who]
        )
    return render(columns, rows_out)


def members_table(d: Described, *, verbose: bool) -> str:
    members = d.group.members
    static = any(m.instance_id for m in members)
    columns = [
        Column("GROUP"), Column("CONSUMER-ID"),
        *([Column("GROUP-INSTANCE-ID", 17)] if static else []),
        Column("HOST"), Column("CLIENT-ID"), Column("#PARTITIONS"),
    ]  # fmt: skip
    # Kafka's tool adds UPGRADED (does the member speak the consumer protocol?) for a group
    # with members of both protocols only (a group rolling between them).
    kinds = {m.upgraded for m in members}
    upgraded = verbose and {True, False} <= kinds
    if verbose:
        columns += [
            Column("CURRENT-EPOCH"), Column("CURRENT-ASSIGNMENT", 20),
            Column("TARGET-EPOCH"), Column("TARGET-ASSIGNMENT", 20),
            *([Column("UPGRADED", 8)] if upgraded else []),
        ]  # fmt: skip
    columns += [Column("LEADER", 6)] + ([] if verbose else [Column("ASSIGNMENT")])
    rows = []
    for m in members:
        row: list[object] = [d.group.group_id, m.member_id]
        if static:
            row.append(m.instance_id or MISSING)
        row += [m.host, m.client_id, len(_owned(m))]
        if verbose:
            target = MISSING if m.target is None else _kafka_partitions(m.target)
            row += [_or_missing(m.epoch), kafka_assignment(m),
                    _or_missing(d.group.assignment_epoch), target]  # fmt: skip
            if upgraded:
                row.append(MISSING if m.upgraded is None else str(m.upgraded).lower())
        row.append(is_leader(d, m))
        if not verbose:
            row.append(assignment(m))
        rows.append(row)
    return render(columns, rows)


def state_table(d: Described, *, verbose: bool) -> str:
    g = d.group
    coordinator = f"{d.coordinator}  ({d.coordinator.node_id})"
    epochs = [Column("GROUP-EPOCH"), Column("TARGET-ASSIGNMENT-EPOCH", 25)] if verbose else []
    columns = [
        Column("GROUP"), Column("COORDINATOR (ID)", 25), Column("ASSIGNMENT-STRATEGY", 20),
        Column("STATE", 20), *epochs, Column("#MEMBERS", 10), Column("GENERATION", 12),
        Column("LEADER"),
    ]  # fmt: skip
    row: list[object] = [g.group_id, coordinator, g.protocol or MISSING, g.state]
    if verbose:
        consumer = g.group_type == "consumer"
        row += [g.generation if consumer else MISSING, _or_missing(g.assignment_epoch)]
    row += [len(g.members), d.generation, d.leader]
    return render(columns, [row])


def to_json(d: Described) -> dict[str, Any]:
    """Everything describe knows about a group, for machines (`-o json`)."""
    g = d.group
    return {
        "group": g.group_id,
        "state": g.state,
        "coordinator": {"id": d.coordinator.node_id, "host": d.coordinator.host,
                        "port": d.coordinator.port},
        "type": g.group_type.capitalize(),
        "protocol_type": g.protocol_type,
        "assignment_strategy": g.protocol or None,
        "generation": d.generation,
        "leader": d.leader,
        **({"group_epoch": g.generation, "assignment_epoch": g.assignment_epoch}
           if g.group_type == "consumer" else {}),
        "members": [
            {
                "consumer_id": m.member_id, "group_instance_id": m.instance_id,
                "client_id": m.client_id, "host": m.host,
                "leader": None if d.leader is None else m.member_id == d.leader,
                "assignment": {t: sorted(ps) for t, ps in sorted(m.assignment.items())},
                **({} if m.epoch is None else {"member_epoch": m.epoch}),
                **({} if m.upgraded is None else {"upgraded": m.upgraded}),
                **({} if m.target is None
                   else {"target_assignment": {t: sorted(ps) for t, ps in m.target.items()}}),
            }
            for m in g.members
        ],
        "offsets": [
            {
                "topic": r.topic, "partition": r.partition, "current_offset": r.current,
                "log_end_offset": r.end, "lag": r.lag, "leader_epoch": r.leader_epoch,
                "consumer_id": r.member.member_id if r.member else None,
                "host": r.member.host if r.member else None,
                "client_id": r.member.client_id if r.member else None,
            }
            for r in partition_rows(d)
        ],
    }  # fmt: skip
