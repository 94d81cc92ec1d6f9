"""Offset commits: how many per second, and how long each waits to be acknowledged.

Many groups commit at once, as consumers do: `--groups` connections (one group each, a
simple group: generation -1, as Spark and Flink sources commit) each keep one
OffsetCommit of `--partitions` partitions in flight for `--seconds`; every answer is
timed. An acknowledged commit is durable on each target: kgroups' SQLite store with
fsync (one coordinator), kgroups on PostgreSQL (fsync on; one replica, then three sharing
the groups, each group's commits sent to its own replica), and a Kafka 4.4.0 broker
(`__consumer_offsets` on its log; acks after the append, as Kafka does for a
replication-factor-1 topic). Servers are pinned to one core (PostgreSQL too), the clients
to the other.

    python bench/commits.py [--groups 64] [--partitions 10] [--seconds 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.offset_commit.v8 import request as oc_req
from kio.schema.offset_commit.v8 import response as oc_resp

from bench.common import (
    KAFKA_LABEL,
    LOAD_CPU,
    SERVER_CPU,
    START_S,
    Target,
    kafka_broker,
    kgroups_coordinator,
    median,
    percentile,
    pin_self,
)
from bench.failover import Probe, close
from bench.loadgen import now
from kgroups import admin
from kgroups.protocol.build import build
from tests.postgres import PostgresServer

TOPIC = "commits"


async def committer(
    conn: object,
    group: str,
    partitions: int,
    until: float,
    latencies: list[float],
    once: bool = False,
) -> int:
    """Commits in a closed loop until `until` (or the first ack, if `once`): how many
    partition offsets were acked."""
    offset = acked = 0
    while now() < until:
        offset += 1
        body = build(oc_req.OffsetCommitRequest, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": offset} for p in range(partitions)]}],
        })  # fmt: skip
        started = now()
        response = await conn.request(body, oc_resp.OffsetCommitResponse)  # type: ignore[attr-defined]
        latencies.append(now() - started)
        codes = {int(p.error_code) for t in response.topics for p in t.partitions}
        if codes <= {14, 15, 16}:  # the coordinator loading or moving (Kafka's too, at
            await asyncio.sleep(0.05)  # first): not acknowledged; a client tries again
            continue
        if codes != {0}:
            raise RuntimeError(f"{group}: commit refused {codes}")
        acked += partitions
        if once:
            return acked
    if once:
        raise RuntimeError(f"{group}: no commit acknowledged in the warm-up")
    return acked


async def measure(
    addresses: list[tuple[str, int]], groups: int, partitions: int, seconds: float
) -> tuple[float, float, float]:
    """(partition offsets acked per second, median ms, p99 ms) over one window."""
    names = [f"commits-{n}-{time.monotonic_ns()}" for n in range(groups)]
    conns = []
    for name in names:  # each group's coordinator, as a client finds it
        conns.append(await Probe(name, addresses).locate())
    # One acknowledged commit per group before the window: a group's first commit waits
    # for its coordinator to load (Kafka answers COORDINATOR_LOAD_IN_PROGRESS for a
    # while), which is set-up, not the steady rate measured here.
    warmup = now() + 30.0
    await asyncio.gather(*(committer(c, g, partitions, warmup, [], once=True)
                           for c, g in zip(conns, names, strict=True)))  # fmt: skip
    latencies: list[float] = []
    started = now()
    until = started + seconds
    counts = await asyncio.gather(*(committer(c, g, partitions, until, latencies)
                                    for c, g in zip(conns, names, strict=True)))  # fmt: skip
    elapsed = now() - started
    for conn in conns:
        close(conn)
    ms = [x * 1000 for x in latencies]
    return sum(counts) / elapsed, median(ms), percentile(ms, 99)


@contextlib.contextmanager
def kgroups_replicas(count: int) -> Iterator[list[tuple[str, int]]]:
    """`count` coordinator replicas on a fresh PostgreSQL (fsync on), all pinned to the
    server core."""
    from bench.failover import Replicas

    pg = PostgresServer(fsync=True).start()
    subprocess.run(["taskset", "-a", "-p", "-c", SERVER_CPU, str(pg.pid())],
                   check=False, capture_output=True)  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="kgroups-commits-"))
    replicas = Replicas(pg.create_database(), tmp, 5.0, pg.log)
    try:
        for n in range(count):
            replicas.start(n)
        deadline = time.monotonic() + START_S
        while len(replicas.owners()) < 50 or (
            count > 1 and len(set(replicas.owners().values())) < count
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the replicas never took every shard")
            time.sleep(0.2)
        yield [("127.0.0.1", p) for p in replicas.ports.values()]
    finally:
        replicas.close()
        pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


def run_target(name: str, addresses: list[tuple[str, int]], args: argparse.Namespace,
               rows: list[tuple[str, float, float, float]]) -> None:  # fmt: skip
    async def go() -> None:
        host, port = addresses[0]
        await admin.create_topic(host, port, TOPIC, args.partitions)
        await asyncio.sleep(1.5)  # every replica sees the topic (reloaded with its leases)
        results = [await measure(addresses, args.groups, args.partitions, args.seconds)
                   for _ in range(args.runs)]  # fmt: skip
        rate = median([r[0] for r in results])
        rows.append((name, rate, median([r[1] for r in results]), median([r[2] for r in results])))

    asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    pin_self(LOAD_CPU)
    rows: list[tuple[str, float, float, float]] = []
    with kgroups_coordinator() as target:
        run_target("kgroups, SQLite", [(target.host, target.port)], args, rows)
    for count in (1, 3):
        with kgroups_replicas(count) as addresses:
            run_target(f"kgroups, PostgreSQL x{count}", addresses, args, rows)
    broker: Target | None
    with kafka_broker() as broker:
        if broker is not None:
            run_target(KAFKA_LABEL, [(broker.host, broker.port)], args, rows)
    print(
        f"\nOffset commits: {args.groups} groups committing {args.partitions} partitions "
        f"each, one commit in flight per group, {args.runs} runs of {args.seconds:g} s"
    )
    print(f"{'target':<26}{'offsets/s':>12}{'commits/s':>11}{'median ms':>11}{'p99 ms':>9}")
    for name, rate, med, p99 in rows:
        print(f"{name:<26}{rate:>12,.0f}{rate / args.partitions:>11,.0f}{med:>11.1f}{p99:>9.1f}")
    kafka = next((r for r in rows if r[0] == KAFKA_LABEL), None)
    if kafka is not None and kafka[1] > 0:
        for name, rate, _, _ in rows:
            if name != KAFKA_LABEL:
                print(f"{name} / kafka (offsets/s): {rate / kafka[1]:.2f}")


if __name__ == "__main__":
    main()
