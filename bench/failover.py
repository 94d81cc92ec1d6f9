"""Failover: a coordinator replica goes away; how long until its groups heartbeat and commit
again, and does any of them rebalance?

Three `kgroups coordinator` replicas share one PostgreSQL (Debian's, started here with
fsync on, tests/postgres.py). Per trial, 20 groups whose shards one replica owns each get
one member (the raw-protocol member of bench/loadgen.py: joined, synced, then a
Heartbeat and an OffsetCommit every 100 ms, each answer timed; on NOT_COORDINATOR or a
broken connection it asks FindCoordinator of any replica again and carries on with the
same member id and generation, as a Kafka consumer does). Then that replica is stopped:
`graceful` (SIGTERM: it hands its shards over) or `kill` (SIGKILL: its leases must
expire, `--lease-ttl`, default 5 s). A group's failover time runs from the signal to the
moment it has had both a heartbeat and a commit succeed on another replica; a group that
had to rejoin (its generation lost) counts as a rebalance. The replica then comes back
and the shards spread again before the next trial.

A second figure is the start-up cost the lease design keeps flat: a replica taking over
a shard holding 100,000 committed offsets (read from PostgreSQL and loaded into the core,
as `replicas.Replication._load` does), timed in this process.

    python bench/failover.py [--trials 5] [--lease-ttl 5] [--history 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.find_coordinator.v4 import request as fc_req
from kio.schema.find_coordinator.v4 import response as fc_resp
from kio.schema.offset_commit.v8 import request as oc_req
from kio.schema.offset_commit.v8 import response as oc_resp

from bench.common import (
    KAFKA_LABEL,
    LOAD_CPU,
    ROOT,
    SERVER_CPU,
    START_S,
    median,
    percentile,
    pin,
    pin_self,
)
from bench.loadgen import Conn, Member, connect, now
from kgroups import admin
from kgroups.coordinator.core import CoordinatorConfig, GroupCoordinator, Node
from kgroups.coordinator.core.records import OffsetRecord, OffsetValue
from kgroups.coordinator.core.shards import shard_of
from kgroups.coordinator.store.postgres import Fence, PostgresStore, ReplicaStore
from kgroups.protocol.build import build
from tests.postgres import PostgresServer

GROUPS = 20
SHARDS = 50
TOPIC = "t"
PERIOD_S = 0.1
RETRIABLE = {14, 15, 16}  # coordinator loading, not available, not this one


@dataclass
class Probe:
    """One group's member, timing what succeeds where."""

    group: str
    addresses: list[tuple[str, int]]
    member: Member | None = None
    node: int = -1
    heartbeats: list[tuple[float, int]] = field(default_factory=list)
    commits: list[tuple[float, int]] = field(default_factory=list)
    rejoins: int = 0
    offset: int = 0

    async def locate(self) -> Conn:
        """FindCoordinator of the replicas in turn, then a connection to the one named."""
        for host, port in itertools.cycle(self.addresses):
            try:
                conn = await asyncio.wait_for(connect(host, port), 1)
                body = build(fc_req.FindCoordinatorRequest,
                             {"key_type": 0, "coordinator_keys": [self.group]})  # fmt: skip
                asked = conn.request(body, fc_resp.FindCoordinatorResponse)
                answer = (await asyncio.wait_for(asked, 1)).coordinators[0]
                close(conn)
                if int(answer.error_code) == 0:
                    self.node = int(answer.node_id)
                    return await asyncio.wait_for(connect(answer.host, int(answer.port)), 1)
            except (OSError, TimeoutError, ConnectionError):
                pass
            await asyncio.sleep(0.05)
        raise AssertionError("unreachable")

    async def start(self) -> None:
        for _ in range(5):
            conn = await self.locate()
            self.member = Member(conn, self.group, TOPIC, 0, session_ms=30_000)
            try:
                await self.member.join()
                if await self.member.sync(1):
                    return
            except ConnectionError:
                pass  # its coordinator let the group go meanwhile (a lease lost on a
                # loaded machine closes that replica's connections): find the new one
            close(conn)
        raise AssertionError(f"{self.group}: no coordinator kept it long enough to join")

    async def run(self, stop: asyncio.Event) -> None:
        member = self.member
        assert member is not None
        while not stop.is_set():
            try:
                if member.conn.closed.done():  # a request written now would go nowhere
                    raise ConnectionError("closed")
                code = await asyncio.wait_for(member.heartbeat(), 2)
                if code == 0:
                    self.heartbeats.append((now(), self.node))
                elif code in RETRIABLE:
                    raise ConnectionError(code)
                else:  # the generation is gone: a rebalance
                    self.rejoins += 1
                    await member.join()
                    await member.sync(1)
                    continue
                self.offset += 1
                if await asyncio.wait_for(self.commit(member), 2) == 0:
                    self.commits.append((now(), self.node))
            except (ConnectionError, OSError, TimeoutError, IndexError):
                close(member.conn)
                member.conn = await self.locate()
                continue
            await asyncio.sleep(PERIOD_S)

    async def commit(self, member: Member) -> int:
        body = build(oc_req.OffsetCommitRequest, {
            "group_id": self.group, "generation_id_or_member_epoch": member.generation,
            "member_id": member.member_id,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": self.offset}]}],
        })  # fmt: skip
        response = await member.conn.request(body, oc_resp.OffsetCommitResponse)
        code = int(response.topics[0].partitions[0].error_code)
        if code in RETRIABLE:
            raise ConnectionError(code)
        return code

    def recovered(self, since: float, victim: int) -> float | None:
        """Seconds from `since` until both a heartbeat and a commit succeeded elsewhere."""
        beat = next((t for t, n in self.heartbeats if t > since and n != victim), None)
        committed = next((t for t, n in self.commits if t > since and n != victim), None)
        if beat is None or committed is None:
            return None
        return max(beat, committed) - since


def close(conn: Conn) -> None:
    if conn.transport is not None:
        conn.transport.close()


class Replicas:
    """Three coordinator replicas on one database, pinned to the server CPU."""

    def __init__(self, url: str, tmp: Path, ttl: float, pg_log: Path) -> None:
        self.url, self.tmp, self.ttl, self.pg_log = url, tmp, ttl, pg_log
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.ports: dict[int, int] = {}

    def start(self, n: int) -> None:
        """Start replica `n`; one that exits at start (its database dropped the connection
        under a loaded machine, seen once) is started once more, as Kubernetes would, with
        both logs on stderr."""
        try:
            self._start(n)
        except RuntimeError as e:
            if self.procs[n].poll() is None:
                raise
            print(f"{e}\nPostgreSQL's log:\n{self.pg_log.read_text()[-3000:]}\nstarting it again",
                  file=sys.stderr, flush=True)  # fmt: skip
            self._start(n)

    def _start(self, n: int) -> None:
        port_file = self.tmp / f"r{n}.port"
        port_file.unlink(missing_ok=True)
        listen = f"127.0.0.1:{self.ports.get(n, 0)}"
        log = (self.tmp / f"r{n}.log").open("ab")
        self.procs[n] = subprocess.Popen([
            *pin(SERVER_CPU), sys.executable, "-m", "kgroups", "coordinator", "--listen", listen,
            "--store", self.url, "--replica-name", f"r{n}", "--lease-ttl", str(self.ttl),
            "--port-file", str(port_file), "--initial-rebalance-delay-ms", "0",
            "--log-level", "WARNING",
        ], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
        # A loaded machine (make test's other workers) may take long to start one.
        deadline = time.monotonic() + START_S
        while not port_file.exists():
            code = self.procs[n].poll()
            if code is not None or time.monotonic() > deadline:
                why = f"exited with {code}" if code is not None else f"not up in {START_S} s"
                log_text = (self.tmp / f"r{n}.log").read_text()[-3000:]
                raise RuntimeError(f"replica r{n} {why}; its log:\n{log_text}")
            time.sleep(0.05)
        self.ports[n] = int(port_file.read_text().split()[0])

    def owners(self) -> dict[int, str]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            return dict(conn.execute(
                "SELECT shard, owner FROM kgroups.shard_owners "
                "WHERE owner IS NOT NULL AND expires_at > now()").fetchall())  # fmt: skip

    def settle(self, n: int = 3) -> None:
        """Until every shard is leased, evenly, by `n` replicas."""
        fair = {SHARDS // n, -(-SHARDS // n)}
        deadline = time.monotonic() + 120  # a loaded machine (make test's) is slow at it
        while True:
            counts = Counter(self.owners().values())
            if len(counts) == n and sum(counts.values()) == SHARDS and set(counts.values()) <= fair:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"-- r{k}: {(self.tmp / f'r{k}.log').read_text()[-1500:]}"
                                  for k in sorted(self.procs))  # fmt: skip
                raise RuntimeError(f"shards never spread: {counts}\n{logs}")
            time.sleep(0.2)

    def stop(self, n: int, sig: signal.Signals) -> None:
        proc = self.procs.pop(n)
        proc.send_signal(sig)
        proc.wait(timeout=30)

    def close(self) -> None:
        for n in list(self.procs):
            self.stop(n, signal.SIGKILL)


async def trial(
    replicas: Replicas, victim: int, sig: signal.Signals, tag: str
) -> tuple[list[float], int]:
    """One stop of `victim` under 20 groups it owns: each group's failover time, rebalances."""
    owners = replicas.owners()
    names = (f"{tag}-{k}" for k in itertools.count())
    groups = list(itertools.islice(
        (g for g in names if owners[shard_of(g, SHARDS)] == f"r{victim}"), GROUPS))  # fmt: skip
    addresses = [("127.0.0.1", p) for p in replicas.ports.values()]
    return await failover(groups, addresses, victim, lambda: replicas.stop(victim, sig))


async def failover(groups: list[str], addresses: list[tuple[str, int]], victim: int,
                   stop_victim: Any) -> tuple[list[float], int]:  # fmt: skip
    """Members in `groups` (all coordinated by node `victim`), then `stop_victim()`: each
    group's failover time, and how many had to rejoin."""
    probes = [Probe(g, addresses) for g in groups]
    await asyncio.gather(*(p.start() for p in probes))
    stop = asyncio.Event()
    running = [asyncio.create_task(p.run(stop)) for p in probes]
    await asyncio.sleep(1.0)
    since = now()
    await asyncio.to_thread(stop_victim)
    deadline = since + 60
    while now() < deadline and any(p.recovered(since, victim) is None for p in probes):
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*running)
    for p in probes:
        if p.member is not None:
            close(p.member.conn)
    times = [t for p in probes if (t := p.recovered(since, victim)) is not None]
    if len(times) < len(probes):
        raise RuntimeError(f"{len(probes) - len(times)} groups never recovered")
    return times, sum(p.rejoins for p in probes)


def takeover_with_history(url: str, offsets: int) -> float:
    """Seconds for a replica to read and load a shard holding `offsets` committed offsets."""
    store = ReplicaStore(url, shards=SHARDS, fence=Fence("bench-loader"))
    store.open()
    groups = [f"history-{n}" for n in range(100)]
    shard = shard_of(groups[0], SHARDS)
    same = [g for g in (f"history-{n}" for n in range(10_000)) if shard_of(g, SHARDS) == shard]
    per = offsets // len(same[:100])
    records = [OffsetRecord(g, TOPIC, p, OffsetValue(p, -1, "", 1, None))
               for g in same[:100] for p in range(per)]  # fmt: skip
    past = PostgresStore(url, shards=SHARDS)  # the shard's past, written unfenced
    past.open()
    past.append(records)
    past.close()
    timings = []
    for _ in range(5):
        began = time.perf_counter()
        loaded = store.load_shard(shard)
        core = GroupCoordinator(CoordinatorConfig(), node=Node(0, "bench", 1), cluster_id="b")
        core.resume(now_ms=int(time.time() * 1000))
        core.share(SHARDS)
        core.load(shard, loaded, now_ms=int(time.time() * 1000))
        timings.append(time.perf_counter() - began)
        assert len(loaded) >= per * 100  # and the trials' groups of that shard
    store.close()
    return median(timings)


class KafkaTrio:
    """Three Kafka brokers (combined KRaft nodes, one quorum), `__consumer_offsets`
    replicated three times: Kafka's own coordinator failover, for comparison."""

    def __init__(self, tmp: Path) -> None:
        import kafkapeer  # type: ignore[import-not-found]

        self.kafkapeer = kafkapeer
        ports = [kafkapeer.free_port() for _ in range(3)]
        controllers = [kafkapeer.free_port() for _ in range(3)]
        voters = ",".join(f"{n + 1}@127.0.0.1:{c}" for n, c in enumerate(controllers))
        cluster_id = kafkapeer.new_cluster_id()
        replicated = {
            "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "50",
            "default.replication.factor": "3", "min.insync.replicas": "1",
        }  # fmt: skip
        self.brokers = {
            n + 1: kafkapeer.KafkaBroker(
                ports[n], tmp / f"kafka-{n + 1}", node_id=n + 1, controller_port=controllers[n],
                voters=voters, cluster_id=cluster_id, cpu=SERVER_CPU, heap="384m",
                extra=replicated, start_timeout=180,
            )
            for n in range(3)
        }  # fmt: skip

    def start(self, *nodes: int) -> None:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(lambda n: self.brokers[n].__enter__(), nodes))

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", b.port) for b in self.brokers.values()]

    def stop(self, node: int, sig: signal.Signals) -> None:
        broker = self.brokers[node]
        if sig is signal.SIGTERM:
            broker.__exit__(None, None, None)
            return
        proc, broker.proc = broker.proc, None
        assert proc is not None
        proc.kill()
        proc.wait()

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.__exit__(None, None, None)


async def coordinators(addresses: list[tuple[str, int]], groups: list[str]) -> dict[str, int]:
    """Each group's coordinator node, as FindCoordinator answers (Kafka creates
    `__consumer_offsets` on the first ask: retried until every group has one)."""
    found: dict[str, int] = {}
    for group in groups:
        probe = Probe(group, addresses)
        conn = await probe.locate()
        close(conn)
        found[group] = probe.node
    return found


Row = tuple[str, float, float, float, int, int]
"""A stop: its name, median, p99 and worst failover seconds, rebalances, groups timed."""


async def both_stops(trials: int, one: Any) -> list[Row]:
    """`trials` of `one(signal, k)` for a graceful stop, then for a kill: a row each."""
    rows = []
    for mode, sig in (("graceful (SIGTERM)", signal.SIGTERM), ("kill (SIGKILL)", signal.SIGKILL)):
        times: list[float] = []
        rebalances = 0
        for k in range(trials):
            got, rejoined = await one(sig, k)
            times += got
            rebalances += rejoined
        rows.append(
            (mode, median(times), percentile(times, 99), max(times), rebalances, len(times))
        )
    return rows


def table(rows: list[Row]) -> None:
    print(f"{'stop':<22}{'median s':>10}{'p99 s':>9}{'max s':>9}{'rebalances':>12}{'groups':>8}")
    for mode, med, p99, worst, rebalances, count in rows:
        print(f"{mode:<22}{med:>10.2f}{p99:>9.2f}{worst:>9.2f}{rebalances:>12}{count:>8}")


async def kafka_trials(trials: int) -> list[Row]:
    tmp = Path(tempfile.mkdtemp(prefix="kafka-failover-"))
    trio = KafkaTrio(tmp)
    try:
        trio.start(1, 2, 3)
        await admin.create_topic("127.0.0.1", trio.brokers[1].port, TOPIC, 1)

        async def one(sig: signal.Signals, k: int) -> tuple[list[float], int]:
            names = [f"{sig.name}-{k}-{uuid.uuid4().hex[:6]}-{n}" for n in range(GROUPS * 4)]
            where = await coordinators(trio.addresses, names)
            victim = Counter(where.values()).most_common(1)[0][0]
            groups = [g for g in names if where[g] == victim][:GROUPS]
            result = await failover(groups, trio.addresses, victim,
                                    lambda: trio.stop(victim, sig))  # fmt: skip
            await asyncio.to_thread(trio.start, victim)
            await asyncio.sleep(3)
            return result

        rows = await both_stops(trials, one)
    finally:
        trio.close()
    return rows


async def run(trials: int, ttl: float, history: int) -> None:
    pg = PostgresServer(fsync=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="kgroups-failover-"))
    replicas = Replicas(pg.create_database(), tmp, ttl, pg.log)
    try:
        for n in range(3):
            replicas.start(n)
        replicas.settle()
        await admin.create_topic("127.0.0.1", replicas.ports[0], TOPIC, 1)

        async def one(sig: signal.Signals, k: int) -> tuple[list[float], int]:
            victim = k % 3
            result = await trial(replicas, victim, sig, f"{sig.name}-{k}-{uuid.uuid4().hex[:6]}")
            replicas.start(victim)
            replicas.settle()
            return result

        rows = await both_stops(trials, one)
        took = takeover_with_history(replicas.url, history)
    finally:
        replicas.close()
        pg.close()
        shutil.rmtree(tmp, ignore_errors=True)
    kafka_rows = None
    if not os.environ.get("KGROUPS_BENCH_NO_KAFKA"):
        import kafkapeer

        kafkapeer.ensure_kafka()
        kafka_rows = await kafka_trials(trials)
    print(f"\nFailover of {GROUPS} groups per trial, 3 kgroups replicas on PostgreSQL "
          f"(lease TTL {ttl:g} s), {trials} trials each:")  # fmt: skip
    table(rows)
    if kafka_rows is not None:
        print(f"\nThe same clients on {KAFKA_LABEL}, 3 brokers, the coordinator's broker stopped:")
        table(kafka_rows)
    print(
        f"\nTaking over a shard with {history:,} committed offsets (read + load), median of 5: "
        f"{took:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    parser.add_argument("--history", type=int, default=100_000,
                        help="committed offsets in the shard taken over")  # fmt: skip
    args = parser.parse_args()
    pin_self(LOAD_CPU)
    asyncio.run(run(args.trials, args.lease_ttl, args.history))


if __name__ == "__main__":
    main()
