"""Live groups moving between the classic and the consumer protocol, with real clients.

An application rolls from `group.protocol=classic` to `consumer` one instance at a time
(and back): the first consumer-protocol member turns the classic group into a consumer
group online, the classic members go on inside it (JoinGroup, SyncGroup and Heartbeat,
assigned by the server), and when the last consumer-protocol member leaves the group is a
classic one again. After every step every partition is owned by exactly one live member
(by the members' own reports), and no partition was reported by two members at one
epoch (a classic member's generation inside a consumer group is its member epoch).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from kgroups.admin.single import Admin
from kgroups.cli import app as cli
from tests.integration.conftest import FAST
from tests.integration.harness import (
    STATIC_SESSION_MS,
    Coordinator,
    Member,
    commit_is_read_back,
    wait_until,
)
from tests.matrix.test_consumer_protocol_clients import (
    CONSUMER,
    converged,
    describe,
    holding,
    no_overlap_per_epoch,
    topic,
)
from tests.matrix.test_kafka_cli import cg, table

CLASSIC = 0
"""ConsumerGroupDescribe's MemberType of a classic member (1: consumer protocol)."""


def group_type(coordinator: Coordinator, group: str) -> str:
    """The group's type as ListGroups v5 reports it ("classic" or "consumer")."""

    async def ask() -> str:
        async with Admin("127.0.0.1", coordinator.port) as client:
            listed = await client.list_groups()
        return next(g.group_type for g in listed if g.group_id == group)

    return asyncio.run(ask())


def test_a_java_application_rolls_to_the_consumer_protocol_and_back(
    coordinator: Coordinator, members: list[Member]
) -> None:
    partitions = topic(coordinator, "rolled", 6)

    def start(name: str, *extra: str) -> Member:
        m = Member("java", coordinator.bootstrap, "roll", ["rolled"], client_id=name,
                   strategy="cooperative-sticky", extra=extra)  # fmt: skip
        members.append(m)
        return m

    live = [start("a"), start("b"), start("c")]
    wait_until(lambda: converged(live, partitions), 60, "three classic members")
    assert group_type(coordinator, "roll") == "classic"

    # Roll forward: each classic instance replaced by a consumer-protocol one.
    for i, name in enumerate(("a", "b", "c")):
        live[i].close()
        live[i] = start(f"{name}2", *CONSUMER)
        wait_until(lambda: converged(live, partitions), 60, f"{name} rolled to consumer")
        assert group_type(coordinator, "roll") == "consumer"
        kinds = sorted(m.member_type for m in describe(coordinator, "roll").members)
        assert kinds == [CLASSIC] * (2 - i) + [1] * (i + 1)
        if i == 0:  # Kafka's own tool sees the mixed group as Kafka shows one
            rows = table(cg(coordinator, "--describe", "--group", "roll", "--members",
                            "--verbose"))  # fmt: skip
            assert sorted(r["UPGRADED"] for r in rows) == ["false", "false", "true"], rows
            ours = CliRunner().invoke(cli, ["group", "describe", "--group", "roll", "--members",
                                            "--verbose", "--bootstrap-server",
                                            coordinator.bootstrap])  # fmt: skip
            assert ours.exit_code == 0, ours.output
            upgraded = {r["CONSUMER-ID"]: r["UPGRADED"] for r in table(ours.output)}
            assert upgraded == {r["CONSUMER-ID"]: r["UPGRADED"] for r in rows}
    commit_is_read_back(live[0], coordinator.bootstrap, "roll", 5)

    # Roll back: the last consumer-protocol member leaving makes the group classic again.
    for i, name in enumerate(("a", "b", "c")):
        live[i].close()
        live[i] = start(f"{name}3")
        wait_until(lambda: converged(live, partitions), 60, f"{name} rolled back to classic")
    assert group_type(coordinator, "roll") == "classic"
    no_overlap_per_epoch(members)


def test_a_static_java_member_rolled_back_to_classic_takes_its_place_and_the_group_with_it(
    tmp_path: Path, members: list[Member]
) -> None:
    """Static members (group.instance.id) roll without leaving: the classic process that
    replaces the last consumer-protocol one takes its place and partitions at once, and
    the group is a classic group again (Kafka's validateOnlineDowngradeWithReplacedMember);
    with the same subscription nobody else is disturbed."""
    # The replaced member's session (the coordinator's, under the consumer protocol) must
    # outlast a JVM's start on a loaded machine: 6 s did not, and b expiring first is
    # another story (a leave, then a join: two rebalances).
    coordinator = Coordinator(tmp_path / "data", *FAST, "--consumer-session-timeout-ms",
                              str(STATIC_SESSION_MS))  # fmt: skip
    coordinator.start()
    try:
        _roll_back_static(coordinator, members)
    finally:
        coordinator.kill()


def _roll_back_static(coordinator: Coordinator, members: list[Member]) -> None:
    partitions = topic(coordinator, "statics", 4)

    def start(name: str, instance: str, *extra: str) -> Member:
        m = Member("java", coordinator.bootstrap, "statics", ["statics"], client_id=name,
                   strategy="cooperative-sticky", instance_id=instance,
                   session_timeout_ms=STATIC_SESSION_MS, extra=extra)  # fmt: skip
        members.append(m)
        return m

    a = start("a", "i-a")
    wait_until(lambda: converged([a], partitions), 60, "a alone")
    b = start("b", "i-b", *CONSUMER)
    wait_until(lambda: converged([a, b], partitions), 60, "a classic and b consumer")
    assert group_type(coordinator, "statics") == "consumer"
    # Replaced before the coordinator saw b at its target (its acknowledgement in flight
    # on a loaded machine), the downgrade would rightly rebalance: wait for Stable.
    wait_until(lambda: describe(coordinator, "statics").group_state == "Stable", 30,
               "the coordinator to see the group Stable")  # fmt: skip
    kept = holding(a)
    b.kill()  # no leave: a static member's partitions wait for it
    back = start("b", "i-b")  # the same owner: a new process, the old one is gone
    wait_until(lambda: converged([a, back], partitions), 60, "b's classic process in its place")
    assert group_type(coordinator, "statics") == "classic"
    assert holding(a) == kept  # no rebalance: a kept its partitions and its generation
    no_overlap_per_epoch(members)


def test_kafka_python_classic_and_librdkafka_consumer_members_share_a_group(
    tmp_path: Path, members: list[Member]
) -> None:
    """An eager classic client (kafka-python, range) beside librdkafka speaking the
    consumer protocol: upgraded when librdkafka joins; under the `upgrade` policy (given
    in any case) the group stays a consumer group when librdkafka leaves, kafka-python a
    classic member inside it that takes every partition."""
    coordinator = Coordinator(tmp_path / "data", *FAST, "--consumer-migration-policy", "UPGRADE")
    coordinator.start()
    try:
        partitions = topic(coordinator, "shared", 4)

        def start(client: str, name: str, *extra: str) -> Member:
            m = Member(client, coordinator.bootstrap, "mix", ["shared"], client_id=name,
                       extra=extra)  # fmt: skip
            members.append(m)
            return m

        py = start("kafka-python", "py")
        wait_until(lambda: converged([py], partitions), 30, "kafka-python alone")
        rd = start("confluent", "rd", *CONSUMER)
        both: list[Member] = [py, rd]
        wait_until(lambda: converged(both, partitions), 60, "kafka-python and librdkafka")
        assert group_type(coordinator, "mix") == "consumer"
        assert all(holding(m)["partitions"] for m in both)  # type: ignore[index]
        commit_is_read_back(py, coordinator.bootstrap, "mix", 9)
        rd.close()
        wait_until(lambda: converged([py], partitions), 40, "kafka-python alone again")
        assert group_type(coordinator, "mix") == "consumer"
        assert [m.member_type for m in describe(coordinator, "mix").members] == [CLASSIC]
        no_overlap_per_epoch([py, rd])
    finally:
        coordinator.kill()
