"""The coordinator on a real PostgreSQL (`--store postgresql://...`): commits from many
groups acknowledged only once committed, kept across a coordinator SIGKILL and across
PostgreSQL restarting under it; a Stable group does not rebalance over either."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaConnectionError
from kafka.structs import OffsetAndMetadata

from kgroups import admin
from tests.integration.conftest import FAST
from tests.integration.harness import (
    PYTHON,
    ROOT,
    Coordinator,
    Member,
    converged,
    wait_until,
)
from tests.postgres import PASSWORD, PostgresServer

SESSION_MS = 15_000
PARTITIONS = 4


@pytest.fixture
def pg_coordinator(postgres: PostgresServer, tmp_path: Path) -> Iterator[Coordinator]:
    coord = Coordinator(tmp_path / "data", *FAST, "--store", postgres.create_database())
    coord.start()
    yield coord
    coord.kill()


class Committer(threading.Thread):
    """Commits ever larger offsets for one group's partitions (a consumer with `assign`,
    generation -1, as a Spark or Flink source does) and remembers what was acknowledged."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(name=f"committer-{group}", daemon=True)
        self.group = group
        self.topic = topic
        self.bootstrap = bootstrap
        self.acked: dict[int, int] = {}
        self.refused = 0
        self.stopping = threading.Event()

    def consumer(self) -> tuple[KafkaConsumer, list[TopicPartition]]:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 enable_auto_commit=False, request_timeout_ms=20_000,
                                 retry_backoff_ms=100)  # fmt: skip
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        return consumer, tps

    def run_once(self, *, offset: int) -> None:
        """One commit of `offset` to every partition, acknowledged."""
        consumer, tps = self.consumer()
        try:
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp in tps})
            self.acked = dict.fromkeys(range(PARTITIONS), offset)
        finally:
            consumer.close()

    def run(self) -> None:
        consumer, tps = self.consumer()
        offset = 0
        try:
            while not self.stopping.is_set():
                offset += 1
                try:
                    consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp in tps})
                except Exception:  # noqa: BLE001 - the coordinator away: not acknowledged
                    self.refused += 1
                    time.sleep(0.1)
                    continue
                self.acked = dict.fromkeys(range(PARTITIONS), offset)
        finally:
            consumer.close()


def every_ack_kept(committers: list[Committer], before: dict[str, int], bootstrap: str) -> None:
    """Once every committer has committed again since `before`, stop them: each group's
    committed offsets are the last ones acknowledged to it."""
    wait_until(lambda: all(c.acked[0] > before[c.group] + 5 for c in committers), 60,
               "every committer committing again")  # fmt: skip
    for c in committers:
        c.stopping.set()
    for c in committers:
        c.join(timeout=30)
    for c in committers:
        assert committed(bootstrap, c.group, "events") == c.acked, c.group


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    """The group's offsets as kafka-python reads them. Asked again if kafka-python gives up
    on a node that is gone: for a second after a replica dies, the others' answers may
    still name it (each learns of the move at its next lease renewal)."""

    def ask() -> tuple[dict[int, int | None]] | None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                 enable_auto_commit=False)  # fmt: skip
        try:
            return ({p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)},)
        except KafkaConnectionError:
            return None
        finally:
            consumer.close()

    (offsets,) = wait_until(ask, 30, f"{group}'s committed offsets", poll=0.5)
    return offsets


def commits_through(coordinator: Coordinator, members: list[Member],
                    outage: Callable[[], None]) -> None:  # fmt: skip
    """Committers in 6 groups and a Stable group of two clients, through `outage`: then
    every acknowledged commit is there and the Stable group kept its generation."""
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "events", PARTITIONS))
    partitions = {("events", p) for p in range(PARTITIONS)}
    group = [
        Member(client, coordinator.bootstrap, "stable", ["events"], client_id=f"{client}-m",
               session_timeout_ms=SESSION_MS)
        for client in ("kafka-python", "confluent")
    ]  # fmt: skip
    members.extend(group)
    generation = wait_until(lambda: converged(group, partitions), 60, "the group to converge")
    committers = [Committer(coordinator.bootstrap, f"c{n}", "events") for n in range(6)]
    for c in committers:
        c.start()
    wait_until(lambda: all(c.acked for c in committers), 30, "every committer's first commit")
    before = {c.group: c.acked[0] for c in committers}

    outage()

    every_ack_kept(committers, before, coordinator.bootstrap)
    assert converged(group, partitions) == generation, [m.events[-5:] for m in group]


def test_commits_acknowledged_before_a_sigkill_are_all_there_after_restart(
    pg_coordinator: Coordinator, members: list[Member]
) -> None:
    def kill_and_restart() -> None:
        time.sleep(1)
        pg_coordinator.restart(hard=True)

    commits_through(pg_coordinator, members, kill_and_restart)
    assert "replayed" in pg_coordinator.log()


@pytest.mark.parametrize("away_s", [2, 6], ids=["within-the-leases", "past-the-leases"])
def test_postgresql_restarting_under_the_coordinator_delays_commits_and_loses_none(
    pg_coordinator: Coordinator, members: list[Member], postgres: PostgresServer, away_s: int
) -> None:
    """Away for 2 s, the coordinator's writes wait and its leases hold. Away for 6 s (its
    leases last 5), it also stops serving every group, then loads them again once the
    database is back, while the commits it took before it stopped are still queued: they
    are written (or refused) before the groups are read, so none acknowledged reads back
    older (they once did: the load overtook them)."""
    assert pg_coordinator.proc is not None
    pid = pg_coordinator.proc.pid

    def crash_postgres() -> None:
        time.sleep(1)
        postgres.stop(mode="immediate")
        time.sleep(away_s)
        postgres.start_again()

    commits_through(pg_coordinator, members, crash_postgres)
    assert pg_coordinator.proc is not None and pg_coordinator.proc.pid == pid  # never restarted
    log = pg_coordinator.log()
    assert "reconnected" in log
    if away_s > 5:  # (2 s can outlast them too on a busy machine: PostgreSQL starting up)
        assert "serving no group until" in log, log[-3000:]


def test_an_unreachable_database_stops_the_start_with_the_reason_and_no_password(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.url("no_such_db")
    coord = Coordinator(tmp_path / "data", *FAST, "--store", url)
    with pytest.raises(AssertionError, match="exited early"):
        coord.start()
    assert coord.proc is not None and coord.proc.wait(10) == 1
    log = coord.log()
    assert 'database "no_such_db" does not exist' in log
    assert PASSWORD not in log


def cluster_id(bootstrap: str) -> str:
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return str(client.describe_cluster()["cluster_id"])
    finally:
        client.close()


def store_migrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "kgroups", "store", "migrate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_a_sqlite_install_migrated_to_postgresql_keeps_its_offsets_topics_and_cluster_id(
    coordinator: Coordinator, postgres: PostgresServer, tmp_path: Path
) -> None:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "events", PARTITIONS))
    committers = [Committer(coordinator.bootstrap, f"c{n}", "events") for n in range(3)]
    for c in committers:
        c.start()
    wait_until(lambda: all(c.acked and c.acked[0] > 3 for c in committers), 30, "commits")
    for c in committers:
        c.stopping.set()
        c.join(timeout=30)
    identity = cluster_id(coordinator.bootstrap)
    url = postgres.create_database()

    refused = store_migrate("--data-dir", str(coordinator.data_dir), "--to", url)
    assert refused.returncode == 1 and "in use by another coordinator" in refused.stderr

    assert coordinator.stop() == 0
    copied = store_migrate("--data-dir", str(coordinator.data_dir), "--to", url)
    assert copied.returncode == 0, copied.stderr
    assert f"cluster id {identity}" in copied.stdout and "12 OffsetRecord" in copied.stdout
    again = store_migrate("--data-dir", str(coordinator.data_dir), "--to", url)
    assert again.returncode == 1 and "already holds records" in again.stderr

    moved = Coordinator(tmp_path / "moved", *FAST, "--store", url)
    moved.start()
    try:
        assert cluster_id(moved.bootstrap) == identity
        for c in committers:
            assert committed(moved.bootstrap, c.group, "events") == c.acked
        assert ("events", PARTITIONS) in asyncio.run(admin.list_topics("127.0.0.1", moved.port))
    finally:
        moved.kill()


def test_store_migrate_refuses_a_database_replicas_are_running_on(
    coordinator: Coordinator, postgres: PostgresServer, tmp_path: Path
) -> None:
    """A replica already serving (its shards loaded empty) would never see what is copied
    under it, and could write over it: the copy is refused, and writes nothing."""
    assert coordinator.stop() == 0
    url = postgres.create_database()
    replica = Coordinator(tmp_path / "replica", *FAST, "--store", url)
    replica.start()
    try:
        refused = store_migrate("--data-dir", str(coordinator.data_dir), "--to", url)
        assert refused.returncode == 1
        assert "coordinator replicas are running on" in refused.stderr, refused.stderr
    finally:
        replica.stop()
    copied = store_migrate("--data-dir", str(coordinator.data_dir), "--to", url)
    assert copied.returncode == 0, copied.stderr
