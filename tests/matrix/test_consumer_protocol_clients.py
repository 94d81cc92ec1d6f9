"""Kafka 4's consumer protocol (KIP-848, `group.protocol=consumer`) with real clients.

Java 4.4 KafkaConsumers (tools/kafka/JavaMember.java), librdkafka (confluent-kafka 2.16)
and franz-go (v1.22, kgo.ServerSideBalancer) consumers send ConsumerGroupHeartbeat, receive
their partitions by topic id and reconcile one heartbeat at a time; the coordinator
computes the target assignment. These tests take a group through what a deployment
does: scale up, commit, scale down, a SIGKILLed member, a static member restarted, a
pattern subscription that picks up a new topic; after each step every partition is owned
by exactly one live member, the group is seen Stable with every member over time (not
once), and no partition was ever reported by two members at one epoch.

The coordinator runs with a 6-s session and a 500-ms heartbeat interval for consumer-
protocol members (`--consumer-session-timeout-ms`, `--consumer-heartbeat-interval-ms`;
Kafka's defaults are 45 s and 5 s, and the Java client refuses its own settings).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from typing import Any

import pytest
from kio.schema.consumer_group_describe.v1 import request as cgd_req
from kio.schema.consumer_group_describe.v1 import response as cgd_resp
from typer.testing import CliRunner

from kgroups import admin
from kgroups.admin.single import Admin
from kgroups.cli import app as cli
from kgroups.protocol.build import build
from tests.integration.harness import Coordinator, Member, commit_is_read_back, wait_until

CONSUMER = ("--group-protocol", "consumer")


def topic(coordinator: Coordinator, name: str, partitions: int) -> set[tuple[str, int]]:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, name, partitions))
    return {(name, p) for p in range(partitions)}


def holding(member: Member) -> dict[str, Any] | None:
    """What the member last said it holds and at which epoch: its latest `assigned` or
    `generation` event (each carries the whole assignment; "generation" is the member
    epoch), less what it revoked or lost since (librdkafka calls no assign callback after
    a revocation; Java does, with nothing added)."""
    state: dict[str, Any] | None = None
    for event in list(member.events):
        if event["event"] in ("assigned", "generation"):
            state = dict(event)
        elif event["event"] in ("revoked", "lost") and state is not None:
            gone = {tuple(p) for p in event["partitions"]}
            state["partitions"] = [p for p in state["partitions"] if tuple(p) not in gone]
    return state


def converged(members: Iterable[Member], partitions: set[tuple[str, int]]) -> int | None:
    """The epoch every member is at, if they all are at one and together hold
    `partitions` exactly once; None otherwise."""
    reports = [holding(m) for m in members]
    if any(r is None for r in reports):
        return None
    epochs = {r["generation"] for r in reports if r is not None}
    owned = [tuple(p) for r in reports if r is not None for p in r["partitions"]]
    if len(epochs) != 1 or len(owned) != len(set(owned)) or set(owned) != partitions:
        return None
    return epochs.pop()


def no_overlap_per_epoch(members: Iterable[Member]) -> None:
    """Across everything ever reported: no partition held by two members at one epoch."""
    members = list(members)
    owners: dict[tuple[int, tuple[str, int]], str] = {}
    for m in members:
        for event in m.events:
            if event["event"] not in ("assigned", "generation"):
                continue
            for p in event["partitions"]:
                key = (event["generation"], (p[0], p[1]))
                other = owners.setdefault(key, m.name)
                if other != m.name:
                    story = {x.name: [e for e in x.events if e["event"] != "committed"]
                             for x in members if x.name in (other, m.name)}  # fmt: skip
                    raise AssertionError(
                        f"{p} held by {other} and {m.name} at epoch {key[0]}: {story}"
                    )


def describe(coordinator: Coordinator, group: str) -> Any:
    async def ask() -> Any:
        async with Admin("127.0.0.1", coordinator.port) as client:
            body = build(cgd_req.ConsumerGroupDescribeRequest,
                         {"group_ids": [group], "include_authorized_operations": False})  # fmt: skip
            response = await client.request(body, cgd_resp.ConsumerGroupDescribeResponse)
            return response.groups[0]

    return asyncio.run(ask())


async def set_session(coordinator: Coordinator, group: str, ms: int) -> None:
    """The group's consumer-protocol session (Kafka's group config), before it exists."""
    async with Admin("127.0.0.1", coordinator.port) as client:
        await client.alter_group_configs(group, {"consumer.session.timeout.ms": ms})


def stays_stable(coordinator: Coordinator, group: str, members: int, seconds: float) -> None:
    """The group is Stable with `members` members, every one at the assignment epoch, at
    every look during `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        g = describe(coordinator, group)
        assert (g.group_state, len(g.members)) == ("Stable", members), g
        assert {m.member_epoch for m in g.members} == {g.assignment_epoch}, g
        time.sleep(0.3)


def test_java_consumers_scale_commit_fail_and_restart_under_the_consumer_protocol(
    coordinator: Coordinator, members: list[Member]
) -> None:
    partitions = topic(coordinator, "orders", 6)

    def start(name: str, **kw: Any) -> Member:
        m = Member("java", coordinator.bootstrap, "cg", ["orders"], client_id=name,
                   extra=CONSUMER, **kw)  # fmt: skip
        members.append(m)
        return m

    a, b = start("a"), start("b")
    live = [a, b]
    first = wait_until(lambda: converged(live, partitions), 60, "two consumers to converge")
    c = start("c")
    live.append(c)
    second = wait_until(lambda: converged(live, partitions), 60, "a third consumer's share")
    assert second > first
    stays_stable(coordinator, "cg", 3, 2.0)
    described = describe(coordinator, "cg")
    assert described.assignor_name == "uniform"
    assert {m.client_id for m in described.members} == {"a", "b", "c"}
    assert all(m.member_type == 1 for m in described.members)
    # `kgroups group describe` shows the epochs and each member's current and target.
    shown = CliRunner().invoke(cli, ["group", "describe", "--group", "cg", "--members",
                                     "-o", "json", "--bootstrap-server", coordinator.bootstrap])  # fmt: skip
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.output)
    view = view[0] if isinstance(view, list) else view
    assert (view["type"], view["group_epoch"]) == ("Consumer", described.group_epoch)
    reports = {m.name: holding(m) for m in (a, b, c)}
    for member in view["members"]:
        mine = reports[member["client_id"]]
        assert mine is not None
        assert member["member_epoch"] == mine["generation"] == view["assignment_epoch"]
        owned = {
            t: sorted(p for tt, p in mine["partitions"] if tt == t) for t, _ in mine["partitions"]
        }
        assert member["assignment"] == member["target_assignment"] == owned

    # A commit at the member's epoch is durable and read back by another client.
    commit_is_read_back(a, coordinator.bootstrap, "cg", 11)

    # A consumer that closes leaves at once (epoch -1): the others take its partitions.
    c.close()
    live.remove(c)
    third = wait_until(lambda: converged(live, partitions), 30, "the rest after a close")
    assert third > second

    # A SIGKILLed consumer is fenced when its session ends; the last one takes it all.
    b.kill()
    live.remove(b)
    fourth = wait_until(lambda: converged(live, partitions), 40, "the survivor after kill -9")
    assert fourth > third
    stays_stable(coordinator, "cg", 1, 1.0)
    no_overlap_per_epoch([a, b, c])


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_a_consumer_group_keeps_its_epoch_and_partitions_across_a_coordinator_restart(
    coordinator: Coordinator, members: list[Member], hard: bool
) -> None:
    """A consumer-protocol group is stored member by member (SQLite: a row per member, a
    snapshot writing only the members that changed) and loaded as it was: through a clean
    and a SIGKILL restart of the coordinator its librdkafka members heartbeat on at the
    same epoch with the same partitions, none fenced, no rebalance, past a whole session."""
    partitions = topic(coordinator, "kept", 6)
    group = [Member("confluent", coordinator.bootstrap, "kept", ["kept"], client_id=f"rd{i}",
                    extra=CONSUMER) for i in range(3)]  # fmt: skip
    members.extend(group)
    epoch = wait_until(lambda: converged(group, partitions), 60, "three consumers to converge")
    stays_stable(coordinator, "kept", 3, 1.0)

    def stored() -> dict[str, tuple[int, list[Any]]]:
        g = describe(coordinator, "kept")
        return {m.member_id: (m.member_epoch, sorted((t.topic_name, sorted(t.partitions))
                                                     for t in m.assignment.topic_partitions))
                for m in g.members}  # fmt: skip

    before = stored()
    reports = [len(m.events) for m in group]
    coordinator.restart(hard=hard)
    # Past the 6-s session: a member the reloaded coordinator did not know would be fenced.
    stays_stable(coordinator, "kept", 3, 8.0)
    assert stored() == before
    assert converged(group, partitions) == epoch
    moved = [e for m, r in zip(group, reports, strict=True) for e in m.events[r:]
             if e["event"] in ("assigned", "revoked", "lost")]  # fmt: skip
    assert not moved, moved


@pytest.mark.parametrize("client", ["java", "confluent"])
def test_a_static_consumer_restarted_gets_its_partitions_back_without_a_rebalance(
    coordinator: Coordinator, members: list[Member], client: str
) -> None:
    partitions = topic(coordinator, "events", 4)

    # The replacement is a new process: on a loaded machine it may start after a 6-s
    # session has fenced the member it replaces (static members run long sessions).
    asyncio.run(set_session(coordinator, "static", 30_000))

    def start(name: str, instance: str) -> Member:
        m = Member(client, coordinator.bootstrap, "static", ["events"], client_id=name,
                   instance_id=instance, extra=CONSUMER)  # fmt: skip
        members.append(m)
        return m

    one, two = start("one", "i-1"), start("two", "i-2")
    epoch = wait_until(lambda: converged([one, two], partitions), 60, "two static consumers")
    mine = holding(two)
    assert mine is not None
    group_epoch = describe(coordinator, "static").group_epoch
    # close() of a static member leaves for a while (epoch -2): nobody else gets its
    # partitions, and the group epoch does not move.
    two.close()
    time.sleep(1.5)
    assert holding(one) is not None and converged([one], partitions) is None
    again = start("two", "i-2")  # the same owner: a new process, the old one is gone
    back = again.wait_event("assigned", timeout=40)
    assert back["partitions"] == mine["partitions"]
    assert wait_until(lambda: converged([one, again], partitions), 30, "both again") == epoch
    assert describe(coordinator, "static").group_epoch == group_epoch
    no_overlap_per_epoch([one, two, again])


def test_a_static_franz_go_consumer_restarted_waits_for_its_old_session_as_on_kafka(
    coordinator: Coordinator, members: list[Member]
) -> None:
    """franz-go v1.22 leaves a static member's place with epoch -2 but no instance id,
    which Kafka 4.4 refuses (INVALID_REQUEST; checked against a real 4.4 broker): its
    restart is told UNRELEASED_INSTANCE_ID until the old member's session ends, then joins
    as a new member and gets a share by a rebalance. kgroups answers the same."""
    partitions = topic(coordinator, "events", 4)
    asyncio.run(set_session(coordinator, "static", 8_000))

    def start(name: str, instance: str) -> Member:
        m = Member("franz-go", coordinator.bootstrap, "static", ["events"], client_id=name,
                   instance_id=instance, extra=CONSUMER)  # fmt: skip
        members.append(m)
        return m

    one, two = start("one", "i-1"), start("two", "i-2")
    epoch = wait_until(lambda: converged([one, two], partitions), 60, "two static consumers")
    two.close()
    closed = time.monotonic()
    again = start("two", "i-2")
    wait_until(lambda: any("UNRELEASED_INSTANCE_ID" in line for line in again.stderr), 20,
               "the restarted member refused while the old one holds its instance id")  # fmt: skip
    later = wait_until(lambda: converged([one, again], partitions), 60, "both after the session")
    assert later > epoch
    assert time.monotonic() - closed > 6.0  # not before the old member's 8-s session ended
    no_overlap_per_epoch([one, two, again])


# What each client sends for `metrics-.*`: librdkafka keeps its "^" (its mark of a regex),
# franz-go wraps it to match anywhere, as kgo does itself (the harness anchors it first).
SENT_REGEX = {
    "java": "metrics-.*",
    "confluent": "(^metrics-.*)",
    "franz-go": ".*(?:(?:^(?:metrics-.*)$)).*",
}


@pytest.mark.parametrize("client", ["java", "confluent", "franz-go"])
def test_a_pattern_subscription_follows_the_topics_that_match_it_whole(
    coordinator: Coordinator, members: list[Member], client: str
) -> None:
    wanted = topic(coordinator, "metrics-a", 2) | topic(coordinator, "metrics-b", 1)
    topic(coordinator, "old-metrics-a", 2)  # matches `metrics-.*` only in part
    m = Member(client, coordinator.bootstrap, "pattern", ["unused"], client_id="p",
               extra=(*CONSUMER, "--pattern", "metrics-.*"))  # fmt: skip
    members.append(m)
    try:
        wait_until(lambda: converged([m], wanted), 60, "the pattern's topics")
    except AssertionError:
        raise AssertionError(f"{m.events}\n{''.join(m.stderr[-40:])}") from None
    wanted |= topic(coordinator, "metrics-c", 3)
    wait_until(lambda: converged([m], wanted), 30, "a topic created after the join")
    described = describe(coordinator, "pattern").members[0]
    assert described.subscribed_topic_regex == SENT_REGEX[client]


@pytest.mark.parametrize("client", ["confluent", "kgroups"])
def test_consumers_of_another_kind_and_java_share_a_consumer_protocol_group(
    coordinator: Coordinator, members: list[Member], client: str
) -> None:
    """librdkafka (it needs ConsumerGroupHeartbeat v1 exactly) and kgroups'
    ConsumerProtocolMember (the in-process library), each beside a Java consumer: they
    join, share, commit at the member epoch, and take over after a SIGKILL (the
    coordinator fences the silent member when its session ends) and a close (epoch -1)."""
    partitions = topic(coordinator, "mixed", 6)

    def start(kind: str, name: str) -> Member:
        m = Member(kind, coordinator.bootstrap, "mixed", ["mixed"], client_id=name,
                   extra=CONSUMER)  # fmt: skip
        members.append(m)
        return m

    one, java = start(client, "one"), start("java", "java")
    first = wait_until(lambda: converged([one, java], partitions), 60, f"{client} and Java")
    two = start(client, "two")
    live = [one, java, two]
    second = wait_until(lambda: converged(live, partitions), 60, f"a second {client} member")
    assert second > first
    stays_stable(coordinator, "mixed", 3, 2.0)
    commit_is_read_back(two, coordinator.bootstrap, "mixed", 7)
    one.kill()
    live.remove(one)
    wait_until(lambda: converged(live, partitions), 40, f"the others after {client}'s kill")
    two.close()
    live.remove(two)
    wait_until(lambda: converged(live, partitions), 30, "Java alone after a close")
    no_overlap_per_epoch([one, java, two])


def test_franz_go_consumers_with_the_server_side_balancer(
    coordinator: Coordinator, members: list[Member]
) -> None:
    """franz-go's kgo.ServerSideBalancer (v1.22): range asks for the server's `range`
    assignor, which the group then uses; members join, split, and take over a closed
    and a killed member's partitions."""
    partitions = topic(coordinator, "go", 6)

    def start(name: str) -> Member:
        m = Member("franz-go", coordinator.bootstrap, "go", ["go"], client_id=name,
                   strategy="range", extra=CONSUMER)  # fmt: skip
        members.append(m)
        return m

    one, two, three = start("one"), start("two"), start("three")
    live = [one, two, three]
    wait_until(lambda: converged(live, partitions), 60, "three franz-go consumers")
    stays_stable(coordinator, "go", 3, 1.5)
    assert describe(coordinator, "go").assignor_name == "range"
    three.close()
    live.remove(three)
    wait_until(lambda: converged(live, partitions), 30, "two after a close")
    two.kill()
    live.remove(two)
    wait_until(lambda: converged(live, partitions), 40, "one after a kill")
    one.send("commit 3")
    assert one.wait_event("committed")["partitions"]
    no_overlap_per_epoch([one, two, three])
