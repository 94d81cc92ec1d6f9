"""Kafka's own CLI tools against the coordinator: every verb operators use day to day.

`kafka-consumer-groups` and `kafka-topics` (the kafka-tools 4.3.1 jar from Maven Central,
tools/kafkatools.py) run as their own JVMs, as an operator would run them, against a
real `kgroups coordinator`. Every write they make is read back through another path:
offsets with kgroups' own admin (OffsetFetch), topics with its Metadata. Offsets are set
up by another client (kafka-python's admin, or kafka-python members committing).

kgroups stores no records, so the offsets the tools see are the ones kgroups knows:
EARLIEST is 0, LATEST the highest end offset known for the partition (at least the highest
offset any group committed), and a timestamp query answers the known end at or before
that time (0 before anything was known). An "anchor" group that committed 42 on every
partition makes LATEST 42 in these tests.

The tools print most errors on stdout and still exit 0, so the text is what is checked.
One coordinator serves the whole module (each JVM takes 1-2 s; the tests use their own
group and topic names); read-only commands run two at a time.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from kgroups import admin
from tests.integration.conftest import FAST
from tests.integration.harness import (
    ROOT,
    Coordinator,
    Member,
    create_topic,
    wait_converged,
    wait_until,
)
from tests.matrix.test_consumer_protocol_clients import CONSUMER, converged, holding

sys.path.insert(0, str(ROOT / "tools"))
import kafkatools  # tools/ is not a package

TP = tuple[str, int]
T = TypeVar("T")
PAST, FUTURE = "2020-01-01T00:00:00.000", "2100-01-01T00:00:00.000"
R = [("r", p) for p in range(4)] + [("u", 0)]
"""The partitions the reset tests' groups have offsets on (topics r and u)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    coord = Coordinator(tmp_path_factory.mktemp("kafka-cli") / "data", *FAST)
    coord.start()
    kafkatools.ensure_tools()
    create_topic(coord, "r", 4)
    create_topic(coord, "u", 1)
    commit(coord, "anchor", dict.fromkeys(R, 42))  # LATEST is 42 on r and u
    yield coord
    coord.kill()


@pytest.fixture(scope="module")
def live(server: Coordinator) -> Iterator[list[Member]]:
    """Group "live": two kafka-python members on topic t (4 partitions), both committed 42."""
    create_topic(server, "t", 4)
    started = [
        Member("kafka-python", server.bootstrap, "live", ["t"], client_id=f"m{i}") for i in range(2)
    ]
    try:
        wait_converged(started, {("t", p) for p in range(4)}, 30)
        for m in started:
            seen = len(m.events)
            m.send("commit 42")
            m.wait_event("committed", after=seen)
        yield started
    finally:
        for m in started:
            m.kill()


# --- helpers ---------------------------------------------------------------------------------


def tool(
    server: Coordinator, name: str, *args: str, exit_code: int = 0
) -> subprocess.CompletedProcess[str]:
    done = kafkatools.run(name, "--bootstrap-server", server.bootstrap, *args)
    assert done.returncode == exit_code, (
        f"{name} {' '.join(args)} exited {done.returncode}:\n{done}"
    )
    return done


def cg(server: Coordinator, *args: str) -> str:
    """kafka-consumer-groups; its stdout (where it also prints its errors)."""
    return tool(server, "kafka-consumer-groups", *args).stdout


def cg_many(server: Coordinator, *argsets: list[str]) -> list[str]:
    """Several read-only kafka-consumer-groups runs, two JVMs at a time."""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda args: cg(server, *args), argsets))


def table(out: str) -> list[dict[str, str]]:
    """The rows of the tables in a tool's output, as {column: value}.

    Columns are separated by whitespace; "COORDINATOR (ID)" and its "host:port  (0)" values
    are the one place a space sits inside a column and are joined first.
    """
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for raw in out.splitlines():
        line = raw.replace("COORDINATOR (ID)", "COORDINATOR")
        words = re.sub(r"\s+\((-?\d+)\)", r"(\1)", line).split()
        if not words:
            header = None
        elif words[0] == "GROUP" or words[:2] == ["TOPIC", "PARTITION"]:
            header = words
        elif header is not None and len(words) == len(header):
            rows.append(dict(zip(header, words, strict=True)))
    return rows


def new_offsets(out: str) -> dict[TP, int]:
    """--reset-offsets' plan (dry run) or result (execute): partition -> NEW-OFFSET."""
    return {(r["TOPIC"], int(r["PARTITION"])): int(r["NEW-OFFSET"]) for r in table(out)}


def statuses(out: str) -> dict[TP, str]:
    """--delete-offsets' result: partition -> STATUS ("Successful" or "Error: ...")."""
    found = re.findall(r"^(\S+)\s+(\d+)\s+(Successful|Error: .*?)\s*$", out, re.MULTILINE)
    return {(topic, int(p)): status for topic, p, status in found}


def commit(server: Coordinator, group: str, offsets: dict[TP, int]) -> None:
    """Commit as an admin does (generation -1), through kafka-python: another client."""
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="cli-test-seed")
    try:
        result = client.alter_group_offsets(
            group,
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()},
        )
        assert all(error.errno == 0 for error in result.values()), result
    finally:
        client.close()


def ask(server: Coordinator, call: Callable[[admin.Admin], Awaitable[T]]) -> T:
    """One call through kgroups' own admin client."""

    async def run() -> T:
        async with admin.Admin("127.0.0.1", server.port) as client:
            return await call(client)

    return asyncio.run(run())


def committed(server: Coordinator, group: str) -> dict[TP, int]:
    """The group's offsets as kgroups' own admin reads them (OffsetFetch)."""
    return ask(server, lambda client: client.committed_offsets(group))


def group_state(server: Coordinator, group: str) -> str:
    return ask(server, lambda client: client.describe_group(group)).state


def reset(server: Coordinator, group: str, scope: list[str], spec: list[str], mode: str) -> str:
    return cg(server, "--reset-offsets", "--group", group, *scope, *spec, mode)


ALL = ["--all-topics"]


def seeded(server: Coordinator, group: str) -> dict[TP, int]:
    commit(server, group, dict.fromkeys(R, 42))
    return dict.fromkeys(R, 42)


# --- kafka-topics ----------------------------------------------------------------------------


def test_kafka_topics_create_list_alter_delete(server: Coordinator) -> None:
    def topics(*args: str) -> str:
        return tool(server, "kafka-topics", *args).stdout

    def known() -> dict[str, int]:
        return ask(server, lambda client: client.topics())

    assert "Created topic orders." in topics("--create", "--topic", "orders", "--partitions", "3")
    assert "Created topic audit." in topics(
        "--create", "--topic", "audit", "--partitions", "2", "--replication-factor", "1"
    )
    assert known()["orders"] == 3 and known()["audit"] == 2
    assert {"orders", "audit"} <= set(topics("--list").split())
    refused = tool(
        server, "kafka-topics", "--create", "--topic", "orders", "--partitions", "1", exit_code=1
    )
    assert "Topic 'orders' already exists" in refused.stdout
    topics("--alter", "--topic", "orders", "--partitions", "5")
    assert known()["orders"] == 5
    topics("--delete", "--topic", "audit")
    assert "audit" not in known()
    assert "audit" not in topics("--list").split()


def test_kafka_topics_describe(server: Coordinator) -> None:
    """Needs DescribeConfigs for TOPIC resources: the tool shows each topic's configs."""
    create_topic(server, "shown", 3)
    out = tool(server, "kafka-topics", "--describe", "--topic", "shown").stdout
    head = re.search(r"Topic: shown\s+TopicId: \S+\s+PartitionCount: 3\s+ReplicationFactor: 1", out)
    assert head, out
    partitions = re.findall(
        r"Topic: shown\s+Partition: (\d+)\s+Leader: 0\s+Replicas: 0\s+Isr: 0", out
    )
    assert partitions == ["0", "1", "2"], out
    everything = tool(server, "kafka-topics", "--describe").stdout
    assert "Topic: shown" in everything and "Topic: r" in everything
    # Configs given at creation are kept and shown (only overrides are printed).
    tool(server, "kafka-topics", "--create", "--topic", "compacted", "--partitions", "1",
         "--config", "cleanup.policy=compact", "--config", "retention.ms=3600000")  # fmt: skip
    out = tool(server, "kafka-topics", "--describe", "--topic", "compacted").stdout
    configs = re.search(r"Topic: compacted\s+TopicId: .*Configs: (.*)", out)
    assert configs and sorted(configs[1].strip().split(",")) == [
        "cleanup.policy=compact", "retention.ms=3600000",
    ], out  # fmt: skip
    # A topic without overrides shows none (Kafka's defaults are not printed).
    assert re.search(r"Topic: shown\s+TopicId: .*Configs:\s*$", everything, re.M), everything
    bad = tool(server, "kafka-topics", "--create", "--topic", "bad", "--partitions", "1",
               "--config", "retention.ms=soon", exit_code=1)  # fmt: skip
    assert "retention.ms" in bad.stdout + bad.stderr
    assert "bad" not in ask(server, lambda client: client.topics())


# --- kafka-consumer-groups: list and describe ------------------------------------------------


def test_list_groups_with_their_state_and_type(server: Coordinator, live: list[Member]) -> None:
    plain, states, stable, types, classic = cg_many(
        server,
        ["--list"],
        ["--list", "--state"],
        ["--list", "--state", "stable"],
        ["--list", "--type"],
        ["--list", "--type", "classic"],
    )
    assert {"live", "anchor"} <= set(plain.split())
    state_of = {r["GROUP"]: r["STATE"] for r in table(states)}
    assert state_of["live"] == "Stable" and state_of["anchor"] == "Empty"
    assert [r["GROUP"] for r in table(stable)] == ["live"]
    type_of = {r["GROUP"]: r["TYPE"] for r in table(types)}
    assert type_of["live"] == "Classic" and type_of["anchor"] == "Classic"
    assert {"live", "anchor"} <= {r["GROUP"] for r in table(classic)}


def test_describe_members_and_state(server: Coordinator, live: list[Member]) -> None:
    members, verbose, state, state_verbose = cg_many(
        server,
        ["--describe", "--group", "live", "--members"],
        ["--describe", "--group", "live", "--members", "--verbose"],
        ["--describe", "--group", "live", "--state"],
        ["--describe", "--group", "live", "--state", "--verbose"],
    )
    owned = {m.name: m.assignment for m in live}
    rows = table(members)
    assert {r["CLIENT-ID"] for r in rows} == {"m0", "m1"}
    for r in rows:
        reported = owned[r["CLIENT-ID"]]
        assert reported is not None
        assert r["CONSUMER-ID"] == reported["member_id"]
        assert r["HOST"] == "/127.0.0.1"
        assert int(r["#PARTITIONS"]) == len(reported["partitions"])
    for r in table(verbose):
        reported = owned[r["CLIENT-ID"]]
        assert reported is not None
        listed = ",".join(str(p) for _, p in reported["partitions"])
        assert r["CURRENT-ASSIGNMENT"] == f"t:{listed}"
    for out in (state, state_verbose):
        (row,) = table(out)
        assert row["COORDINATOR"] == f"{server.bootstrap}(0)"
        assert (row["ASSIGNMENT-STRATEGY"], row["STATE"], row["#MEMBERS"]) == (
            "range",
            "Stable",
            "2",
        )


def test_describe_offsets_shows_no_lag_for_a_group_at_the_known_end(
    server: Coordinator, live: list[Member]
) -> None:
    """The offsets view (the default, and --offsets): CURRENT-OFFSET 42, LOG-END-OFFSET 42 (the
    highest offset kgroups knows for the partition), LAG 0, never negative; the owner of each
    partition is the member that reports it."""
    default, offsets, verbose, empty = cg_many(
        server,
        ["--describe", "--group", "live"],
        ["--describe", "--group", "live", "--offsets"],
        ["--describe", "--group", "live", "--offsets", "--verbose"],
        ["--describe", "--group", "anchor"],
    )
    owner = {
        tuple(p): m.assignment["member_id"]
        for m in live
        if m.assignment
        for p in m.assignment["partitions"]
    }
    for out in (default, offsets, verbose):
        rows = table(out)
        assert sorted((r["TOPIC"], int(r["PARTITION"])) for r in rows) == sorted(owner), out
        for r in rows:
            assert r["CONSUMER-ID"] == owner[(r["TOPIC"], int(r["PARTITION"]))]
            assert (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == ("42", "42", "0"), out
    rows = table(empty)
    assert sorted((r["TOPIC"], int(r["PARTITION"])) for r in rows) == sorted(R)
    assert all((r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"]) == ("42", "0", "-") for r in rows)


# --- kafka-consumer-groups: reset-offsets ----------------------------------------------------


def test_reset_to_offset_shift_by_and_to_current(server: Coordinator) -> None:
    now = seeded(server, "g-offset")
    plan = new_offsets(reset(server, "g-offset", ALL, ["--to-offset", "5"], "--dry-run"))
    assert plan == dict.fromkeys(R, 5)
    assert committed(server, "g-offset") == now  # a dry run writes nothing

    scope = ["--topic", "r:0,1"]
    done = new_offsets(reset(server, "g-offset", scope, ["--to-offset", "5"], "--execute"))
    assert done == {("r", 0): 5, ("r", 1): 5}
    now |= done
    assert committed(server, "g-offset") == now

    plan = new_offsets(reset(server, "g-offset", ALL, ["--shift-by", "-2"], "--dry-run"))
    assert plan == {tp: o - 2 for tp, o in now.items()}
    assert committed(server, "g-offset") == now
    done = new_offsets(reset(server, "g-offset", ALL, ["--shift-by", "-2"], "--execute"))
    now = {tp: o - 2 for tp, o in now.items()}
    assert done == now
    assert committed(server, "g-offset") == now  # r:0,1 at 3, the rest at 40

    # --to-current keeps what is committed: it must never wipe offsets.
    assert new_offsets(reset(server, "g-offset", ALL, ["--to-current"], "--dry-run")) == now
    assert new_offsets(reset(server, "g-offset", ALL, ["--to-current"], "--execute")) == now
    assert committed(server, "g-offset") == now


def test_reset_to_latest_and_to_earliest(server: Coordinator) -> None:
    commit(server, "g-ends", dict.fromkeys(R, 10))
    now = dict.fromkeys(R, 10)
    scope = ["--topic", "r:0,1", "--topic", "u"]
    plan = new_offsets(reset(server, "g-ends", scope, ["--to-latest"], "--dry-run"))
    assert plan == {("r", 0): 42, ("r", 1): 42, ("u", 0): 42}
    assert committed(server, "g-ends") == now
    done = new_offsets(reset(server, "g-ends", scope, ["--to-latest"], "--execute"))
    assert done == plan
    now |= done
    assert committed(server, "g-ends") == now

    plan = new_offsets(reset(server, "g-ends", ALL, ["--to-earliest"], "--dry-run"))
    assert plan == dict.fromkeys(R, 0)
    assert committed(server, "g-ends") == now
    done = new_offsets(
        reset(server, "g-ends", ["--topic", "r:1,2"], ["--to-earliest"], "--execute")
    )
    assert done == {("r", 1): 0, ("r", 2): 0}
    now |= done
    assert committed(server, "g-ends") == now


def test_reset_to_datetime_and_by_duration(server: Coordinator) -> None:
    """Before anything was known the answer is 0; at or after now, the known end (42)."""
    commit(server, "g-time", dict.fromkeys(R, 10))
    now = dict.fromkeys(R, 10)
    plan = new_offsets(reset(server, "g-time", ALL, ["--to-datetime", FUTURE], "--dry-run"))
    assert plan == dict.fromkeys(R, 42)
    plan = new_offsets(reset(server, "g-time", ALL, ["--to-datetime", PAST], "--dry-run"))
    assert plan == dict.fromkeys(R, 0)
    assert committed(server, "g-time") == now
    done = new_offsets(
        reset(server, "g-time", ["--topic", "r:0"], ["--to-datetime", PAST], "--execute")
    )
    assert done == {("r", 0): 0}
    now |= done
    assert committed(server, "g-time") == now

    plan = new_offsets(reset(server, "g-time", ALL, ["--by-duration", "PT0S"], "--dry-run"))
    assert plan == dict.fromkeys(R, 42)
    plan = new_offsets(reset(server, "g-time", ALL, ["--by-duration", "P3650D"], "--dry-run"))
    assert plan == dict.fromkeys(R, 0)
    assert committed(server, "g-time") == now
    done = new_offsets(
        reset(server, "g-time", ["--topic", "u"], ["--by-duration", "PT0S"], "--execute")
    )
    assert done == {("u", 0): 42}
    now |= done
    assert committed(server, "g-time") == now


def test_reset_from_file(server: Coordinator, tmp_path: Path) -> None:
    now = seeded(server, "g-file")
    wanted = {("r", 0): 7, ("r", 1): 8, ("r", 2): 9, ("r", 3): 10, ("u", 0): 11}
    csv = tmp_path / "offsets.csv"
    csv.write_text("".join(f"{t},{p},{o}\n" for (t, p), o in wanted.items()))
    plan = new_offsets(reset(server, "g-file", [], ["--from-file", str(csv)], "--dry-run"))
    assert plan == wanted
    assert committed(server, "g-file") == now
    done = new_offsets(reset(server, "g-file", [], ["--from-file", str(csv)], "--execute"))
    assert done == wanted
    assert committed(server, "g-file") == wanted


# --- kafka-consumer-groups: an active group refuses; delete and delete-offsets ----------------


def test_an_active_group_refuses_reset_delete_and_delete_offsets(
    server: Coordinator, live: list[Member]
) -> None:
    before = committed(server, "live")
    out = reset(server, "live", ALL, ["--to-earliest"], "--execute")
    assert "can only be reset if the group 'live' is inactive" in out
    assert "current state is Stable" in out
    out = cg(server, "--delete", "--group", "live")
    assert "Group 'live' could not be deleted" in out and "GroupNotEmptyException" in out
    out = cg(server, "--delete-offsets", "--group", "live", "--topic", "t")
    refused = statuses(out)
    assert set(refused) == {("t", p) for p in range(4)}, out
    assert all("GroupSubscribedToTopicException" in s for s in refused.values()), out
    assert committed(server, "live") == before
    assert group_state(server, "live") == "Stable"


def test_delete_offsets_of_an_empty_group(server: Coordinator) -> None:
    now = seeded(server, "g-forget")
    out = cg(server, "--delete-offsets", "--group", "g-forget", "--topic", "r:0,1", "--topic", "u")
    assert "Request succeeded for deleting offsets from group g-forget" in out, out
    assert statuses(out) == dict.fromkeys([("r", 0), ("r", 1), ("u", 0)], "Successful"), out
    assert committed(server, "g-forget") == {("r", 2): now[("r", 2)], ("r", 3): now[("r", 3)]}

    out = cg(server, "--delete-offsets", "--group", "g-unknown", "--topic", "r")
    assert "Error: The group id does not exist." in out, out
    assert all("GroupIdNotFoundException" in s for s in statuses(out).values()), out


def test_delete_empty_groups(server: Coordinator) -> None:
    seeded(server, "g-gone-1")
    seeded(server, "g-gone-2")
    out = cg(server, "--delete", "--group", "g-gone-1", "--group", "g-gone-2")
    assert "Deletion of requested consumer groups ('g-gone-1', 'g-gone-2') was successful." in out
    for group in ("g-gone-1", "g-gone-2"):
        assert committed(server, group) == {}
        assert group_state(server, group) == "Dead"
    assert not {"g-gone-1", "g-gone-2"} & set(cg(server, "--list").split())


# --- kafka-consumer-groups on a consumer-protocol group (KIP-848) ----------------------------


def test_list_and_describe_a_consumer_protocol_group(
    server: Coordinator, live: list[Member]
) -> None:
    """Two Java consumers with group.protocol=consumer: the tool lists the group with type
    Consumer and describes it through ConsumerGroupDescribe (members, epochs, assignor)."""
    create_topic(server, "mt", 4)
    started = [Member("java", server.bootstrap, "modern", ["mt"], client_id=f"j{i}",
                      extra=CONSUMER) for i in range(2)]  # fmt: skip
    try:
        wait_until(lambda: converged(started, {("mt", p) for p in range(4)}), 60, "consumers")
        types, verbose, state = cg_many(
            server,
            ["--list", "--type"],
            ["--describe", "--group", "modern", "--members", "--verbose"],
            ["--describe", "--group", "modern", "--state"],
        )
        members = verbose
        type_of = {r["GROUP"]: r["TYPE"] for r in table(types)}
        assert (type_of["modern"], type_of["live"]) == ("Consumer", "Classic")
        reported = {m.name: holding(m) for m in started}
        rows = table(members)
        assert {r["CLIENT-ID"] for r in rows} == {"j0", "j1"}
        for r in rows:
            mine = reported[r["CLIENT-ID"]]
            assert mine is not None
            assert r["CONSUMER-ID"] == mine["member_id"]
            assert int(r["#PARTITIONS"]) == len(mine["partitions"])
        (row,) = table(state)
        assert (row["ASSIGNMENT-STRATEGY"], row["STATE"], row["#MEMBERS"]) == (
            "uniform", "Stable", "2")  # fmt: skip
        for r in table(verbose):
            mine = reported[r["CLIENT-ID"]]
            assert mine is not None
            listed = ",".join(str(p) for _, p in mine["partitions"])
            epoch = str(mine["generation"])
            assert (r["CURRENT-EPOCH"], r["CURRENT-ASSIGNMENT"]) == (epoch, f"mt:{listed}")
            assert (r["TARGET-EPOCH"], r["TARGET-ASSIGNMENT"]) == (epoch, f"mt:{listed}")
            assert "UPGRADED" not in r  # printed for a group of both protocols only
    finally:
        for m in started:
            m.kill()
