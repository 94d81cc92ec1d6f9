"""The consumer protocol's server-side assignors (KIP-848): `uniform` and `range`.

Under the consumer protocol the coordinator computes the group's target assignment
itself, whenever the group epoch moves past the assignment's; members name the assignor
they prefer (`group.remote.assignor`), Kafka's default being `uniform`. Both work on topic
ids and partition counts, and are given each member's current *target* (not what it owns:
reconciliation takes care of that, `reconciliation.py`).

* `range`: Kafka's server-side range, not sticky. Members in order (static members first,
  by instance id, then the others by member id); for each topic its subscribers get
  contiguous ranges, the first `partitions % subscribers` of them one more. Members with
  the same subscription and topics with equal partition counts get co-partitioned ranges.
* `uniform`: balanced and sticky. With every member subscribing to the same topics, each
  keeps up to its share of its current target (`total // members`, one more for as many
  members as `total % members`, whoever already holds the extra) and the rest is dealt
  out to members below their share. Where members are equal (who of them gives up an
  extra partition, who of them gets one), the member the coordinator heard from longest
  ago comes first: its heartbeat is due soonest, so a partition moves a whole heartbeat
  interval sooner than when the choice falls on members at random, as it does in Kafka
  (a member joining a group of 1,000 gets its first partition 0.1 s after joining rather
  than 0.4; bench/consumer_protocol.py). Ties go by member id. With different
  subscriptions, balance comes before stickiness: each keeps its current target's
  partitions of topics it still subscribes to, the rest go topic by topic (the most
  partitions per subscriber first) to the least loaded subscriber, then partitions move
  from the most to the least loaded subscribers of a topic while that narrows the gap.

Subscribed topics that do not exist are ignored. Pure functions of plain data.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", str, uuid.UUID)
"""How topics are named: by id, as on the wire, or by name (hashed far faster than a
UUID, whose hash is computed in Python: a million of them cost a second)."""
Target = dict[K, tuple[int, ...]]
"""A member's share: topic -> its partitions, in order (tuples: a million one-partition
shares as sets cost several times as much to make)."""
TP = tuple[K, int]


@dataclass(frozen=True, slots=True)
class AssignmentMember(Generic[K]):
    member_id: str
    topics: frozenset[K]
    instance_id: str | None = None
    target: Mapping[K, Collection[int]] = field(default_factory=dict)
    """The member's current target (what stickiness keeps)."""
    heard_ms: int = 0
    """When the coordinator last heard from it (earlier: its next heartbeat comes sooner)."""


def _order(members: Sequence[AssignmentMember[K]]) -> list[AssignmentMember[K]]:
    return sorted(members, key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id))


def range_assignment(
    members: Sequence[AssignmentMember[K]], partitions: Mapping[K, int]
) -> dict[str, Target[K]]:
    out: dict[str, Target[K]] = {m.member_id: {} for m in members}
    ordered = _order(members)
    for topic, count in sorted(partitions.items()):
        subscribers = [m for m in ordered if topic in m.topics]
        if not subscribers or count <= 0:
            continue
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = quota + (1 if i < extra else 0)
            if n:
                out[m.member_id][topic] = tuple(range(start, start + n))
            start += n
    return out


def uniform_assignment(
    members: Sequence[AssignmentMember[K]], partitions: Mapping[K, int]
) -> dict[str, Target[K]]:
    ordered = sorted(members, key=lambda m: m.member_id)
    if not ordered:
        return {}
    if all(m.topics == ordered[0].topics for m in ordered):
        return _homogeneous(ordered, partitions)
    shares = _heterogeneous(ordered, partitions)
    return {m.member_id: _as_target(shares[m.member_id]) for m in ordered}


def _as_target(tps: Collection[TP[K]]) -> Target[K]:
    out: dict[K, set[int]] = {}
    for topic, p in tps:
        out.setdefault(topic, set()).add(p)
    return {t: tuple(sorted(ps)) for t, ps in out.items()}


def _valid(member: AssignmentMember[K], partitions: Mapping[K, int]) -> list[TP[K]]:
    """The member's current target within its subscription and the topics as they are."""
    return sorted(
        (t, p)
        for t, ps in member.target.items()
        if t in member.topics
        for p in ps
        if 0 <= p < partitions.get(t, 0)
    )


def _homogeneous(
    members: list[AssignmentMember[K]], partitions: Mapping[K, int]
) -> dict[str, Target[K]]:
    """Partitions as integers (a topic's first partition at its `base`), flags for what is
    taken: a million partitions take about a second, as the classic sticky assignor's."""
    topics = sorted(t for t in members[0].topics if partitions.get(t, 0) > 0)
    base: dict[K, int] = {}
    total = 0
    for t in topics:
        base[t] = total
        total += partitions[t]
    quota, extra = divmod(total, len(members))
    taken = bytearray(total)
    shares: dict[str, list[int]] = {}
    # Members are in id order; the sorts are stable. The extra partitions are kept by the
    # members heard from last, and dealt to those heard from first (due soonest).
    heard_last = sorted(members, key=lambda m: -m.heard_ms)
    members = sorted(members, key=lambda m: m.heard_ms)
    for m in heard_last:  # stickiness: each keeps up to its share of its current target
        keep: list[int] = []
        for t, ps in m.target.items():
            first = base.get(t)
            if first is None:
                continue
            count = partitions[t]
            for p in ps:
                if 0 <= p < count and not taken[first + p]:
                    keep.append(first + p)
        keep.sort()
        if len(keep) > quota:
            limit = quota + 1 if extra else quota
            extra -= 1 if extra else 0
            del keep[limit:]
        for g in keep:
            taken[g] = 1
        shares[m.member_id] = keep
    free = (g for g in range(total) if not taken[g])
    for m in members:  # then everyone up to the share
        share = shares[m.member_id]
        if len(share) < quota:
            share.extend(itertools.islice(free, quota - len(share)))
    for m in members:  # and the extra partitions to as many members as there are
        if not extra:
            break
        share = shares[m.member_id]
        if len(share) == quota:
            share.append(next(free))
            extra -= 1
    starts = [base[t] for t in topics]
    topic_of = list(itertools.chain.from_iterable(
        itertools.repeat(k, partitions[t]) for k, t in enumerate(topics)))  # fmt: skip
    out: dict[str, Target[K]] = {}
    for mid, share in shares.items():
        by_topic: dict[int, list[int]] = {}
        for g in share:
            k = topic_of[g]
            found = by_topic.get(k)
            if found is None:
                by_topic[k] = found = []
            found.append(g - starts[k])
        out[mid] = {topics[k]: tuple(ps) for k, ps in by_topic.items()}
    return out


def _heterogeneous(
    members: list[AssignmentMember[K]], partitions: Mapping[K, int]
) -> dict[str, list[TP[K]]]:
    subscribers: dict[K, list[str]] = {}
    for m in members:
        for t in m.topics:
            if partitions.get(t, 0) > 0:
                subscribers.setdefault(t, []).append(m.member_id)
    owner: dict[TP[K], str] = {}
    load = {m.member_id: 0 for m in members}
    for m in members:  # stickiness first: what it still subscribes to stays its
        for tp in _valid(m, partitions):
            if tp not in owner:
                owner[tp] = m.member_id
                load[m.member_id] += 1
    # The rest, topic by topic: the most partitions per subscriber first, then the
    # fewest subscribers, each partition to the least loaded subscriber.
    order = sorted(subscribers, key=lambda t: (-partitions[t] / len(subscribers[t]),
                                               len(subscribers[t]), t))  # fmt: skip
    for t in order:
        for p in range(partitions[t]):
            if (t, p) not in owner:
                chosen = min(subscribers[t], key=lambda mid: (load[mid], mid))
                owner[(t, p)] = chosen
                load[chosen] += 1
    # Balance: move a topic's partition from the most loaded subscriber holding one to
    # its least loaded subscriber while that narrows the gap between them (each move
    # lowers the sum of squared loads, so this ends).
    held: dict[tuple[K, str], list[int]] = {}
    for (t, p), mid in sorted(owner.items()):
        held.setdefault((t, mid), []).append(p)
    moved = True
    while moved:
        moved = False
        for t in order:
            subs = subscribers[t]
            holders = [mid for mid in subs if held.get((t, mid))]
            if len(subs) < 2 or not holders:
                continue
            heavy = max(holders, key=lambda mid: (load[mid], mid))
            light = min(subs, key=lambda mid: (load[mid], mid))
            if load[heavy] - load[light] <= 1:
                continue
            p = held[(t, heavy)].pop()
            held.setdefault((t, light), []).append(p)
            owner[(t, p)] = light
            load[heavy] -= 1
            load[light] += 1
            moved = True
    shares: dict[str, list[TP[K]]] = {m.member_id: [] for m in members}
    for tp, mid in owner.items():
        shares[mid].append(tp)
    return shares
