"""How a group's snapshot is written as text: JSON, bytes as base64.

Both stores keep a group as one JSON document: readable with `sqlite3` or `psql`, and
versioned by the store's schema version so a later release can migrate it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kgroups.coordinator.core.msg_group import Protocol
from kgroups.coordinator.core.records import GroupValue, MemberValue
from kgroups.coordinator.core.states import GroupState


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def encode_group(value: GroupValue) -> str:
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


def decode_group(text: str) -> GroupValue:
    raw: dict[str, Any] = json.loads(text)
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


def encode_pairs(pairs: tuple[tuple[str, object], ...]) -> str:
    """Config overrides (a group's or a topic's) as JSON `[[name, value], ...]`."""
    return json.dumps([list(kv) for kv in pairs])


def decode_group_configs(text: str) -> tuple[tuple[str, int], ...]:
    return tuple((k, int(v)) for k, v in json.loads(text))


def decode_topic_configs(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in json.loads(text))
