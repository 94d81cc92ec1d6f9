"""`kgroups group` and Apache Kafka's `kafka-consumer-groups`, side by side.

Both tools run against the same group on the same cluster, a real
`kgroups coordinator` and a real Kafka 4.4 broker (tests/integration/test_group_cli.py
sets both up alike: log ends at 50, members "live" at 42). What Kafka's tool prints is
what kgroups prints: the same rows in Kafka's columns (kgroups' own columns come after
them and are left out of the comparison), the same reset plans, the same messages.
Kafka's tool is the kafka-tools 4.3.1 jar (tools/kafkatools.py), a JVM per command, two at
a time (a second or two each on this machine); kgroups runs in this process meanwhile.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.harness import ROOT
from tests.integration.test_group_cli import (
    ALL,
    PAST,
    Backend,
    Live,
    Run,
    committed,
    invoke,
    live_group,
    seed,
    start,
    table,
)

sys.path.insert(0, str(ROOT / "tools"))
import kafkatools  # tools/ is not a package

Done = subprocess.CompletedProcess[str]


@pytest.fixture(scope="module", params=["kgroups", "kafka"])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    kafkatools.ensure_tools()
    with start(request.param, tmp_path_factory.mktemp(f"vs-kafka-{request.param}")) as b:
        seed(b.bootstrap, "quiet", {("t", 1): 7, ("u", 0): 20})
        seed(b.bootstrap, "plan", dict.fromkeys(ALL, 10))
        yield b


@pytest.fixture(scope="module")
def live(backend: Backend) -> Iterator[Live]:
    with live_group(backend) as group:
        yield group


def kafka_tool(backend: Backend, args: Sequence[str]) -> Done:
    return kafkatools.run("kafka-consumer-groups", "--bootstrap-server", backend.bootstrap, *args)


def side_by_side(
    backend: Backend, cases: Sequence[tuple[Sequence[str], Sequence[str]]]
) -> list[tuple[Done, Run]]:
    """(Kafka's tool, kgroups) for each pair of argument lists: Kafka's JVMs two at a time,
    kgroups in this process meanwhile."""
    with ThreadPoolExecutor(2) as pool:
        theirs = [pool.submit(kafka_tool, backend, args) for args, _ in cases]
        ours = [invoke(backend, *args) for _, args in cases]
        return [(t.result(), o) for t, o in zip(theirs, ours, strict=True)]


def kafkas_columns(
    ours: list[dict[str, str]], theirs: list[dict[str, str]]
) -> list[dict[str, str]]:
    columns = theirs[0].keys()
    return sorted(({c: row[c] for c in columns} for row in ours), key=str)


def test_describe_and_list_print_kafkas_rows(backend: Backend, live: Live) -> None:
    cases = [
        (["--describe", "--all-groups"], ["describe", "--all-groups"]),
        (["--describe", "--all-groups", "--state"], ["describe", "--all-groups", "--state"]),
        (["--describe", "--group", "live", "--members", "--verbose"],
         ["describe", "live", "--members", "--verbose"]),
        (["--list", "--state"], ["list", "--state"]),
    ]  # fmt: skip
    results = side_by_side(backend, cases)
    for (args, _), (kafka, ours) in zip(cases, results, strict=True):
        assert kafka.returncode == 0 and ours.code == 0, (args, kafka, ours)
        theirs = table(kafka.stdout)
        assert theirs, (args, kafka.stdout, kafka.stderr)
        assert kafkas_columns(table(ours.out), theirs) == sorted(theirs, key=str), args
    groups = {r["GROUP"] for r in table(results[1][0].stdout)}
    assert {"live", "quiet", "plan"} <= groups
    notice = "Consumer group 'quiet' has no active members."
    assert notice in results[0][0].stderr.splitlines()
    assert notice in results[0][1].err.splitlines()


RESETS = [
    ["--all-groups", "--all-topics", "--to-earliest"],  # "live" is refused, the rest planned
    ["--group", "plan", "--topic", "t:0,1", "--topic", "u", "--to-offset", "100"],
    ["--all-groups", "--all-topics", "--shift-by", "-30"],
    ["--group", "plan", "--topic", "t", "--to-current"],
    ["--group", "plan", "--all-topics", "--to-datetime", PAST],
]


def plan_rows(out: str) -> set[tuple[str, ...]]:
    return {(r["GROUP"], r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(out)}


REFUSED = (
    "Error: Assignments can only be reset if the group 'live' is inactive, "
    "but the current state is Stable."
)


def test_reset_plans_and_refusals_are_kafkas(backend: Backend, live: Live) -> None:
    export = ["--all-groups", "--all-topics", "--shift-by", "-3", "--export", "--dry-run"]
    cases = [(["--reset-offsets", *spec, "--dry-run"], ["reset-offsets", *spec, "--dry-run"])
             for spec in [*RESETS]] + [(["--reset-offsets", *export], ["reset-offsets", *export])]  # fmt: skip
    results = side_by_side(backend, cases)
    for spec, (kafka, ours) in zip(RESETS, results, strict=False):
        assert kafka.returncode == 0, (spec, kafka)
        assert ours.code == (1 if "--all-groups" in spec else 0), (spec, ours)
        theirs = plan_rows(kafka.stdout)
        assert plan_rows(ours.out) == theirs != set(), spec
        if "--all-groups" in spec:
            assert REFUSED in kafka.stdout.splitlines() and REFUSED in ours.err.splitlines()
            planned = {g for g, *_ in theirs}
            assert {"plan", "quiet"} <= planned and "live" not in planned
    kafka, ours = results[-1]
    csv = sorted(line for line in kafka.stdout.split() if line.count(",") == 3)
    assert sorted(ours.out.split()) == csv != []  # Kafka prints its refusal among the lines
    assert all(line.count(",") == 3 for line in ours.out.split())  # group,topic,partition,offset
    assert committed(backend, "plan") == dict.fromkeys(ALL, 10)  # dry runs, both of them
    assert committed(backend, "live") == {tp: 42 for tp in ALL if tp[0] == "t"}


def test_refused_deletes_say_what_kafka_says(backend: Backend, live: Live) -> None:
    offsets = ["--group", "live", "--topic", "t:0,2"]
    results = side_by_side(
        backend,
        [(["--delete-offsets", *offsets], ["delete-offsets", *offsets]),
         (["--delete", "--group", "live"], ["delete", "--group", "live"])],
    )  # fmt: skip
    (kafka, ours), (kafka_delete, ours_delete) = results
    assert ours.code == ours_delete.code == 1

    def reason(status: str) -> str:  # Kafka names the exception, kgroups the error code
        return status.rsplit(": ", 1)[-1]

    theirs = {(r["TOPIC"], r["PARTITION"]): reason(r["STATUS"]) for r in table(kafka.stdout)}
    assert theirs == {(r["TOPIC"], r["PARTITION"]): reason(r["STATUS"]) for r in table(ours.out)}
    assert set(theirs.values()) == {
        "Deleting offsets of a topic is forbidden while the consumer group is actively "
        "subscribed to it."
    }
    partition_level = "Error: Encountered some partition-level error, see the follow-up details."
    assert partition_level in kafka.stdout.splitlines()
    assert ours.err.splitlines()[0] == partition_level
    assert kafka_delete.stdout.split("\n")[1:3] == [
        "Error: Deletion of some consumer groups failed:",
        "* Group 'live' could not be deleted due to: "
        "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.",
    ]
    assert ours_delete.err.splitlines() == [
        "Error: Deletion of some consumer groups failed:",
        "* Group 'live' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty.",
    ]
    assert committed(backend, "live") == {tp: 42 for tp in ALL if tp[0] == "t"}
