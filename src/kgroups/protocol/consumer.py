"""The embedded consumer protocol: what group members put in JoinGroup and SyncGroup.

`ConsumerProtocolSubscription` (v0-v3) and `ConsumerProtocolAssignment` (v0-v3) are
encoded with kio's generated classes behind an int16 version prefix, following Java's
`ConsumerProtocol` byte for byte: subscription topics are sorted, owned partitions are
sorted by (topic, partition) and grouped by topic, assignments group partitions by topic
in first-seen order, a newer version than we know is parsed as the newest we know (new
versions only append fields), and an empty rack id means none.

Two assignor user-data formats sit inside the subscription's user data; they are not
Kafka messages, so they are small hand-written structs, again byte for byte as Java
writes them: the StickyAssignor's previous assignment and generation (no version prefix;
the v0 layout has no generation), and the CooperativeStickyAssignor's generation.

The coordinator itself only ever reads the topics of the v0 prefix (`subscription_topics`).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.consumer_protocol_assignment import v0 as a0
from kio.schema.consumer_protocol_assignment import v1 as a1
from kio.schema.consumer_protocol_assignment import v2 as a2
from kio.schema.consumer_protocol_assignment import v3 as a3
from kio.schema.consumer_protocol_subscription import v0 as s0
from kio.schema.consumer_protocol_subscription import v1 as s1
from kio.schema.consumer_protocol_subscription import v2 as s2
from kio.schema.consumer_protocol_subscription import v3 as s3

from kgroups.protocol.build import build
from kgroups.protocol.frames import writer_for
from kgroups.protocol.groups import NO_GENERATION
from kgroups.protocol.tags import read_entity

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_SUBSCRIPTIONS: tuple[type, ...] = (
    s0.ConsumerProtocolSubscription,
    s1.ConsumerProtocolSubscription,
    s2.ConsumerProtocolSubscription,
    s3.ConsumerProtocolSubscription,
)
_ASSIGNMENTS: tuple[type, ...] = (
    a0.ConsumerProtocolAssignment,
    a1.ConsumerProtocolAssignment,
    a2.ConsumerProtocolAssignment,
    a3.ConsumerProtocolAssignment,
)

Partitions = Mapping[str, Sequence[int]]
"""Partitions by topic: {"orders": [0, 3]}."""


class ConsumerProtocolError(ValueError):
    """Bytes that are not a consumer protocol message (Java's SchemaException)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member asks for: topics, and since v1 what it owns (KIP-429), since v2 the
    generation of that ownership (KIP-792), since v3 its rack (KIP-881)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    generation: int = NO_GENERATION
    rack: str | None = None
    version: int = SUBSCRIPTION_VERSION


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader hands a member: partitions by topic, plus assignor user data."""

    partitions: Mapping[str, tuple[int, ...]]
    user_data: bytes | None = None
    version: int = ASSIGNMENT_VERSION


def _check_version(version: int) -> int:
    if version < 0:
        raise ConsumerProtocolError(f"negative consumer protocol version {version}")
    return min(version, SUBSCRIPTION_VERSION)


def _prefixed(version: int, entity: Any) -> bytes:
    out = io.BytesIO()
    out.write(_I16.pack(version))
    writer_for(type(entity))(out, entity)
    return out.getvalue()


def _read(classes: tuple[type, ...], data: bytes) -> tuple[int, Any]:
    if len(data) < 2:
        raise ConsumerProtocolError("consumer protocol message shorter than its version")
    (version,) = _I16.unpack_from(data, 0)
    cls = classes[_check_version(version)]
    try:
        entity = read_entity(cls, memoryview(data), 2)
    except Exception as exc:  # kio raises various types on truncated or invalid input
        raise ConsumerProtocolError(f"cannot parse consumer protocol v{version}: {exc}") from exc
    return version, entity


def encode_subscription(sub: Subscription) -> bytes:
    version = _check_version(sub.version)
    owned = [
        {"topic": topic, "partitions": sorted(partitions)}
        for topic, partitions in sorted(sub.owned.items())
        if partitions
    ]
    entity: Any = build(
        _SUBSCRIPTIONS[version],
        {
            "topics": sorted(sub.topics),
            "user_data": sub.user_data,
            "owned_partitions": owned,
            "generation_id": sub.generation,
            "rack_id": sub.rack,
        },
    )
    return _prefixed(version, entity)


def decode_subscription(data: bytes) -> Subscription:
    version, entity = _read(_SUBSCRIPTIONS, data)
    owned: dict[str, tuple[int, ...]] = {}
    for tp in getattr(entity, "owned_partitions", ()) or ():
        owned[tp.topic] = owned.get(tp.topic, ()) + tuple(tp.partitions)
    rack = getattr(entity, "rack_id", None) or None
    return Subscription(
        topics=tuple(entity.topics or ()),
        user_data=entity.user_data,
        owned=owned,
        generation=getattr(entity, "generation_id", NO_GENERATION),
        rack=rack,
        version=version,
    )


def encode_assignment(assignment: Assignment) -> bytes:
    version = _check_version(assignment.version)
    entity: Any = build(
        _ASSIGNMENTS[version],
        {
            "assigned_partitions": [
                {"topic": topic, "partitions": list(partitions)}
                for topic, partitions in assignment.partitions.items()
            ],
            "user_data": assignment.user_data,
        },
    )
    return _prefixed(version, entity)


def decode_assignment(data: bytes) -> Assignment:
    """An assignment; empty bytes (a member the leader left out) is an empty assignment."""
    if not data:
        return Assignment({}, None, 0)
    version, entity = _read(_ASSIGNMENTS, data)
    partitions: dict[str, tuple[int, ...]] = {}
    for tp in entity.assigned_partitions or ():
        partitions[tp.topic] = partitions.get(tp.topic, ()) + tuple(tp.partitions)
    return Assignment(partitions, entity.user_data, version)


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics listed in a ConsumerProtocolSubscription; ValueError if it does not parse.

    The coordinator reads only the v0 prefix, as Kafka does, so that a member speaking a
    version newer than ours is still understood.
    """
    view = memoryview(metadata)
    try:
        (version,) = _I16.unpack_from(view, 0)
        if version < 0:
            raise ValueError(f"negative consumer protocol version {version}")
        (count,) = _I32.unpack_from(view, 2)
        if count < 0 or count > len(view):
            raise ValueError(f"bad topic count {count}")
        offset = 6
        topics: list[str] = []
        for _ in range(count):
            (length,) = _I16.unpack_from(view, offset)
            offset += 2
            if length < 0 or offset + length > len(view):
                raise ValueError("truncated topic name")
            topics.append(bytes(view[offset : offset + length]).decode("utf-8"))
            offset += length
    except struct.error as exc:
        raise ValueError(f"truncated consumer protocol subscription: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"topic name is not UTF-8: {exc}") from exc
    return topics


# -- assignor user data ------------------------------------------------------------------


def encode_sticky_user_data(partitions: Partitions, generation: int | None) -> bytes:
    """Java StickyAssignor user data (V1): previous_assignment [topic, [partition]] and
    generation. Java iterates a HashMap of topics; we write topics sorted."""
    out = bytearray()
    topics = [(t, ps) for t, ps in sorted(partitions.items()) if ps]
    out += _I32.pack(len(topics))
    for topic, ps in topics:
        raw = topic.encode()
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(ps))
        for p in ps:
            out += _I32.pack(p)
    if generation is not None:
        out += _I32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> tuple[dict[str, tuple[int, ...]], int | None]:
    """(previous assignment, generation) from StickyAssignor user data.

    Java's V1 (with generation) first, then V0 (without), as Java tries them; then
    kafka-python's layout (the same fields behind an int16 version, which Java cannot
    read), so a kgroups leader keeps kafka-python sticky members sticky. Anything else is
    "nothing owned, generation -1", Java's answer to unparseable data; no user data at
    all is nothing owned and no generation.
    """
    if not data:
        return {}, None
    attempts = ((0, True), (0, False), (2, True), (2, False))
    for start, with_generation in attempts:
        try:
            return _read_sticky(data, start, with_generation=with_generation)
        except (struct.error, UnicodeDecodeError, ValueError):
            continue
    return {}, NO_GENERATION


def _read_sticky(
    data: bytes, start: int, *, with_generation: bool
) -> tuple[dict[str, tuple[int, ...]], int | None]:
    if start:
        (version,) = _I16.unpack_from(data, 0)
        if version != (1 if with_generation else 0):
            raise ValueError("not kafka-python sticky user data")
    (count,) = _I32.unpack_from(data, start)
    if count < 0 or count > len(data):
        raise ValueError("bad topic count")
    offset = start + 4
    owned: dict[str, tuple[int, ...]] = {}
    for _ in range(count):
        (length,) = _I16.unpack_from(data, offset)
        offset += 2
        if length < 0 or offset + length > len(data):
            raise ValueError("bad topic")
        topic = data[offset : offset + length].decode("utf-8")
        offset += length
        (n,) = _I32.unpack_from(data, offset)
        offset += 4
        if n < 0 or offset + 4 * n > len(data):
            raise ValueError("bad partition count")
        owned[topic] = owned.get(topic, ()) + struct.unpack_from(f">{n}i", data, offset)
        offset += 4 * n
    generation = None
    if with_generation:
        (generation,) = _I32.unpack_from(data, offset)
        offset += 4
    if offset != len(data):
        raise ValueError("trailing bytes")
    return owned, generation


def encode_cooperative_user_data(generation: int) -> bytes:
    """Java CooperativeStickyAssignor user data: one int32 generation."""
    return _I32.pack(generation)


def decode_cooperative_user_data(data: bytes | None) -> int | None:
    """The generation in CooperativeStickyAssignor user data (None when absent, -1 when
    unreadable, as Java decides)."""
    if data is None:
        return None
    if len(data) < 4:
        return NO_GENERATION
    return int(_I32.unpack_from(data, 0)[0])


def partitions_by_topic(pairs: Iterable[tuple[str, int]]) -> dict[str, tuple[int, ...]]:
    """[("t", 1), ("t", 0)] -> {"t": (0, 1)}, topics in first-seen order, partitions sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, []).append(partition)
    return {topic: tuple(sorted(ps)) for topic, ps in grouped.items()}
