"""What `kubectl kgroups` prints, from ConsumerGroup objects and their request records.

`list` is laid out as kubectl lays out `get` (it is a kubectl command among kubectl
commands); `describe`, `reset-offsets` and `delete-offsets` print what `kgroups group`
prints for the same verbs, in Kafka's layout, by rebuilding the coordinator's view of the
group from the ConsumerGroup's status and handing it to the same table code. Pure: the
commands fetch, these format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgroups.admin import TP, Committed, GroupView, MemberView, Node
from kgroups.api.offset_requests import ANNOTATION
from kgroups.api.table import MISSING, Column, render
from kgroups.groupcli import describe as desc
from kgroups.protocol.addresses import parse_host_port

KUBECTL_PADDING = 3
KUBECTL_MIN_WIDTH = 6
"""kubectl's tabwriter: cells padded by 3, columns at least 6 wide."""


def kubectl_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns as `kubectl get` prints them, without a trailing newline."""
    texts = [[MISSING if v is None else str(v) for v in row] for row in rows]
    widths = [
        max(KUBECTL_MIN_WIDTH, max(len(r[i]) for r in [list(headers), *texts]) + KUBECTL_PADDING)
        for i in range(len(headers))
    ]
    lines = []
    for row in [list(headers), *texts]:
        padded = [text.ljust(width) for text, width in zip(row[:-1], widths, strict=False)]
        lines.append("".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


def group_id(obj: Mapping[str, Any]) -> str:
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    return str(status.get("groupId") or spec.get("groupId") or obj["metadata"]["name"])


def summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    """One ConsumerGroup as `list` shows it (every column, wide ones included)."""
    status = obj.get("status") or {}
    ready = condition(obj, "Ready")
    return {
        "namespace": obj["metadata"].get("namespace"),
        "name": obj["metadata"]["name"],
        "groupId": group_id(obj),
        "state": status.get("state"),
        "generation": status.get("generation"),
        "members": status.get("memberCount"),
        "assigned": (status.get("partitions") or {}).get("summary"),
        "lag": status.get("lag"),
        "ready": ready.get("status"),
        "reason": ready.get("reason"),
        "protocol": status.get("protocol"),
        "leader": status.get("leader"),
        "coordinator": status.get("coordinator"),
    }


COLUMNS = ("name", "groupId", "state", "generation", "members", "assigned", "lag", "ready")
WIDE = ("protocol", "leader", "coordinator", "reason")
HEADERS = {
    "namespace": "NAMESPACE", "name": "NAME", "groupId": "GROUP-ID", "state": "STATE",
    "generation": "GENERATION", "members": "MEMBERS", "assigned": "ASSIGNED", "lag": "LAG",
    "ready": "READY", "protocol": "PROTOCOL", "leader": "LEADER",
    "coordinator": "COORDINATOR", "reason": "REASON",
}  # fmt: skip


def list_table(items: Sequence[Mapping[str, Any]], *, all_namespaces: bool, wide: bool) -> str:
    """By namespace and name (the API server lists in its storage's key order)."""
    keys = [*(["namespace"] if all_namespaces else []), *COLUMNS, *(WIDE if wide else [])]
    summaries = sorted(map(summary, items), key=lambda s: (s["namespace"] or "", s["name"]))
    rows = [[s[k] for k in keys] for s in summaries]
    return kubectl_table([HEADERS[k] for k in keys], rows)


# --- describe -------------------------------------------------------------------------------


def coordinator_node(address: str | None) -> Node:
    """kgroups is one node, id 0; unknown before the operator has written it."""
    try:
        host, port = parse_host_port(address or "")
    except ValueError:
        return Node(-1, "unknown", 0)
    return Node(0, host, port)


def described(obj: Mapping[str, Any]) -> desc.Described | None:
    """The group as `kgroups group describe` would see it at the coordinator, rebuilt from
    the status the operator mirrors (None: the operator has not seen the group yet)."""
    status = obj.get("status") or {}
    if not status.get("state"):
        return None
    members = tuple(
        MemberView(
            member_id=m["memberId"],
            instance_id=m.get("instanceId"),
            client_id=m.get("clientId", ""),
            host=m.get("host", ""),
            assignment=_partitions(m.get("assignment")),
            epoch=m.get("memberEpoch"),
            target=None
            if m.get("targetAssignment") is None
            else _partitions(m.get("targetAssignment")),
            upgraded=None if m.get("protocol") is None else m["protocol"] == "consumer",
        )
        for m in status.get("members") or []
    )
    generation = status.get("generation")
    view = GroupView(
        group_id(obj),
        status["state"],
        status.get("protocolType") or "",
        status.get("protocol") or "",
        members,
        generation=-1 if generation is None else int(generation),
        leader=status.get("leader") or "",
        group_type=status.get("groupType") or "classic",
        assignment_epoch=status.get("assignmentEpoch"),
    )
    offsets = status.get("offsets") or []
    committed: dict[TP, Committed] = {
        (o["topic"], o["partition"]): Committed(o["offset"]) for o in offsets
    }
    ends = {(o["topic"], o["partition"]): o["logEndOffset"] for o in offsets
            if o.get("logEndOffset") is not None}  # fmt: skip
    return desc.Described(coordinator_node(status.get("coordinator")), view, committed, ends)


def _partitions(listed: Any) -> dict[str, tuple[int, ...]]:
    return {a["topic"]: tuple(a["partitions"]) for a in listed or []}


def describe_notes(obj: Mapping[str, Any]) -> list[str]:
    """What a reader of a table built from status should know: it is as last seen."""
    status = obj.get("status") or {}
    name = obj["metadata"]["name"]
    notes = []
    ready = condition(obj, "Ready")
    if ready.get("reason") == "CoordinatorUnreachable":
        notes.append(f"Warning: the status of '{name}' is as last seen: {ready.get('message')}")
    if status.get("membersTruncated"):
        notes.append(f"Warning: the status lists {len(status.get('members') or [])} of "
                     f"{status.get('memberCount')} members")  # fmt: skip
    if status.get("offsetsTruncated"):
        notes.append("Warning: the status lists only part of the committed offsets")
    pending = ((obj["metadata"].get("annotations")) or {}).get(ANNOTATION)
    if pending:
        notes.append(f"An offset request is pending on '{name}': {pending}")
    return notes


def describe_json(obj: Mapping[str, Any], d: desc.Described | None) -> dict[str, Any]:
    """`describe -o json|yaml`: `kgroups group describe -o json`'s object for the group,
    with the resource's name, readiness and offset requests."""
    status = obj.get("status") or {}
    ready = condition(obj, "Ready")
    out: dict[str, Any] = {
        "namespace": obj["metadata"].get("namespace"),
        "name": obj["metadata"]["name"],
        **(desc.to_json(d) if d is not None else {"group": group_id(obj), "state": None}),
        "lag": status.get("lag"),
        "ready": {k: ready.get(k) for k in ("status", "reason", "message")},
        "offsetRequests": list(status.get("offsetRequests") or []),
    }
    pending = (obj["metadata"].get("annotations") or {}).get(ANNOTATION)
    if pending:
        out["pendingOffsetRequest"] = pending
    return out


def _scope(record: Mapping[str, Any]) -> str:
    if record.get("allTopics"):
        return "all-topics"
    return ";".join(record.get("topics") or []) or MISSING


def _scenario(record: Mapping[str, Any]) -> str:
    scenario = record.get("scenario")
    if scenario is None:
        return MISSING
    argument = record.get("argument")
    return scenario if argument is None else f"{scenario}={argument}"


def requests_table(records: Sequence[Mapping[str, Any]]) -> str | None:
    """`describe --requests`: the recorded offset requests, newest first."""
    if not records:
        return None
    columns = [
        Column("ID", 36), Column("ACTION", 14), Column("SCENARIO", 12), Column("SCOPE", 10),
        Column("DRY-RUN", 7), Column("RESULT", 9), Column("REQUESTED-BY"),
        Column("REQUESTED-AT", 24), Column("COMPLETED-AT", 24), Column("PARTITIONS", 10),
        Column("MESSAGE"),
    ]  # fmt: skip
    rows = [
        [
            r.get("id"), r.get("action"), _scenario(r), _scope(r),
            {True: "yes", False: "no"}.get(r.get("dryRun"), MISSING),
            r.get("result"), r.get("requestedBy"), r.get("requestedAt"), r.get("completedAt"),
            r.get("partitions"), str(r.get("message") or MISSING).splitlines()[0],
        ]
        for r in reversed(records)
    ]  # fmt: skip
    return render(columns, rows)


# --- reset-offsets, delete-offsets ----------------------------------------------------------


def reset_table(group: str, record: Mapping[str, Any], *, wide: bool) -> str | None:
    """Kafka's GROUP TOPIC PARTITION NEW-OFFSET (what was written, or planned on a dry
    run); -o wide adds the offset before."""
    entries = [e for e in record.get("plan") or [] if e.get("newOffset") is not None]
    if not entries:
        return None
    columns = [Column("GROUP"), Column("TOPIC"), Column("PARTITION", 10), Column("NEW-OFFSET")]
    if wide:
        columns.append(Column("PREVIOUS-OFFSET"))
    rows = [
        [group, e["topic"], e["partition"], e["newOffset"],
         *([e.get("previousOffset")] if wide else [])]
        for e in entries
    ]  # fmt: skip
    return render(columns, rows)


def delete_offsets_table(record: Mapping[str, Any]) -> str:
    """Kafka's TOPIC PARTITION STATUS after delete-offsets."""
    rows = [
        [e["topic"], MISSING if e.get("partition") is None else e["partition"],
         f"Error: {e['error']}" if e.get("error") else "Successful"]
        for e in record.get("plan") or []
    ]  # fmt: skip
    return render([Column("TOPIC"), Column("PARTITION", 10), Column("STATUS")], rows)


def error_lines(record: Mapping[str, Any]) -> list[str]:
    """A refused or failed request's message, as Kafka's error lines."""
    return [f"Error: {line}" for line in str(record.get("message") or "").splitlines() if line]


def truncated_note(record: Mapping[str, Any]) -> str | None:
    listed, total = len(record.get("plan") or []), record.get("partitions")
    if isinstance(total, int) and total > listed:
        return f"Note: the record lists {listed} of {total} partitions"
    return None
