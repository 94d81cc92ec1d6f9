"""How a group's snapshot is written as text: JSON, bytes as base64.

Both stores keep a group as JSON: readable with `sqlite3` or `psql`, and versioned by the
store's schema version so a later release can migrate it. A classic group is one
document; a consumer-protocol group is one document in PostgreSQL, and in SQLite a head
(`encode_consumer_head`) with a row per member (`member_json`), so that a heartbeat
that changed one member of a thousand writes that member, as Kafka appends one record.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kgroups.coordinator.core.msg_group import Protocol
from kgroups.coordinator.core.records import (
    ConsumerGroupValue,
    ConsumerMemberValue,
    GroupValue,
    MemberValue,
)
from kgroups.coordinator.core.states import GroupState


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def encode_group(value: GroupValue | ConsumerGroupValue) -> str:
    if isinstance(value, ConsumerGroupValue):
        return _encode_consumer_group(value)
    return json.dumps(
        {
            "generation": value.generation_id,
            "state": value.state.value,
            "state_ms": value.state_timestamp_ms,
            "protocol_type": value.protocol_type,
            "protocol": value.protocol_name,
            "leader": value.leader_id,
            **({"owner": value.owner} if value.owner is not None else {}),
            "members": [
                {
                    "id": m.member_id,
                    "instance": m.group_instance_id,
                    "client": m.client_id,
                    "host": m.client_host,
                    "rebalance_ms": m.rebalance_timeout_ms,
                    "session_ms": m.session_timeout_ms,
                    "protocols": [[p.name, _b64(p.metadata)] for p in m.protocols],
                    "assignment": _b64(m.assignment),
                }
                for m in value.members
            ],
        },
        separators=(",", ":"),
    )


def decode_group(
    text: str, member_rows: list[str] | None = None
) -> GroupValue | ConsumerGroupValue:
    """A group from its document; a consumer group's head (`encode_consumer_head`) takes
    its members from `member_rows`, in order."""
    raw: dict[str, Any] = json.loads(text)
    if raw.get("type") == CONSUMER_TYPE:
        if raw.get(MEMBER_ROWS):
            raw["members"] = [json.loads(row) for row in member_rows or ()]
        return _decode_consumer_group(raw)
    return GroupValue(
        generation_id=raw["generation"],
        state=GroupState(raw["state"]),
        state_timestamp_ms=raw["state_ms"],
        protocol_type=raw["protocol_type"],
        protocol_name=raw["protocol"],
        leader_id=raw["leader"],
        members=tuple(
            MemberValue(
                member_id=m["id"],
                group_instance_id=m["instance"],
                client_id=m["client"],
                client_host=m["host"],
                rebalance_timeout_ms=m["rebalance_ms"],
                session_timeout_ms=m["session_ms"],
                protocols=tuple(Protocol(n, _unb64(md)) for n, md in m["protocols"]),
                assignment=_unb64(m["assignment"]),
            )
            for m in raw["members"]
        ),
        owner=raw.get("owner"),
    )


CONSUMER_TYPE = "consumer"
"""The `type` of a consumer-protocol group's document (a classic group's has none)."""


_MEMBER_JSON: dict[int, tuple[ConsumerMemberValue, str]] = {}
"""A member's JSON by the identity of its (immutable, cached by the core) value: a group
of a thousand members written after one member's heartbeat encodes that member only."""
_MEMBER_JSON_MAX = 50_000


MEMBER_ROWS = "member_rows"
"""A consumer group's head says so when its members are rows of their own."""


def _head(value: ConsumerGroupValue, **more: object) -> str:
    return json.dumps(
        {
            "type": CONSUMER_TYPE,
            "epoch": value.group_epoch,
            "assignment_epoch": value.assignment_epoch,
            "assignment_ms": value.assignment_timestamp_ms,
            "metadata_hash": value.metadata_hash,
            **({"owner": value.owner} if value.owner is not None else {}),
            **more,
        },
        separators=(",", ":"),
    )


def encode_consumer_head(value: ConsumerGroupValue) -> str:
    """A consumer group's document without its members (each a row: `member_json`)."""
    return _head(value, **{MEMBER_ROWS: True})


def _encode_consumer_group(value: ConsumerGroupValue) -> str:
    members = ",".join(member_json(m) for m in value.members)
    return f'{_head(value)[:-1]},"members":[{members}]}}'


def member_json(m: ConsumerMemberValue) -> str:
    """A consumer group member's document (cached by the value's identity)."""
    cached = _MEMBER_JSON.get(id(m))
    if cached is not None and cached[0] is m:
        return cached[1]
    if len(_MEMBER_JSON) >= _MEMBER_JSON_MAX:
        _MEMBER_JSON.clear()
    text = json.dumps(
        {
            "id": m.member_id,
            "instance": m.instance_id,
            "rack": m.rack_id,
            "client": m.client_id,
            "host": m.client_host,
            "topics": list(m.subscribed_topic_names),
            "regex": m.subscribed_topic_regex,
            "rebalance_ms": m.rebalance_timeout_ms,
            "assignor": m.server_assignor,
            "epoch": m.epoch,
            "previous_epoch": m.previous_epoch,
            "state": m.state,
            "assigned": [[t, [list(pe) for pe in ps]] for t, ps in m.assigned],
            "revoking": [[t, [list(pe) for pe in ps]] for t, ps in m.revoking],
            "target": [[t, list(ps)] for t, ps in m.target],
            **(
                {}
                if m.classic_session_timeout_ms is None
                else {
                    "classic": {
                        "session_ms": m.classic_session_timeout_ms,
                        "protocols": [[p.name, _b64(p.metadata)] for p in m.classic_protocols],
                    }
                }
            ),
        },
        separators=(",", ":"),
    )
    _MEMBER_JSON[id(m)] = (m, text)
    return text


def _epochs(raw: list[Any]) -> tuple[tuple[str, tuple[tuple[int, int], ...]], ...]:
    return tuple((t, tuple((int(p), int(e)) for p, e in ps)) for t, ps in raw)


def _classic(raw: dict[str, Any] | None) -> dict[str, Any]:
    """A classic member's fields of a consumer group's member (none for the others)."""
    if raw is None:
        return {}
    protocols = tuple(Protocol(n, _unb64(md)) for n, md in raw["protocols"])
    return {"classic_session_timeout_ms": raw["session_ms"], "classic_protocols": protocols}


def _decode_consumer_group(raw: dict[str, Any]) -> ConsumerGroupValue:
    return ConsumerGroupValue(
        group_epoch=raw["epoch"],
        assignment_epoch=raw["assignment_epoch"],
        assignment_timestamp_ms=raw["assignment_ms"],
        metadata_hash=raw.get("metadata_hash", 0),
        owner=raw.get("owner"),
        members=tuple(
            ConsumerMemberValue(
                member_id=m["id"],
                instance_id=m["instance"],
                rack_id=m["rack"],
                client_id=m["client"],
                client_host=m["host"],
                subscribed_topic_names=tuple(m["topics"]),
                subscribed_topic_regex=m["regex"],
                rebalance_timeout_ms=m["rebalance_ms"],
                server_assignor=m["assignor"],
                epoch=m["epoch"],
                previous_epoch=m["previous_epoch"],
                state=m["state"],
                assigned=_epochs(m["assigned"]),
                revoking=_epochs(m["revoking"]),
                target=tuple((t, tuple(int(p) for p in ps)) for t, ps in m["target"]),
                **_classic(m.get("classic")),
            )
            for m in raw["members"]
        ),
    )


def encode_pairs(pairs: tuple[tuple[str, object], ...]) -> str:
    """Config overrides (a group's or a topic's) as JSON `[[name, value], ...]`."""
    return json.dumps([list(kv) for kv in pairs])


def decode_group_configs(text: str) -> tuple[tuple[str, int], ...]:
    return tuple((k, int(v)) for k, v in json.loads(text))


def decode_topic_configs(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in json.loads(text))
