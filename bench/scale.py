"""Groups per replica: three replicas hold three times the groups of one, at the same
heartbeat latency?

kgroups: one `kgroups coordinator` replica on PostgreSQL (Debian's, fsync on,
tests/postgres.py), then three on a fresh database. Each replica (broker) is given
`--groups` groups of `--members` members (the raw-protocol members of bench/loadgen.py,
each on its own connection to its group's coordinator, found with FindCoordinator as a
consumer finds it), so three replicas carry three times the groups, members and
heartbeats of one. Every member heartbeats every `--interval` seconds, as a consumer's
heartbeat thread does; for `--seconds` each heartbeat's round trip is timed and each
server process's CPU time (its own and its children's, from /proc) is read before and
after. Beside it, the same load on Kafka: one broker, then three (KRaft,
`__consumer_offsets` replicated three times, as bench/failover.py's).

Every server process is pinned to the same one core (the load generator has the other):
on this 2-core machine the three replicas share a core, so the figure that carries to a
cluster of three machines is each replica's CPU share at one and at three, beside the
latency the members saw.

    python bench/scale.py [--groups 100] [--members 5] [--interval 1] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp

from bench.common import KAFKA_LABEL, LOAD_CPU, kafka_broker, percentile, pin_self
from bench.failover import TOPIC, KafkaTrio, Probe, Replicas, close
from bench.loadgen import Member, connect, form_group, now
from kgroups import admin
from kgroups.protocol.build import build
from tests.postgres import PostgresServer

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    target: str
    nodes: int
    groups: int
    members: int
    busiest: int
    """Groups on the node that coordinates the most."""
    rate: float
    p50_ms: float
    p99_ms: float
    cpu: list[float]
    """Each node's CPU share over the timed window (1.0: a whole core)."""


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of `pid` and every process under it."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)
        times[child] = (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += times.get(p, 0.0)
        todo += children.get(p, [])
    return total


async def coordinators_of(addresses: list[tuple[str, int]], groups: list[str]) -> dict[str, int]:
    """Each group's coordinator (its node id), as FindCoordinator answers."""
    found: dict[str, int] = {}
    limit = asyncio.Semaphore(20)

    async def one(group: str) -> None:
        async with limit:
            probe = Probe(group, addresses)
            close(await probe.locate())
            found[group] = probe.node

    await asyncio.gather(*(one(g) for g in groups))
    return found


async def load(
    target: str,
    addresses: list[tuple[str, int]],
    nodes: dict[int, tuple[str, int]],
    pids: list[int],
    groups: int,
    members: int,
    interval: float,
    seconds: float,
) -> Row:
    """`groups` groups of `members` on the nodes, heartbeating; the timed figures."""
    names = [f"scale-{target}-{len(nodes)}-{k}" for k in range(groups)]
    where = await coordinators_of(addresses, names)
    limit = asyncio.Semaphore(50)
    formed: list[Member] = []

    async def form(group: str) -> None:
        async with limit:
            for _ in range(60):
                host, port = nodes[where[group]]
                try:
                    formed.extend(await form_group(host, port, group, TOPIC, members, 1))
                    return
                except ConnectionError:  # the coordinator moved since it was found (a
                    # replica's view a tick old; a partition's leader elected again)
                    await asyncio.sleep(0.5)
                    where.update(await coordinators_of(addresses, [group]))
            raise RuntimeError(f"{group} never formed")

    await asyncio.gather(*(form(g) for g in names))
    latencies: list[float] = []
    errors = 0
    start_at = now() + interval  # every member has had a first beat before timing starts
    stop_at = start_at + seconds

    async def beat(m: Member) -> None:
        nonlocal errors
        await asyncio.sleep(random.uniform(0, interval))
        while now() < stop_at:
            sent = now()
            code = await m.heartbeat()
            if sent >= start_at:
                latencies.append(now() - sent)
                errors += code != 0
            await asyncio.sleep(max(0.0, interval - (now() - sent)))

    beating = [asyncio.create_task(beat(m)) for m in formed]
    await asyncio.sleep(max(0.0, start_at - now()))
    before = [cpu_seconds(p) for p in pids]
    began = time.monotonic()
    await asyncio.gather(*beating)
    elapsed = time.monotonic() - began
    cpu = [(cpu_seconds(p) - b) / elapsed for p, b in zip(pids, before, strict=True)]
    for m in formed:
        close(m.conn)
    if errors:
        raise RuntimeError(f"{target}: {errors} heartbeats failed")
    return Row(
        target, len(nodes), groups, len(formed), max(Counter(where.values()).values()),
        len(latencies) / seconds, percentile(latencies, 50) * 1000,
        percentile(latencies, 99) * 1000, cpu,
    )  # fmt: skip


async def kgroups_rows(args: argparse.Namespace) -> list[Row]:
    pg = PostgresServer(fsync=True).start()
    rows = []
    try:
        for n in (1, 3):
            tmp = Path(tempfile.mkdtemp(prefix="kgroups-scale-"))
            replicas = Replicas(pg.create_database(), tmp, 5.0, pg.log)
            try:
                for r in range(n):
                    replicas.start(r)
                replicas.settle(n)
                await admin.create_topic("127.0.0.1", replicas.ports[0], TOPIC, 1)
                addresses = [("127.0.0.1", p) for p in replicas.ports.values()]
                nodes = await node_ids(addresses)
                pids = [p.pid for p in replicas.procs.values()]
                rows.append(await load("kgroups", addresses, nodes, pids, args.groups * n,
                                       args.members, args.interval, args.seconds))  # fmt: skip
            finally:
                replicas.close()
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        pg.close()
    return rows


async def node_ids(addresses: list[tuple[str, int]]) -> dict[int, tuple[str, int]]:
    """node id -> address, from Metadata (what a client's bootstrap learns)."""
    conn = await connect(*addresses[0])
    try:
        answer = await conn.request(build(md_req.MetadataRequest, {"topics": []}),
                                    md_resp.MetadataResponse)  # fmt: skip
    finally:
        close(conn)
    return {int(b.node_id): (b.host, int(b.port)) for b in answer.brokers}


async def kafka_rows(args: argparse.Namespace) -> list[Row]:
    rows = []
    with kafka_broker() as broker:
        if broker is None:
            return []
        assert broker.pid is not None
        addresses = [(broker.host, broker.port)]
        await admin.create_topic(broker.host, broker.port, TOPIC, 1)
        nodes = await node_ids(addresses)
        rows.append(await load(KAFKA_LABEL, addresses, nodes, [broker.pid], args.groups,
                               args.members, args.interval, args.seconds))  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="kafka-scale-"))
    trio = KafkaTrio(tmp)
    try:
        trio.start(1, 2, 3)
        await admin.create_topic("127.0.0.1", trio.brokers[1].port, TOPIC, 1)
        nodes = await node_ids(trio.addresses)
        pids = [b.proc.pid for b in trio.brokers.values() if b.proc is not None]
        rows.append(await load(KAFKA_LABEL, trio.addresses, nodes, pids, args.groups * 3,
                               args.members, args.interval, args.seconds))  # fmt: skip
    finally:
        trio.close()
    return rows


def table(rows: list[Row]) -> None:
    print(f"{'target':<14}{'nodes':>6}{'groups':>8}{'busiest':>9}{'members':>9}{'hb/s':>8}"
          f"{'p50 ms':>8}{'p99 ms':>8}  CPU per node")  # fmt: skip
    for r in rows:
        cpu = " ".join(f"{c:.0%}" for c in r.cpu)
        print(f"{r.target:<14}{r.nodes:>6}{r.groups:>8}{r.busiest:>9}{r.members:>9}{r.rate:>8.0f}"
              f"{r.p50_ms:>8.2f}{r.p99_ms:>8.2f}  {cpu}")  # fmt: skip


def ratios(rows: list[Row]) -> None:
    for target in dict.fromkeys(r.target for r in rows):
        one, three = (next(r for r in rows if r.target == target and r.nodes == n) for n in (1, 3))
        share = max(three.cpu) / max(one.cpu) if max(one.cpu) else float("nan")
        print(f"{target}: 3 nodes hold {three.groups / one.groups:.1f}x the groups; p99 "
              f"{three.p99_ms / one.p99_ms:.2f}x, p50 {three.p50_ms / one.p50_ms:.2f}x, the "
              f"busiest node's CPU {share:.2f}x of one node's")  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    rows = await kgroups_rows(args)
    if not os.environ.get("KGROUPS_BENCH_NO_KAFKA"):
        rows += await kafka_rows(args)
    print(f"\n{args.groups} groups of {args.members} members per node, a heartbeat every "
          f"{args.interval:g} s per member, timed for {args.seconds:g} s; every server on "
          f"one core:")  # fmt: skip
    table(rows)
    ratios(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups", type=int, default=100, help="groups per node")
    parser.add_argument("--members", type=int, default=5, help="members per group")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between heartbeats")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    pin_self(LOAD_CPU)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
