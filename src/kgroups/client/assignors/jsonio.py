"""`kgroups assign`'s JSON: a group as data in, the assignment as data out.

"What would the assignor do?" is the first question when a rebalance surprises someone,
so the input is the leader's view in the plainest form::

    {"topics": {"t": 3},
     "members": {"m1": {"topics": ["t"], "owned": {"t": [0]}, "generation": 1,
                        "instance_id": null, "rack": null}},
     "replicas": 2,
     "partition_racks": {"t": [["a"], ["b"], ["a", "b"]]}}

Only `topics` and each member's `topics` are required. Everything is checked up front and
a bad document is rejected with the path of the offending value (`members.m1.owned.t`),
never half-used. The output lists every member (empty when it got nothing), topics and
partitions sorted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgroups.client.assignors.spec import GroupAssignment, GroupSpec, MemberSpec
from kgroups.protocol.groups import NO_GENERATION


class SpecError(ValueError):
    """The JSON document does not describe a group; the message names the bad field."""


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise SpecError(f"{where}: must be at least {minimum}, got {value}")
    return value


def _optional_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise SpecError(f"{where}: expected a string or null, got {value!r}")


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where}: expected a list of strings")
    return list(value)


_TOP = {"topics", "members", "replicas", "partition_racks"}
_MEMBER = {"topics", "owned", "generation", "instance_id", "rack"}


def _unknown(doc: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(doc) - known)
    if extra:
        raise SpecError(f"{where}: unknown field(s) {', '.join(extra)}")


def _member(member_id: str, raw: Any) -> MemberSpec:
    where = f"members.{member_id}"
    doc = _object(raw, where)
    _unknown(doc, _MEMBER, where)
    if "topics" not in doc:
        raise SpecError(f"{where}.topics: required")
    topics = _str_list(doc["topics"], f"{where}.topics")
    owned: dict[str, tuple[int, ...]] = {}
    for topic, partitions in _object(doc.get("owned", {}), f"{where}.owned").items():
        at = f"{where}.owned.{topic}"
        if not isinstance(partitions, list):
            raise SpecError(f"{at}: expected a list of partitions")
        owned[topic] = tuple(
            sorted({_int(p, f"{at}[{i}]", minimum=0) for i, p in enumerate(partitions)})
        )
    generation = doc.get("generation", NO_GENERATION)
    return MemberSpec(
        member_id=member_id,
        topics=frozenset(topics),
        owned=owned,
        generation=_int(generation, f"{where}.generation", minimum=NO_GENERATION),
        instance_id=_optional_str(doc.get("instance_id"), f"{where}.instance_id"),
        rack=_optional_str(doc.get("rack"), f"{where}.rack"),
    )


def group_from_json(raw: Any) -> GroupSpec:
    """The `GroupSpec` a JSON document describes, or `SpecError`."""
    doc = _object(raw, "document")
    _unknown(doc, _TOP, "document")
    if "topics" not in doc:
        raise SpecError("topics: required (topic name -> partition count)")
    partitions = {
        topic: _int(count, f"topics.{topic}", minimum=0)
        for topic, count in _object(doc["topics"], "topics").items()
    }
    members = {
        member_id: _member(member_id, raw_member)
        for member_id, raw_member in _object(doc.get("members", {}), "members").items()
    }
    racks: dict[str, list[frozenset[str]]] = {}
    for topic, per_partition in _object(doc.get("partition_racks", {}), "partition_racks").items():
        at = f"partition_racks.{topic}"
        if topic not in partitions:
            raise SpecError(f"{at}: topic is not in topics")
        if not isinstance(per_partition, list) or len(per_partition) != partitions[topic]:
            raise SpecError(f"{at}: expected one list of racks per partition")
        racks[topic] = [frozenset(_str_list(r, f"{at}[{i}]")) for i, r in enumerate(per_partition)]
    replicas = _int(doc.get("replicas", 1), "replicas", minimum=1)
    return GroupSpec(members, partitions, racks, replicas)


def assignment_to_json(group: GroupSpec, assignment: GroupAssignment) -> dict[str, Any]:
    """`{"assignment": {member: {topic: [partitions]}}}`, everything sorted."""
    out: dict[str, dict[str, list[int]]] = {}
    for member_id in sorted(group.members):
        topics = assignment.get(member_id, {})
        out[member_id] = {t: sorted(ps) for t, ps in sorted(topics.items()) if ps}
    return {"assignment": out}
