"""`kgroups group reset-offsets`: plan new offsets the way Kafka's tool does, then
(with --execute) commit exactly that plan.

A plan is made for groups without members only (Empty, or Dead: never seen): a member
commits over whatever an admin writes, so Kafka refuses, and so does this. Offsets come
from the partitions' leaders (ListOffsets: the log's start, its end, or the first
offset at a time); explicit ones (--to-offset, --shift-by, --from-file) are clamped into
[earliest, latest] as Kafka clamps them, with its warning. Nothing is written until
every group's plan is made, so a bad argument found late changes nothing; then each
group's plan is committed as an admin (generation -1, no member id), which a coordinator
refuses for a group that gained members meanwhile.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kgroups.admin import EARLIEST, LATEST, TP, Topology, error_message
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import GroupState

if TYPE_CHECKING:
    from kgroups.admin import Cluster


class Spec(enum.Enum):
    """The reset scenarios, by Kafka's option names."""

    TO_EARLIEST = "to-earliest"
    TO_LATEST = "to-latest"
    TO_CURRENT = "to-current"
    TO_OFFSET = "to-offset"
    SHIFT_BY = "shift-by"
    TO_DATETIME = "to-datetime"
    BY_DURATION = "by-duration"
    FROM_FILE = "from-file"


@dataclass(frozen=True, slots=True)
class Reset:
    spec: Spec
    number: int = 0
    """The offset (to-offset), the shift (shift-by) or the time in ms (to-datetime, by-duration)."""
    plans: Mapping[str, Mapping[TP, int]] = field(default_factory=dict)
    """from-file: the file's offsets, by group."""


@dataclass(frozen=True, slots=True)
class Scope:
    all_topics: bool = False
    topics: tuple[tuple[str, tuple[int, ...] | None], ...] = ()
    """--topic arguments: a topic and its partitions (None: all of them)."""


class ResetError(Exception):
    """The plan cannot be made (Kafka's tool stops there too); nothing was written."""


@dataclass
class Outcome:
    plans: dict[str, dict[TP, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """Groups refused or failed, in Kafka's words; each makes the exit code 1."""
    warnings: list[str] = field(default_factory=list)
    committed: dict[str, dict[TP, int]] = field(default_factory=dict)
    """Each planned group's committed offsets before the reset (the operator records
    them next to the new ones)."""


INACTIVE = {GroupState.EMPTY.value, GroupState.DEAD.value}


def tp_name(tp: TP) -> str:
    """A partition as Kafka's messages name it: `orders-3`."""
    return f"{tp[0]}-{tp[1]}"


def clamp(
    requested: Mapping[TP, int], earliest: Mapping[TP, int], latest: Mapping[TP, int]
) -> tuple[dict[TP, int], list[str]]:
    """Requested offsets moved into [earliest, latest] where those are known, with
    Kafka's warning for each one moved."""
    out: dict[TP, int] = {}
    warnings: list[str] = []
    for tp, wanted in sorted(requested.items()):
        end, start = latest.get(tp), earliest.get(tp)
        if end is not None and wanted > end:
            warnings.append(
                f"New offset ({wanted}) is higher than latest offset for topic partition "
                f"{tp_name(tp)}. Value will be set to {end}"
            )
            out[tp] = end
        elif start is not None and wanted < start:
            warnings.append(
                f"New offset ({wanted}) is lower than earliest offset for topic partition "
                f"{tp_name(tp)}. Value will be set to {start}"
            )
            out[tp] = start
        else:
            out[tp] = wanted
    return out, warnings


def partitions_in_scope(scope: Scope, topology: Topology, committed: Mapping[TP, int]) -> list[TP]:
    """--all-topics: what the group has committed; --topic: the partitions named, or all
    of a topic's. Every one must exist and have a leader."""
    if scope.all_topics:
        return sorted(committed)
    wanted: list[TP] = []
    for topic, partitions in scope.topics:
        if topic in topology.missing:
            raise ResetError(f"Topic '{topic}': {error_message(topology.missing[topic])}")
        listed = sorted(topology.leaders.get(topic, {})) if partitions is None else partitions
        wanted.extend((topic, p) for p in listed)
    return list(dict.fromkeys(wanted))


def check_partitions(partitions: Sequence[TP], topology: Topology) -> None:
    """Kafka's checks before planning: the partitions exist and have leaders."""
    absent = [tp for tp in partitions if tp[1] not in topology.leaders.get(tp[0], {})]
    if absent:
        names = ",".join(map(tp_name, absent))
        raise ResetError(f'The partitions "{names}" do not exist')
    leaderless = [tp for tp in partitions if topology.leaders[tp[0]][tp[1]] < 0]
    if leaderless:
        raise ResetError(f'The partitions "{",".join(map(tp_name, leaderless))}" have no leader')


async def _offsets(cluster: Cluster, partitions: Sequence[TP], at: int, what: str) -> dict[TP, int]:
    listed = await cluster.list_offsets(dict.fromkeys(partitions, at))
    out: dict[TP, int] = {}
    for tp in partitions:
        found = listed.get(tp, ErrorCode.unknown_topic_or_partition)
        if isinstance(found, ErrorCode):  # an IntEnum: isinstance(found, int) holds for it too
            raise ResetError(
                f"Error getting {what} offset of topic partition: {tp_name(tp)} "
                f"({error_message(found)})"
            )
        out[tp] = found
    return out


async def _bounds(
    cluster: Cluster, partitions: Sequence[TP]
) -> tuple[dict[TP, int], dict[TP, int]]:
    return (
        await _offsets(cluster, partitions, EARLIEST, "starting"),
        await _offsets(cluster, partitions, LATEST, "ending"),
    )


async def _new_offsets(
    cluster: Cluster,
    reset: Reset,
    group_id: str,
    partitions: list[TP],
    committed: Mapping[TP, int],
    out: Outcome,
) -> dict[TP, int]:
    spec = reset.spec
    if spec is Spec.TO_EARLIEST:
        return await _offsets(cluster, partitions, EARLIEST, "starting")
    if spec is Spec.TO_LATEST:
        return await _offsets(cluster, partitions, LATEST, "ending")
    if spec is Spec.TO_CURRENT:
        missing = [tp for tp in partitions if tp not in committed]
        latest = await _offsets(cluster, missing, LATEST, "ending") if missing else {}
        return {tp: committed.get(tp, latest.get(tp, 0)) for tp in partitions}
    if spec in (Spec.TO_DATETIME, Spec.BY_DURATION):
        found = await _offsets(cluster, partitions, reset.number, "offset by timestamp")
        empty = [tp for tp in partitions if found[tp] < 0]
        for topic, partition in empty:
            out.warnings.append(
                f"Warn: Partition {partition} from topic {topic} is empty. "
                "Falling back to latest known offset."
            )
        latest = await _offsets(cluster, empty, LATEST, "ending") if empty else {}
        return {tp: latest[tp] if found[tp] < 0 else found[tp] for tp in partitions}
    if spec is Spec.TO_OFFSET:
        requested = dict.fromkeys(partitions, reset.number)
    elif spec is Spec.SHIFT_BY:
        for tp in partitions:
            if tp not in committed:
                raise ResetError(
                    f"Cannot shift offset for partition {tp_name(tp)} "
                    "since there is no current committed offset"
                )
        requested = {tp: committed[tp] + reset.number for tp in partitions}
    else:  # FROM_FILE: the partitions are the file's
        requested = dict(reset.plans[group_id])
    clamped, warnings = clamp(requested, *await _bounds(cluster, partitions))
    out.warnings.extend(warnings)
    return clamped


async def plan(cluster: Cluster, group_ids: Sequence[str], scope: Scope, reset: Reset) -> Outcome:
    """Every group's new offsets (not written), or a refusal for each active group."""
    out = Outcome()
    described = await cluster.describe_groups(group_ids)
    for group_id in sorted(set(group_ids)):
        node, view = described[group_id]
        if view.state not in INACTIVE:
            out.errors.append(
                f"Error: Assignments can only be reset if the group '{group_id}' is inactive, "
                f"but the current state is {view.state}."
            )
            continue
        committed = {
            tp: c.offset for tp, c in (await (await cluster.admin(node)).offsets(group_id)).items()
        }
        out.committed[group_id] = committed
        if reset.spec is Spec.FROM_FILE:
            if group_id not in reset.plans:
                out.errors.append(f"Error: No reset plan for group {group_id} found.")
                continue
            partitions = sorted(reset.plans[group_id])
        else:
            partitions = []  # filled below, once the topology is known
        topics = (
            {t for t, _ in scope.topics} | {t for t, _ in partitions} | {t for t, _ in committed}
        )
        topology = await cluster.topology(topics)
        if reset.spec is not Spec.FROM_FILE:
            partitions = partitions_in_scope(scope, topology, committed)
        check_partitions(partitions, topology)
        out.plans[group_id] = await _new_offsets(
            cluster, reset, group_id, partitions, committed, out
        )
    return out


async def execute(cluster: Cluster, out: Outcome) -> dict[str, dict[TP, ErrorCode]]:
    """Commit each group's plan as an admin. A partition the coordinator refused leaves
    the plan (what is printed afterwards is what was written) for an error; the refused
    partitions' codes are returned, by group."""
    refused: dict[str, dict[TP, ErrorCode]] = {}
    for group_id, offsets in sorted(out.plans.items()):
        if not offsets:
            continue
        _, admin = await cluster.group_admin(group_id)
        codes = await admin.commit_offsets(group_id, offsets)
        for tp in sorted(offsets):
            code = codes.get(tp, ErrorCode.unknown_server_error)
            if code is not ErrorCode.none:
                refused.setdefault(group_id, {})[tp] = code
                del out.plans[group_id][tp]
                out.errors.append(
                    f"Error: Failed to commit offset for partition {tp_name(tp)} "
                    f"of group '{group_id}': {error_message(code)}"
                )
    return refused
