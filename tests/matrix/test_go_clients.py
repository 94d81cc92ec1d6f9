"""Go clients as peers: franz-go (kgo + kadm) and IBM/sarama, each its own process.

The programs live in tools/peers/go and are built from the Go module proxy by its
build.sh into ~/.cache/kgroups (once per source digest). The members speak member.py's
protocol; the admin programs answer the same verbs with the same JSON, so each admin
check runs against both libraries. After every step the members' own reports must cover
the partitions exactly once in one generation, and no generation may hand a partition
to two members.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kgroups.admin import Admin
from tests.integration.harness import (
    GO_CLIENTS,
    STATIC_SESSION_MS,
    Coordinator,
    Member,
    assert_idle,
    create_topic,
    go_peers,
    no_overlap_per_generation,
    wait_converged,
    wait_until,
)

SESSION_MS = 6000
"""Short enough that a killed member's partitions move quickly; 3 s lapsed once on a loaded
machine (two sarama members expired together between a commit and a describe)."""
CONVERGE_S = 30
TP = tuple[str, int]


@pytest.fixture(scope="module", autouse=True)
def built() -> Path:
    """Build (or find) the Go peers before any test starts its clock."""
    return go_peers()


def start(members: list[Member], client: str, coordinator: Coordinator, group: str,
          topics: list[str], name: str, **kw: Any) -> Member:  # fmt: skip
    kw.setdefault("session_timeout_ms", STATIC_SESSION_MS if "instance_id" in kw else SESSION_MS)
    m = Member(client, coordinator.bootstrap, group, topics, client_id=name, **kw)
    members.append(m)
    return m


def settled(live: list[Member], partitions: set[TP], started: list[Member],
            timeout: float = CONVERGE_S) -> int:  # fmt: skip
    """After a step: the live members cover the partitions exactly once in one generation
    (returned), and no generation ever gave a partition to two of the members started."""
    generation = wait_converged(live, partitions, timeout)
    no_overlap_per_generation(started)
    return generation


def tps(partitions: list[list[Any]]) -> set[TP]:
    """A reported [["t", 0], ...] as a set of pairs."""
    return {(t, p) for t, p in partitions}


def owned(m: Member) -> set[TP]:
    assert m.assignment is not None, m.name
    return tps(m.assignment["partitions"])


def committed(coordinator: Coordinator, group: str) -> dict[TP, int]:
    """The group's offsets as kgroups' own admin reads them (OffsetFetch v8)."""

    async def read() -> dict[TP, int]:
        async with Admin("127.0.0.1", coordinator.port) as admin:
            return await admin.committed_offsets(group)

    return asyncio.run(read())


def admin(client: str, coordinator: Coordinator, *args: str) -> tuple[int, Any, str]:
    """Run `<client>-admin`: exit status, its JSON (None if it printed none), stderr."""
    done = subprocess.run(
        [str(go_peers() / f"{client}-admin"), "--bootstrap", coordinator.bootstrap, *args],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    out = done.stdout.strip()
    return done.returncode, json.loads(out) if out else None, done.stderr


def ok(client: str, coordinator: Coordinator, *args: str) -> Any:
    code, out, err = admin(client, coordinator, *args)
    assert code == 0, f"{client}-admin {' '.join(args)} failed ({code}): {err}"
    return out


def refused(client: str, coordinator: Coordinator, error: str, *args: str) -> Any:
    """The verb fails with Kafka's `error` (exit status 1, the name on stderr)."""
    code, out, err = admin(client, coordinator, *args)
    assert code == 1 and error in err, f"{client}-admin {' '.join(args)}: {code} {out} {err}"
    return out


# --- members -------------------------------------------------------------------------------


ASSIGNORS = [
    pytest.param(client, strategy, id=f"{client}-{strategy}")
    for client in GO_CLIENTS
    for strategy in ("range", "roundrobin", "sticky", "cooperative-sticky")
]


@pytest.mark.parametrize(("client", "strategy"), ASSIGNORS)
def test_a_group_forms_grows_and_shrinks_with_each_assignor(
    coordinator: Coordinator, members: list[Member], client: str, strategy: str
) -> None:
    partitions = create_topic(coordinator, "a", 5) | create_topic(coordinator, "b", 3)
    first = [start(members, client, coordinator, "g", ["a", "b"], f"m{i}", strategy=strategy)
             for i in range(2)]  # fmt: skip
    gen = settled(first, partitions, members)
    kept = {m.name: owned(m) for m in first}

    newcomer = start(members, client, coordinator, "g", ["a", "b"], "m2", strategy=strategy)
    everyone = [*first, newcomer]
    grown = settled(everyone, partitions, members)
    assert grown > gen
    assert all(owned(m) for m in everyone)  # 8 partitions, 3 members: nobody idle
    # franz-go's eager sticky balancer is not sticky: kgo clears its last assignment when
    # an eager session ends, before the rejoin, so its JoinGroup's sticky user data
    # names no partitions (seen in DescribeGroups' member metadata: an empty
    # CurrentAssignment with the old generation). Its leader then plans from nothing.
    if strategy == "cooperative-sticky" or (strategy, client) == ("sticky", "sarama"):
        for m in first:  # sticky: an old member only gives partitions up
            assert len(owned(m) & kept[m.name]) >= len(owned(m)) - 1, (m.name, m.events)
    if strategy == "cooperative-sticky":
        # KIP-429: only what moves is revoked, never a whole assignment; it takes two
        # generations (revoke, then assign), so the final one is at least two on.
        for m in first:
            revoked = [tps(e["partitions"]) for e in m.events
                       if e["event"] == "revoked"]  # fmt: skip
            assert revoked and all(r < kept[m.name] for r in revoked), (m.name, m.events)
        assert grown >= gen + 2
        assert_idle(everyone, seconds=2)  # sarama's member polls while a sync is pending
    else:
        for m in first:  # eager: everything was revoked before the rejoin
            assert any(tps(e["partitions"]) == kept[m.name]
                       for e in m.events if e["event"] == "revoked"), m.events  # fmt: skip

    first[0].close()
    assert first[0].events[-1]["event"] == "closed"
    assert settled([first[1], newcomer], partitions, members) > grown


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_dynamic_and_static_members_commit_die_and_come_back(
    coordinator: Coordinator, members: list[Member], client: str
) -> None:
    partitions = create_topic(coordinator, "orders", 6)
    # The static member starts first, so it leads: a static leader's return without a
    # rebalance is the case KIP-345 (and JoinGroup v9's SkipAssignment) is careful about.
    static = start(members, client, coordinator, "g", ["orders"], "static", instance_id="s-1")
    wait_until(lambda: static.assignment, CONVERGE_S, "the static member's first assignment")
    dyn1 = start(members, client, coordinator, "g", ["orders"], "dyn1")
    dyn2 = start(members, client, coordinator, "g", ["orders"], "dyn2")
    live = [static, dyn1, dyn2]
    gen = settled(live, partitions, members)

    # A synchronous commit inside the generation reads back through kgroups' own admin.
    dyn1.send("commit 11")
    done = dyn1.wait_event("committed")
    assert tps(done["partitions"]) == owned(dyn1)
    assert dict.fromkeys(owned(dyn1), 11).items() <= committed(coordinator, "g").items()

    # SIGKILL: no LeaveGroup; after its session timeout the others take its partitions.
    dyn2.kill()
    live.remove(dyn2)
    after_kill = settled(live, partitions, members, SESSION_MS / 1000 + CONVERGE_S)
    assert after_kill > gen

    # The static member killed and back within its session timeout under the same
    # instance id: same generation, same partitions, nobody else rebalances.
    before = static.assignment
    assert before is not None
    static.kill()
    again = start(members, client, coordinator, "g", ["orders"], "static", instance_id="s-1")
    live = [again, dyn1]
    back = again.wait_event("assigned", timeout=CONVERGE_S)
    assert (back["generation"], back["partitions"]) == (after_kill, before["partitions"])
    assert settled(live, partitions, members) == after_kill
    assert_idle(live, seconds=3)
    assert settled(live, partitions, members, 1) == after_kill  # still no rebalance

    # A clean close: LeaveGroup, and the static member takes everything.
    dyn1.close()
    assert dyn1.events[-1]["event"] == "closed"
    assert settled([again], partitions, members) > after_kill


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_a_paused_member_is_expelled_and_rejoins_as_a_new_member(
    coordinator: Coordinator, members: list[Member], client: str
) -> None:
    """SIGSTOP past the session timeout: the coordinator expels the member, the other
    takes everything; on SIGCONT the member learns it is gone (UNKNOWN_MEMBER_ID), drops
    its partitions as lost and joins again under a new member id."""
    partitions = create_topic(coordinator, "t", 4)
    keep = start(members, client, coordinator, "g", ["t"], "keep")
    paused = start(members, client, coordinator, "g", ["t"], "paused")
    gen = settled([keep, paused], partitions, members)
    old_id = paused.assignment["member_id"]  # type: ignore[index]

    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        expelled = settled([keep], partitions, members, SESSION_MS / 1000 + CONVERGE_S)
    finally:
        # Counted while it is still stopped: once woken it may report what it dropped
        # before this thread gets here (franz-go did, on a loaded machine).
        seen = len(paused.events)
        os.kill(paused.proc.pid, signal.SIGCONT)
    assert expelled > gen
    back = settled([keep, paused], partitions, members)
    assert back > expelled and paused.assignment["member_id"] != old_id  # type: ignore[index]
    dropped = {e["event"] for e in paused.events[seen:]} & {"lost", "revoked"}
    assert dropped == ({"lost"} if client == "franz-go" else {"revoked"}), paused.events


def test_go_and_python_members_share_a_range_group(
    coordinator: Coordinator, members: list[Member]
) -> None:
    """The range assignor is the same everywhere: whichever client leads, the others take
    its plan. Commits made by one client are the group's, read by the others."""
    partitions = create_topic(coordinator, "orders", 9) | create_topic(coordinator, "audit", 2)
    topics = ["orders", "audit"]
    franz = start(members, "franz-go", coordinator, "mixed", topics, "franz")
    sarama = start(members, "sarama", coordinator, "mixed", topics, "sarama")
    kp1 = start(members, "kafka-python", coordinator, "mixed", topics, "kp1")
    kp2 = start(members, "kafka-python", coordinator, "mixed", topics, "kp2", instance_id="kp-2")
    live = [franz, sarama, kp1, kp2]
    gen = settled(live, partitions, members, CONVERGE_S + 10)

    sarama.send("commit 5")
    franz.send("commit 6")
    expected = dict.fromkeys(tps(sarama.wait_event("committed")["partitions"]), 5)
    expected |= dict.fromkeys(tps(franz.wait_event("committed")["partitions"]), 6)
    assert committed(coordinator, "mixed") == expected
    fetched = ok("sarama", coordinator, "list-group-offsets", "mixed")["offsets"]
    assert {(t, p): o for t, p, o in fetched} == expected

    kp1.kill()
    live.remove(kp1)
    after_kill = settled(live, partitions, members, SESSION_MS / 1000 + CONVERGE_S)
    assert after_kill > gen
    franz.close()
    live.remove(franz)
    assert settled(live, partitions, members) > after_kill
    assert_idle(live, seconds=3)


def test_sarama_at_its_default_kafka_version(
    coordinator: Coordinator, members: list[Member], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sarama left at its default Kafka version (2.8) sends older request versions than
    the members above (configured as Kafka 4.0); it must work just the same."""
    monkeypatch.setenv("SARAMA_KAFKA_VERSION", "2.8.0")
    partitions = create_topic(coordinator, "t", 4)
    live = [start(members, "sarama", coordinator, "old", ["t"], f"s{i}") for i in range(2)]
    settled(live, partitions, members)
    live[0].send("commit 3")
    done = live[0].wait_event("committed")
    assert dict.fromkeys(tps(done["partitions"]), 3) == committed(coordinator, "old")
    group = ok("sarama", coordinator, "describe-groups", "old")["groups"][0]
    assert (group["state"], group["protocol"]) == ("Stable", "range")
    live[0].close()
    settled(live[1:], partitions, members)


# --- admin -----------------------------------------------------------------------------------


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_admin_topics(coordinator: Coordinator, client: str) -> None:
    assert ok(client, coordinator, "create-topic", "t", "3") == {"topic": "t", "partitions": 3}
    refused(client, coordinator, "TOPIC_ALREADY_EXISTS", "create-topic", "t", "3")
    refused(client, coordinator, "INVALID_PARTITIONS", "create-topic", "zero", "0")
    assert ok(client, coordinator, "list-topics") == {"topics": {"t": 3}}

    assert ok(client, coordinator, "create-partitions", "t", "5")["partitions"] == 5
    refused(client, coordinator, "INVALID_PARTITIONS", "create-partitions", "t", "2")
    refused(client, coordinator, "UNKNOWN_TOPIC_OR_PARTITION", "create-partitions", "nope", "2")

    described = refused(client, coordinator, "UNKNOWN_TOPIC_OR_PARTITION",
                        "describe-topics", "t", "nope")  # fmt: skip
    assert described["brokers"] == 1
    assert described["topics"]["t"] == {"partitions": 5, "error": None}
    assert described["topics"]["nope"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_admin_describes_topic_configs(coordinator: Coordinator, client: str) -> None:
    """DescribeConfigs for a TOPIC answers that topic's configs (Kafka's defaults for a
    topic created without any), and UNKNOWN_TOPIC_OR_PARTITION for no topic."""
    ok(client, coordinator, "create-topic", "plain", "1")
    configs = ok(client, coordinator, "describe-topic-configs", "plain")["configs"]
    assert configs["plain"]["cleanup.policy"] == "delete"
    assert configs["plain"]["retention.ms"] == "604800000"
    refused(client, coordinator, "UNKNOWN_TOPIC_OR_PARTITION", "describe-topic-configs", "nope")


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_admin_topic_configs_given_at_creation_are_described(
    coordinator: Coordinator, client: str
) -> None:
    """Kafka keeps the configs a topic is created with and describes them: a topic
    created compacted does not describe itself as cleanup.policy=delete."""
    ok(client, coordinator, "create-topic", "compacted", "1",
       "cleanup.policy=compact", "retention.ms=3600000")  # fmt: skip
    configs = ok(client, coordinator, "describe-topic-configs", "compacted")["configs"]
    assert configs["compacted"]["cleanup.policy"] == "compact"
    assert configs["compacted"]["retention.ms"] == "3600000"


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_admin_lists_describes_and_deletes_groups(
    coordinator: Coordinator, members: list[Member], client: str
) -> None:
    partitions = create_topic(coordinator, "t", 4)
    dyn = start(members, client, coordinator, "live", ["t"], "dyn")
    static = start(members, client, coordinator, "live", ["t"], "static", instance_id="s-1")
    settled([dyn, static], partitions, members)
    ok(client, coordinator, "alter-group-offsets", "idle", "t:0=1")  # an Empty group

    everything = ok(client, coordinator, "list-groups")["groups"]
    assert sorted(g["group"] for g in everything) == ["idle", "live"]
    stable = ok(client, coordinator, "list-groups", "--states", "Stable")["groups"]
    assert [(g["group"], g["state"], g["protocol_type"]) for g in stable] == [
        ("live", "Stable", "consumer")
    ]
    empty = ok(client, coordinator, "list-groups", "--states", "Empty")["groups"]
    assert [(g["group"], g["state"]) for g in empty] == [("idle", "Empty")]

    group = ok(client, coordinator, "describe-groups", "live")["groups"][0]
    assert (group["state"], group["protocol_type"], group["protocol"]) == (
        "Stable", "consumer", "range",
    )  # fmt: skip
    described = {m["client_id"]: m for m in group["members"]}
    assert described.keys() == {"dyn", "static"}
    assert described["static"]["instance_id"] == "s-1"
    assert described["dyn"]["instance_id"] is None
    for m in (dyn, static):
        assert tps(described[m.name]["assignment"]) == owned(m)
        assert described[m.name]["member_id"] == m.assignment["member_id"]  # type: ignore[index]

    refused(client, coordinator, "NON_EMPTY_GROUP", "delete-group", "live")

    # KIP-345: an admin removes a static member by instance id; it has to rejoin anew.
    refused(client, coordinator, "UNKNOWN_MEMBER_ID", "remove-members", "live", "nobody")
    seen = len(static.events)
    removed = ok(client, coordinator, "remove-members", "live", "s-1")
    assert removed == {"results": [["s-1", None]]}
    rejoined = static.wait_event("assigned", after=seen, timeout=CONVERGE_S)
    assert rejoined["member_id"] != described["static"]["member_id"]
    settled([dyn, static], partitions, members)

    ok(client, coordinator, "delete-group", "idle")
    refused(client, coordinator, "GROUP_ID_NOT_FOUND", "delete-group", "idle")
    assert [g["group"] for g in ok(client, coordinator, "list-groups")["groups"]] == ["live"]


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_admin_group_offsets(coordinator: Coordinator, members: list[Member], client: str) -> None:
    partitions = create_topic(coordinator, "t", 2)
    create_topic(coordinator, "other", 1)
    # Offsets set by an admin while the group is Empty (kafka-consumer-groups --reset-offsets).
    altered = ok(client, coordinator, "alter-group-offsets", "g", "t:0=4", "t:1=5", "other:0=9")
    assert altered == {"results": [["other", 0, None], ["t", 0, None], ["t", 1, None]]}
    assert ok(client, coordinator, "list-group-offsets", "g")["offsets"] == [
        ["other", 0, 9], ["t", 0, 4], ["t", 1, 5],
    ]  # fmt: skip

    member = start(members, client, coordinator, "g", ["t"], "m")
    settled([member], partitions, members)
    # An admin's commit (no generation, no member) into a live group: Kafka refuses it.
    refused(client, coordinator, "UNKNOWN_MEMBER_ID", "alter-group-offsets", "g", "t:0=1")
    member.send("commit 8")
    member.wait_event("committed")
    assert ok(client, coordinator, "list-group-offsets", "g")["offsets"] == [
        ["other", 0, 9], ["t", 0, 8], ["t", 1, 8],
    ]  # fmt: skip

    # OffsetDelete (API 47): not for a topic the live group subscribes to...
    out = refused(client, coordinator, "GROUP_SUBSCRIBED_TO_TOPIC",
                  "delete-group-offsets", "g", "t:0")  # fmt: skip
    assert out == {"results": [["t", 0, "GROUP_SUBSCRIBED_TO_TOPIC"]]}
    # ...but for one it does not, even while it is live.
    assert ok(client, coordinator, "delete-group-offsets", "g", "other:0") == {
        "results": [["other", 0, None]]
    }
    assert committed(coordinator, "g") == {("t", 0): 8, ("t", 1): 8}

    member.close()
    wait_until(lambda: ok(client, coordinator, "list-groups", "--states", "Empty")["groups"],
               CONVERGE_S, "the group to be Empty")  # fmt: skip
    assert ok(client, coordinator, "delete-group-offsets", "g", "t:0") == {
        "results": [["t", 0, None]]
    }
    assert ok(client, coordinator, "list-group-offsets", "g")["offsets"] == [["t", 1, 8]]
    ok(client, coordinator, "delete-group", "g")
    assert committed(coordinator, "g") == {}


@pytest.mark.parametrize("client", GO_CLIENTS)
def test_admin_end_offsets_are_the_highest_known(coordinator: Coordinator, client: str) -> None:
    """kgroups stores no records, so ListOffsets(latest) answers the highest offset it
    knows of: lag tools then see committed <= end, never a negative lag."""
    create_topic(coordinator, "t", 3)
    assert ok(client, coordinator, "list-end-offsets", "t")["offsets"] == [
        ["t", 0, 0], ["t", 1, 0], ["t", 2, 0],
    ]  # fmt: skip
    ok(client, coordinator, "alter-group-offsets", "a", "t:0=42", "t:1=7")
    ok(client, coordinator, "alter-group-offsets", "b", "t:0=10")
    assert ok(client, coordinator, "list-end-offsets", "t")["offsets"] == [
        ["t", 0, 42], ["t", 1, 7], ["t", 2, 0],
    ]  # fmt: skip
