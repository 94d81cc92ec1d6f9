"""`kgroups group` against a real `kgroups coordinator` and a real Kafka broker alike.

The same flow runs against both (the `backend` fixture): kafka-python members join and
commit, another client (kafka-python's admin) seeds offsets, and every verb's output is
checked column by column. Every write is read back through kafka-python's admin
(OffsetFetch by another client): a dry run changes nothing, --execute changes exactly
what it printed; a reset is refused for a group with members; a group with members is
not deleted until it has none; offsets are deleted per partition.

Both backends are made to look the same: every partition's log ends at 50. Kafka's log
has 50 records per partition; kgroups keeps no records, so there an "anchor" group's
commits at 50 make the known end 50 (its ListOffsets answers the highest offset known).
The members commit 42, so their lag is 8. What differs: kgroups shows a classic group's
generation and leader, which a Kafka broker does not send (`-`); and only Kafka has
groups of the new consumer protocol (KIP-848), which get a test of their own.

The commands run in this process (typer's runner): the same code as the `kgroups`
executable, without a Python start per command; one command runs the executable too,
and prints the same. tests/matrix/test_group_cli_vs_kafka.py puts Kafka's own tool
beside these commands on the same two backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from typer.testing import CliRunner

from kgroups import admin
from kgroups.admin import Cluster
from kgroups.cli import app
from tests.integration.conftest import FAST
from tests.integration.harness import (
    ROOT,
    Coordinator,
    Member,
    create_topic,
    wait_converged,
    wait_until,
)
from tests.waits import within

TP = tuple[str, int]
END = 50
T = [("t", p) for p in range(4)]
ALL = [*T, ("u", 0)]
PAST, FUTURE = "2020-01-01T00:00:00.000", "2100-01-01T00:00:00.000"


@dataclass
class Backend:
    name: str
    bootstrap: str

    @property
    def kafka(self) -> bool:
        return self.name == "kafka"


@dataclass
class Run:
    code: int
    out: str
    err: str


def invoke(backend: Backend, *args: str) -> Run:
    """`kgroups group ARGS --bootstrap-server ...`, run in this process."""
    result = CliRunner().invoke(app, ["group", *args, "--bootstrap-server", backend.bootstrap])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr)


def kgroups_group(backend: Backend, *args: str, code: int = 0) -> Run:
    """`invoke`, expected to exit with `code`."""
    run = invoke(backend, *args)
    assert run.code == code, f"{args} exited {run.code}:\n{run.out}\n{run.err}"
    return run


def table(out: str) -> list[dict[str, str]]:
    """The rows of the tables in Kafka-style output, as {column: value}.

    Columns are separated by whitespace; "COORDINATOR (ID)" and its "host:port  (0)"
    values are the one place a space sits inside a column and are joined first; the
    last column may hold spaces (delete-offsets' STATUS) and takes the rest of the line.
    """
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for raw in out.splitlines():
        line = raw.rstrip().replace("COORDINATOR (ID)", "COORDINATOR")
        line = re.sub(r"\s+\((-?\d+)\)", r"(\1)", line)
        if not line.strip():
            header = None
        elif line.split()[0] == "GROUP" or line.split()[:2] == ["TOPIC", "PARTITION"]:
            header = line.split()
        elif header is not None:
            words = line.split(maxsplit=len(header) - 1)
            if len(words) == len(header):
                rows.append(dict(zip(header, words, strict=True)))
    return rows


# --- the two backends ---------------------------------------------------------------------


def seed(bootstrap: str, group: str, offsets: dict[TP, int]) -> None:
    """Commit as an admin (generation -1) through kafka-python: another client.

    A retriable answer (a Kafka broker still loading its offsets partition on a busy
    machine says COORDINATOR_LOAD_IN_PROGRESS) is retried as Java's admin would, for
    up to 60 s; any other error fails the test.
    """
    client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="group-cli-seed")
    request = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
    deadline = time.monotonic() + within(60)
    try:
        while True:
            result = client.alter_group_offsets(group, request)
            errors = [error for error in result.values() if error.errno != 0]
            if not errors:
                return
            if time.monotonic() > deadline or not all(e.retriable for e in errors):
                raise AssertionError(result)
            time.sleep(0.5)
    finally:
        client.close()


def committed(backend: Backend, group: str) -> dict[TP, int]:
    """The group's offsets as kafka-python's admin reads them (OffsetFetch)."""
    client = KafkaAdminClient(bootstrap_servers=backend.bootstrap, client_id="group-cli-check")
    try:
        found = client.list_group_offsets({group: None})[group]
    finally:
        client.close()
    return {(tp.topic, tp.partition): o.offset for tp, o in found.items() if o.offset >= 0}


@contextlib.contextmanager
def kgroups_backend(tmp: Path) -> Iterator[Backend]:
    coord = Coordinator(tmp / "data", *FAST)
    coord.start()
    try:
        create_topic(coord, "t", 4)
        create_topic(coord, "u", 1)
        seed(coord.bootstrap, "anchor", dict.fromkeys(ALL, END))  # the known end: 50
        yield Backend("kgroups", coord.bootstrap)
    finally:
        coord.kill()


@contextlib.contextmanager
def kafka_backend(tmp: Path) -> Iterator[Backend]:
    import kafkapeer  # tools/kafkapeer.py: Kafka 4.4.0 from Maven Central

    with kafkapeer.KafkaBroker(kafkapeer.free_port(), tmp / "kafka") as broker:
        for name, partitions in (("t", 4), ("u", 1)):  # CreateTopics from kgroups' admin
            asyncio.run(admin.create_topic("127.0.0.1", broker.port, name, partitions))
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        for topic, partition in ALL:
            for _ in range(END):
                producer.send(topic, b"x", partition=partition)
        producer.flush()
        producer.close()
        asyncio.run(coordinator_ready(broker.port))
        yield Backend("kafka", broker.bootstrap)


async def coordinator_ready(port: int) -> None:
    """A fresh Kafka creates its offsets topic on the first FindCoordinator and answers
    COORDINATOR_NOT_AVAILABLE meanwhile; kafka-python's admin (the seeds) does not ask
    again, kgroups' does."""
    async with Cluster("127.0.0.1", port, timeout_ms=60_000) as cluster:
        await cluster.coordinators(["warm-up"])


def start(kind: str, tmp: Path) -> contextlib.AbstractContextManager[Backend]:
    return kgroups_backend(tmp) if kind == "kgroups" else kafka_backend(tmp)


@dataclass
class Live:
    """Group "live": two kafka-python members on t (4 partitions), both committed 42."""

    members: list[Member]
    generation: int

    def owners(self) -> dict[TP, Member]:
        return {
            (p[0], p[1]): m
            for m in self.members
            if m.assignment
            for p in m.assignment["partitions"]
        }


@contextlib.contextmanager
def live_group(backend: Backend) -> Iterator[Live]:
    # One after the other: two kafka-python 3.0.12 members joining a fresh Kafka 4.4 group
    # at the same instant can leave one stuck in its rejoin (it never hears of the group
    # again while the other goes through generations), which is kafka-python's and not
    # what these tests are about.
    members = [Member("kafka-python", backend.bootstrap, "live", ["t"], client_id="m0")]
    try:
        wait_converged(members, set(T), 60)
        members.append(Member("kafka-python", backend.bootstrap, "live", ["t"], client_id="m1"))
        generation = wait_converged(members, set(T), 60)
        for m in members:
            seen = len(m.events)
            m.send("commit 42")
            m.wait_event("committed", after=seen)
        yield Live(members, generation)
    finally:
        for m in members:
            m.kill()


@pytest.fixture(scope="module", params=["kgroups", "kafka"])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    with start(request.param, tmp_path_factory.mktemp(f"group-cli-{request.param}")) as b:
        yield b


@pytest.fixture(scope="module")
def live(backend: Backend) -> Iterator[Live]:
    with live_group(backend) as group:
        yield group


# --- list and describe --------------------------------------------------------------------


def test_list_with_and_without_states(backend: Backend, live: Live) -> None:
    seed(backend.bootstrap, "idle", {("t", 0): 3})
    names = kgroups_group(backend, "list").out.split()
    assert {"live", "idle"} <= set(names) and names == sorted(names)
    listed = kgroups_group(backend, "list", "--state").out
    states = {r["GROUP"]: r["STATE"] for r in table(listed)}
    executable = subprocess.run(
        [sys.executable, "-m", "kgroups", "group", "list", "--state", "--bootstrap", backend.bootstrap],
        capture_output=True, text=True, timeout=60, check=True, cwd=ROOT,
    )  # fmt: skip
    assert table(executable.stdout) == table(listed)
    assert (states["live"], states["idle"]) == ("Stable", "Empty")
    stable = table(kgroups_group(backend, "list", "--state", "STABLE").out)
    assert [r["GROUP"] for r in stable] == ["live"]
    empty = kgroups_group(backend, "list", "--state", "empty,dead", "-o", "json").out
    assert {"group": "idle", "state": "Empty", "type": "Classic"} in json.loads(empty)
    assert "live" not in empty


def test_describe_offsets_members_and_state(backend: Backend, live: Live) -> None:
    owners = live.owners()
    rows = table(kgroups_group(backend, "describe", "live").out)
    assert sorted((r["TOPIC"], int(r["PARTITION"])) for r in rows) == T
    for r in rows:
        owner = owners[(r["TOPIC"], int(r["PARTITION"]))]
        assert owner.assignment is not None
        assert (r["GROUP"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) == (
            "live", owner.assignment["member_id"], "/127.0.0.1", owner.name,
        )  # fmt: skip
        assert (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == ("42", str(END), "8")
    verbose = table(kgroups_group(backend, "describe", "live", "--offsets", "--verbose").out)
    assert {r["LEADER-EPOCH"] for r in verbose} == {"-"}  # kafka-python commits no epoch

    members = table(kgroups_group(backend, "describe", "--group", "live", "--members").out)
    assert sorted(r["CLIENT-ID"] for r in members) == ["m0", "m1"]
    for r in members:
        reported = next(m.assignment for m in live.members if m.name == r["CLIENT-ID"])
        assert reported is not None
        partitions = sorted(p for _, p in reported["partitions"])
        assert r["CONSUMER-ID"] == reported["member_id"]
        assert r["#PARTITIONS"] == str(len(partitions))
        assert r["ASSIGNMENT"] == f"t({','.join(map(str, partitions))})"
    (state,) = table(kgroups_group(backend, "describe", "live", "--state").out)
    assert (state["STATE"], state["ASSIGNMENT-STRATEGY"], state["#MEMBERS"]) == (
        "Stable", "range", "2",
    )  # fmt: skip
    assert state["COORDINATOR"].startswith(f"{backend.bootstrap}(")
    if backend.kafka:  # a Kafka broker sends neither
        assert (state["GENERATION"], state["LEADER"]) == ("-", "-")
        assert {r["LEADER"] for r in members} == {"-"}
    else:
        assert state["GENERATION"] == str(live.generation)
        (leader,) = [r["CONSUMER-ID"] for r in members if r["LEADER"] == "yes"]
        assert state["LEADER"] == leader
        assert sorted(r["LEADER"] for r in members) == ["no", "yes"]

    (described,) = json.loads(kgroups_group(backend, "describe", "live", "-o", "json").out)
    assert described["state"] == "Stable" and len(described["members"]) == 2
    assert described["generation"] == (None if backend.kafka else live.generation)
    assert {(o["topic"], o["partition"], o["lag"]) for o in described["offsets"]} == {
        (t, p, 8) for t, p in T
    }


def test_describe_an_empty_group_and_one_that_does_not_exist(backend: Backend) -> None:
    seed(backend.bootstrap, "quiet", {("t", 1): 7, ("u", 0): 20})
    quiet = kgroups_group(backend, "describe", "quiet")
    assert quiet.err.strip() == "Consumer group 'quiet' has no active members."
    assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"])
            for r in table(quiet.out)] == [("t", "1", "7", "43", "-"), ("u", "0", "20", "30", "-")]  # fmt: skip
    both = kgroups_group(backend, "describe", "quiet", "nope", "--state", code=1)
    assert "Error: Consumer group 'nope' does not exist." in both.err.splitlines()
    assert [r["GROUP"] for r in table(both.out)] == ["quiet"]


# --- reset-offsets ------------------------------------------------------------------------


def new_offsets(out: str) -> dict[TP, int]:
    return {(r["TOPIC"], int(r["PARTITION"])): int(r["NEW-OFFSET"]) for r in table(out)}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (["--to-earliest"], 0),
        (["--to-latest"], END),
        (["--to-current"], 10),
        (["--to-offset", "7"], 7),
        (["--to-offset", "100"], END),  # clamped to the end
        (["--shift-by", "-3"], 7),
        (["--shift-by", "-30"], 0),  # clamped to the start
        (["--to-datetime", PAST], 0),
        (["--to-datetime", FUTURE], END),  # no record that new: the end
        (["--by-duration", "P3650D"], 0),
        (["--by-duration", "PT0S"], END),
    ],
)
def test_a_dry_run_plans_and_changes_nothing(
    backend: Backend, spec: list[str], expected: int
) -> None:
    group = "dry" + "".join(spec)
    seed(backend.bootstrap, group, dict.fromkeys(ALL, 10))
    plan = kgroups_group(
        backend, "reset-offsets", "--group", group, "--all-topics", *spec, "--dry-run"
    )
    assert new_offsets(plan.out) == dict.fromkeys(ALL, expected)
    assert committed(backend, group) == dict.fromkeys(ALL, 10)


def test_execute_commits_exactly_what_it_prints(backend: Backend, tmp_path: Path) -> None:
    seed(backend.bootstrap, "exec", dict.fromkeys(ALL, 10))
    now = dict.fromkeys(ALL, 10)
    done = kgroups_group(backend, "reset-offsets", "--group", "exec", "--topic", "t:0,1",
                         "--to-offset", "5", "--execute")  # fmt: skip
    assert new_offsets(done.out) == {("t", 0): 5, ("t", 1): 5}
    now |= new_offsets(done.out)
    assert committed(backend, "exec") == now

    done = kgroups_group(backend, "reset-offsets", "--group", "exec", "--topic", "u",
                         "--topic", "t:3", "--shift-by", "100", "--execute")  # fmt: skip
    assert new_offsets(done.out) == {("u", 0): END, ("t", 3): END}
    assert "Value will be set to 50" in done.err
    now |= new_offsets(done.out)
    assert committed(backend, "exec") == now

    # --export writes the plan as CSV; --from-file commits it, to another group too.
    exported = kgroups_group(backend, "reset-offsets", "--group", "exec", "--all-topics",
                             "--shift-by", "1", "--export").out  # fmt: skip
    assert exported == "".join(f"{t},{p},{min(now[(t, p)] + 1, END)}\n" for t, p in sorted(ALL))
    assert committed(backend, "exec") == now
    plan = tmp_path / "plan.csv"
    plan.write_text(exported)
    done = kgroups_group(backend, "reset-offsets", "--group", "copy", "--from-file", str(plan),
                         "--execute")  # fmt: skip
    assert (
        committed(backend, "copy")
        == new_offsets(done.out)
        == {tp: min(o + 1, END) for tp, o in now.items()}
    )


def test_a_group_with_members_is_not_reset(backend: Backend, live: Live) -> None:
    refused = kgroups_group(backend, "reset-offsets", "--group", "live", "--all-topics",
                            "--to-earliest", "--execute", code=1)  # fmt: skip
    assert (
        "Error: Assignments can only be reset if the group 'live' is inactive, "
        "but the current state is Stable."
    ) in refused.err
    assert table(refused.out) == []
    assert committed(backend, "live") == dict.fromkeys(T, 42)


# --- delete-offsets and delete ------------------------------------------------------------


def test_delete_offsets(backend: Backend, live: Live) -> None:
    busy = kgroups_group(backend, "delete-offsets", "--group", "live", "--topic", "t:0", code=1)
    assert "Error: Encountered some partition-level error" in busy.err
    assert [r["STATUS"] for r in table(busy.out)] == [
        "Error: GROUP_SUBSCRIBED_TO_TOPIC: Deleting offsets of a topic is forbidden while "
        "the consumer group is actively subscribed to it."
    ]
    assert committed(backend, "live") == dict.fromkeys(T, 42)

    seed(backend.bootstrap, "forget", dict.fromkeys(ALL, 9))
    done = kgroups_group(backend, "delete-offsets", "--group", "forget", "--topic", "t:0,1",
                         "--topic", "u")  # fmt: skip
    assert done.out.startswith("Request succeeded for deleting offsets from group forget.")
    assert [(r["TOPIC"], r["PARTITION"], r["STATUS"]) for r in table(done.out)] == [
        ("t", "0", "Successful"), ("t", "1", "Successful"), ("u", "0", "Successful"),
    ]  # fmt: skip
    assert committed(backend, "forget") == {("t", 2): 9, ("t", 3): 9}

    unknown = kgroups_group(backend, "delete-offsets", "--group", "never", "--topic", "t", code=1)
    assert unknown.err.strip() == "Error: The group id does not exist."


def test_a_group_is_deleted_once_it_has_no_members(backend: Backend) -> None:
    # kafka-python's default session (10 s): nothing here waits for an expiry. With 4 s,
    # beside make test's busiest minutes (the kind images loading), the Kafka broker twice
    # gave it no assignment in 60 s; the failure now prints the member's log.
    member = Member("kafka-python", backend.bootstrap, "leaving", ["u"], client_id="leaver",
                    session_timeout_ms=10_000)  # fmt: skip
    try:
        wait_converged([member], {("u", 0)}, 60)
        seen = len(member.events)
        member.send("commit 5")
        member.wait_event("committed", after=seen)
        refused = kgroups_group(backend, "delete", "--group", "leaving", code=1)
        assert refused.err.splitlines() == [
            "Error: Deletion of some consumer groups failed:",
            "* Group 'leaving' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty.",
        ]
        assert committed(backend, "leaving") == {("u", 0): 5}
        member.close()

        def state() -> str:
            (row,) = table(kgroups_group(backend, "describe", "leaving", "--state").out)
            return row["STATE"]

        wait_until(lambda: state() == "Empty", 20, "the group to be empty")
        seed(backend.bootstrap, "also-gone", {("t", 0): 1})
        done = kgroups_group(backend, "delete", "--group", "leaving", "--group", "also-gone")
        assert done.out.strip() == (
            "Deletion of requested consumer groups ('leaving', 'also-gone') was successful."
        )
        assert committed(backend, "leaving") == {} == committed(backend, "also-gone")
        gone = kgroups_group(backend, "describe", "leaving", code=1)
        assert gone.err.strip() == "Error: Consumer group 'leaving' does not exist."
        assert "leaving" not in kgroups_group(backend, "list").out.split()
    finally:
        member.kill()


def test_a_group_of_kafkas_new_consumer_protocol(backend: Backend) -> None:
    """A KIP-848 group (librdkafka with group.protocol=consumer): DescribeGroups calls it
    Dead, so it is described by ConsumerGroupDescribe; its epoch is the generation, and
    it has no leader (the broker assigns)."""
    if not backend.kafka:
        pytest.skip("kgroups coordinates classic groups only")
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as Partition

    consumer = Consumer({"bootstrap.servers": backend.bootstrap, "group.id": "kip848",
                         "group.protocol": "consumer", "client.id": "n0"})  # fmt: skip
    try:
        consumer.subscribe(["t"])
        wait_until(lambda: (consumer.poll(0.1), len(consumer.assignment()) == 4)[1], 30, "assigned")
        consumer.commit(offsets=[Partition("t", p, 30) for p in range(4)], asynchronous=False)
        (member,) = table(kgroups_group(backend, "describe", "kip848", "--members").out)
        assert (member["CLIENT-ID"], member["#PARTITIONS"], member["LEADER"]) == ("n0", "4", "-")
        assert member["ASSIGNMENT"] == "t(0,1,2,3)"
        (state,) = table(kgroups_group(backend, "describe", "kip848", "--state").out)
        assert (state["STATE"], state["#MEMBERS"], state["LEADER"]) == ("Stable", "1", "-")
        assert int(state["GENERATION"]) >= 1
        rows = table(kgroups_group(backend, "describe", "kip848").out)
        assert {(r["PARTITION"], r["LAG"], r["CLIENT-ID"]) for r in rows} == {
            (str(p), "20", "n0") for p in range(4)
        }
        kgroups_group(backend, "reset-offsets", "--group", "kip848", "--all-topics",
                      "--to-earliest", "--execute", code=1)  # fmt: skip
    finally:
        consumer.close()
    wait_until(
        lambda: (
            table(kgroups_group(backend, "describe", "kip848", "--state").out)[0]["STATE"]
            == "Empty"
        ),
        20,
        "the group to be empty",
    )
    done = kgroups_group(backend, "reset-offsets", "--group", "kip848", "--all-topics",
                         "--to-offset", "10", "--execute")  # fmt: skip
    assert new_offsets(done.out) == committed(backend, "kip848") == dict.fromkeys(T, 10)
    kgroups_group(backend, "delete", "--group", "kip848")
    assert committed(backend, "kip848") == {}
