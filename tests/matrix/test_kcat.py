"""kcat (Debian's kcat 1.7.1, librdkafka 2.0.2) against the coordinator: every mode that
touches what kgroups serves.

`kcat -L` (metadata), `kcat -G` as group members (through tests/integration/kcat_member.py,
which speaks member.py's protocol for it), `kcat -C -e` (a consumer that stops at the end of
its partitions), `kcat -Q` (offsets for times) and `kcat -P` (a producer kgroups must refuse
at once: it stores no records). tools/peers/kcat.sh installs kcat when it is missing.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from kgroups import admin
from tests.integration.harness import (
    ROOT,
    Coordinator,
    Member,
    assert_idle,
    create_topic,
    no_overlap_per_generation,
    wait_converged,
    wait_until,
)


@pytest.fixture(scope="module")
def kcat() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "peers" / "kcat.sh")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"tools/peers/kcat.sh failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def run(
    kcat: str, *args: str, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kcat, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def commit(coordinator: Coordinator, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """An admin's commit (generation -1) through kafka-python: makes those offsets known."""
    client = KafkaAdminClient(bootstrap_servers=coordinator.bootstrap, client_id="kcat-test-seed")
    try:
        client.alter_group_offsets(
            group,
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()},
        )
    finally:
        client.close()


def agrees_with_coordinator(coordinator: Coordinator, live: list[Member], generation: int) -> None:
    """The generation kcat_member.py read from librdkafka's log, and the member ids kcat
    printed, are the coordinator's (DescribeGroups)."""

    def agreed() -> bool:
        group = asyncio.run(admin_describe(coordinator, "g"))
        ids = {m.assignment["member_id"] for m in live if m.assignment}
        return group.generation == generation and {v.member_id for v in group.members} == ids

    wait_until(agreed, 10, f"the coordinator to report generation {generation} with {live}")


async def admin_describe(coordinator: Coordinator, group: str) -> admin.GroupView:
    async with admin.Admin("127.0.0.1", coordinator.port) as client:
        return await client.describe_group(group)


def children(pid: int) -> list[int]:
    """Direct children of `pid` (the kcat a wrapper started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"  # a zombie has exited


def test_kcat_lists_topics_and_their_partitions(coordinator: Coordinator, kcat: str) -> None:
    create_topic(coordinator, "orders", 3)
    create_topic(coordinator, "audit", 1)
    listing = run(kcat, "-b", coordinator.bootstrap, "-L", "-J")
    assert listing.returncode == 0, listing.stderr
    meta = json.loads(listing.stdout)
    assert meta["brokers"] == [{"id": 0, "name": coordinator.bootstrap}]
    topics = {t["topic"]: t for t in meta["topics"]}
    assert set(topics) == {"orders", "audit"}
    for name, count in (("orders", 3), ("audit", 1)):
        parts = topics[name]["partitions"]
        assert [p["partition"] for p in parts] == list(range(count))
        assert all(p["leader"] == 0 and "error" not in p for p in parts)
    plain = run(kcat, "-b", coordinator.bootstrap, "-L", "-t", "orders")
    assert plain.returncode == 0, plain.stderr
    assert 'topic "orders" with 3 partitions:' in plain.stdout
    assert len(re.findall(r"partition \d, leader 0, replicas: 0, isrs: 0", plain.stdout)) == 3


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_kcat_members_share_partitions_through_a_close_and_a_kill(
    coordinator: Coordinator, members: list[Member], kcat: str, strategy: str
) -> None:
    """After each step every partition is owned by exactly one live member, no partition
    is owned twice in any generation, and members with nothing to do stay idle."""
    partitions = create_topic(coordinator, "t", 6)

    def member(name: str) -> Member:
        m = Member("kcat", coordinator.bootstrap, "g", ["t"], client_id=name, strategy=strategy)
        members.append(m)
        return m

    m0, m1, m2 = member("k0"), member("k1"), member("k2")
    generations = [wait_converged([m0, m1, m2], partitions, 40)]
    agrees_with_coordinator(coordinator, [m0, m1, m2], generations[-1])
    no_overlap_per_generation(members)
    assert_idle([m0, m1, m2])

    m0.close()
    assert m0.proc.returncode == 0 and m0.events[-1]["event"] == "closed", m0.events
    generations.append(wait_converged([m1, m2], partitions, 40))
    agrees_with_coordinator(coordinator, [m1, m2], generations[-1])
    no_overlap_per_generation(members)

    (kcat_of_m1,) = children(m1.proc.pid)
    m1.kill()  # SIGKILL: no LeaveGroup; its kcat dies with it, silently
    wait_until(lambda: gone(kcat_of_m1), 5, "the killed member's kcat to die with it")
    generations.append(wait_converged([m2], partitions, 40))  # after its session timeout
    agrees_with_coordinator(coordinator, [m2], generations[-1])
    no_overlap_per_generation(members)

    m3 = member("k3")
    generations.append(wait_converged([m2, m3], partitions, 40))
    agrees_with_coordinator(coordinator, [m2, m3], generations[-1])
    no_overlap_per_generation(members)
    assert generations == sorted(set(generations)), generations
    assert_idle([m2, m3])


def test_kcat_consumer_reaches_the_end_of_every_partition_and_exits(
    coordinator: Coordinator, kcat: str
) -> None:
    create_topic(coordinator, "c", 4)
    commit(coordinator, "readers", {("c", 0): 42})  # offset 42 is known on c [0]
    bootstrap = coordinator.bootstrap
    for args, end_of_c0 in (
        (["-C", "-t", "c", "-o", "beginning"], 0),
        (["-C", "-t", "c", "-o", "end"], 42),
        (["-G", "readers", "c"], 42),  # from the group's committed offsets
    ):
        started = time.monotonic()
        done = run(kcat, "-b", bootstrap, "-e", *args, timeout=30)
        took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        ends = dict(re.findall(r"Reached end of topic c \[(\d)\] at offset (\d+)", done.stderr))
        assert sorted(ends) == ["0", "1", "2", "3"], done.stderr
        assert ends["0"] == str(end_of_c0) and ends["1"] == "0", done.stderr
        assert ": exiting" in done.stderr and done.stdout == ""
        # Not a timeout's wait (30 s kills it); a loaded machine took 14.8 s once.
        assert took < 20, f"kcat {args} took {took:.1f}s to reach the end"


def test_kcat_queries_offsets_for_times(coordinator: Coordinator, kcat: str) -> None:
    """EARLIEST is 0, LATEST the known end, and a timestamp the known end at that time."""
    create_topic(coordinator, "q", 2)
    before = int(time.time() * 1000) - 1000
    commit(coordinator, "qa", {("q", 0): 42})
    after = int(time.time() * 1000) + 1000

    def offsets(*specs: str) -> dict[str, int]:
        done = run(kcat, "-b", coordinator.bootstrap, "-Q", *(f for s in specs for f in ("-t", s)))
        assert done.returncode == 0, done.stderr
        return {
            f"{t}:{p}": int(o)
            for t, p, o in re.findall(r"(\S+) \[(\d+)\] offset (-?\d+)", done.stdout)
        }

    assert offsets("q:0:-1", "q:1:-1") == {"q:0": 42, "q:1": 0}  # latest
    assert offsets("q:0:-2", "q:1:-2") == {"q:0": 0, "q:1": 0}  # earliest
    assert offsets("q:0:1000") == {"q:0": 0}  # 1970: nothing was known
    assert offsets(f"q:0:{before}") == {"q:0": 0}
    assert offsets(f"q:0:{after}", f"q:1:{after}") == {"q:0": 42, "q:1": 0}


def test_kcat_producer_is_refused_at_once(coordinator: Coordinator, kcat: str) -> None:
    create_topic(coordinator, "t", 2)
    for args in (["-p", "0"], []):  # an explicit partition, and librdkafka's partitioner
        started = time.monotonic()
        done = run(kcat, "-b", coordinator.bootstrap, "-P", "-t", "t", *args, stdin="a\nb\n")
        took = time.monotonic() - started
        assert done.returncode != 0
        assert "Delivery failed for message: Broker: Topic authorization failed" in done.stderr
        assert took < 10, f"the producer took {took:.1f}s to be refused"  # not its 300 s timeout
