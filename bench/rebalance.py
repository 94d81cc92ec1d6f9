"""Rebalance latency: a member leaves; how long until every other member has its new
assignment?

For each group size N (10 partitions per member), N members form a group; then, per trial,
one member sends LeaveGroup and the clock runs until the last remaining member holds its
SyncGroup answer for the new generation. The remaining members behave like consumers
that heartbeat the moment the LeaveGroup is answered (so detection is one heartbeat round
trip, not a heartbeat interval): Heartbeat -> REBALANCE_IN_PROGRESS -> JoinGroup -> the
leader computes a range assignment -> SyncGroup. After each trial a fresh member joins
(untimed) to bring the group back to N. group.initial.rebalance.delay.ms is 0.

The coordinator is pinned to one CPU, the load generator to the other; the same
procedure runs against a real Kafka broker when one can run here.

    python bench/rebalance.py [--sizes 10,100,1000] [--trials 30]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    KAFKA_LABEL,
    LOAD_CPU,
    Target,
    kafka_broker,
    kgroups_coordinator,
    median,
    percentile,
    pin_self,
)
from bench.loadgen import Member, connect, form_group, now
from kgroups import admin

PER_MEMBER = 10


async def realign(members: list[Member]) -> None:
    """Every member heartbeats; those told to rejoin do, then all sync."""

    async def one(m: Member) -> None:
        while True:
            code = await m.heartbeat()
            if code == 0:
                return
            await m.join()
            if await m.sync(PER_MEMBER):
                return

    await asyncio.gather(*(one(m) for m in members))
    generations = {m.generation for m in members}
    if len(generations) != 1:
        await realign(members)


async def trial(members: list[Member]) -> float:
    leaving = members.pop(0)
    start = now()
    assert leaving.conn.transport is not None
    from kio.schema.leave_group.v5 import response as leave_resp

    fut = asyncio.get_running_loop().create_future()
    leaving.conn.waiters.append((leave_resp.LeaveGroupResponse, fut))
    leaving.conn.transport.write(leaving.leave_frame())
    await fut
    await realign(members)
    elapsed = now() - start
    leaving.conn.transport.close()
    return elapsed


async def measure(target: Target, size: int, trials: int) -> list[float]:
    topic = f"rebalance-{size}"
    partitions = size * PER_MEMBER
    # Kafka's controller refuses batches of 10,000 records, so big topics grow in steps.
    step = 5_000
    await admin.create_topic(target.host, target.admin_port, topic, min(partitions, step))
    for total in range(2 * step, partitions + step, step):
        await admin.create_partitions(target.host, target.admin_port, topic, min(total, partitions))
    group = f"rebalance-{size}"
    members = await form_group(target.host, target.port, group, topic, size, PER_MEMBER)
    latencies = []
    for _ in range(trials):
        latencies.append(await trial(members))
        newcomer = Member(
            await connect(target.host, target.port), group, topic, 0, session_ms=30_000
        )
        members.append(newcomer)

        async def rejoin_all(new: Member = newcomer) -> None:
            await asyncio.gather(new.join(), *(realign_one(m) for m in members if m is not new))
            await new.sync(PER_MEMBER)

        await rejoin_all()
        await realign(members)
    for m in members:
        assert m.conn.transport is not None
        m.conn.transport.close()
    return latencies


async def realign_one(m: Member) -> None:
    while True:
        if await m.heartbeat() != 0:
            await m.join()
            await m.sync(PER_MEMBER)
            return
        await asyncio.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    pin_self(LOAD_CPU)
    results: dict[tuple[str, int], list[float]] = {}

    def trials_for(size: int) -> int:
        return max(5, args.trials if size <= 100 else args.trials // 3)

    with kgroups_coordinator() as target:
        for size in sizes:
            results[("kgroups", size)] = asyncio.run(measure(target, size, trials_for(size)))
    with kafka_broker() as broker:
        if broker is not None:
            for size in sizes:
                results[(KAFKA_LABEL, size)] = asyncio.run(measure(broker, size, trials_for(size)))
    print("\nRebalance latency (a member leaves -> every other member has its new assignment)")
    print(f"{'target':<14}{'members':>8}{'trials':>8}{'median ms':>12}{'p99 ms':>10}")
    for (name, size), values in results.items():
        ms = [v * 1000 for v in values]
        print(f"{name:<14}{size:>8}{len(ms):>8}{median(ms):>12.1f}{percentile(ms, 99):>10.1f}")
    for size in sizes:
        ours, theirs = results.get(("kgroups", size)), results.get((KAFKA_LABEL, size))
        if ours and theirs:
            print(f"{size} members: kgroups / kafka median = {median(ours) / median(theirs):.2f}")


if __name__ == "__main__":
    main()
