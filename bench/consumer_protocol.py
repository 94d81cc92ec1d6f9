"""Kafka 4's consumer protocol (KIP-848): how fast partitions move, beside Kafka 4.4.

The members are ConsumerGroupHeartbeat clients, one connection each, on this process's
event loop (pinned to the load CPU; the server to the other). They behave as the Java
client does: heartbeat at the interval the coordinator gives, heartbeat again at once
after their assignment changed (the ack that releases or confirms partitions), and
release what an answer leaves out at once (there is no processing to finish). Both
targets run with the same settings: a heartbeat interval of --interval-ms (Kafka:
`group.consumer.heartbeat.interval.ms` and its minimum lowered to it) and a new target
computed at once (Kafka 4.3+ batches target computations by 1 s by default:
`group.consumer.assignment.interval.ms=0` turns that off, so the two do the same work).

For each group size (--sizes; a topic with 2 partitions per member):

* leave: one member of a settled group leaves (epoch -1); the time until every
  partition is held by a remaining member again;
* join: a new member joins a settled group; the time until it holds its first partition;

  each comes a second and a random part of an interval after the group settled (the
  same draws for both targets: trial n's seed is n): a fixed pause would put the event
  at one phase of the members' heartbeats, which the group's previous rebalance set, and
  measure that phase (a join exactly two intervals after a rebalance settled waits a whole
  interval for the members that must release partitions, in Kafka as in kgroups);
* heartbeats/s: every member of a settled group heartbeats back to back (fields not
  sent are "unchanged", as Java's steady heartbeats) for --seconds, first one in flight
  each (as a client sends them: a round trip each, so the figure is bound by the load
  generator's own round trips as much as by the server), then --window in flight each
  (the server's capacity, as bench/heartbeats.py measures the classic protocol's); the
  requests are encoded once and only an answer's error code is read, so that the load
  generator, on one core, does as little per heartbeat as it can.

`--store postgresql` runs kgroups as one coordinator replica on a PostgreSQL (fsync on,
pinned to the server's core with it) instead of on SQLite: the store a replicated
coordinator writes every member's epoch to. (At 700 members and more the replica loses
its leases during the group's first join, and the group never settles: see the README.)

    python bench/consumer_protocol.py [--sizes 100,1000] [--trials 5] [--seconds 3]
                                      [--window 16] [--store sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.consumer_group_heartbeat.v1 import request as hb_req
from kio.schema.consumer_group_heartbeat.v1 import response as hb_resp

from bench.common import (
    KAFKA_LABEL,
    LOAD_CPU,
    SERVER_CPU,
    START_S,
    Target,
    kafka_broker,
    kgroups_coordinator,
    median,
    pin_self,
)
from bench.loadgen import Conn, connect, find_coordinator, now
from kgroups import admin
from kgroups.protocol.build import build
from tests.postgres import PostgresServer

ERROR = struct.Struct(">h")
RETRY = {14, 15, 16}
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: try again."""


class Group:
    """Who holds what, as the members see it: `covered` partitions held by someone."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.holders: Counter[tuple[uuid.UUID, int]] = Counter()
        self.changed = asyncio.Event()

    def move(self, old: set[tuple[uuid.UUID, int]], new: set[tuple[uuid.UUID, int]]) -> None:
        for tp in old - new:
            self.holders[tp] -= 1
            if not self.holders[tp]:
                del self.holders[tp]
        for tp in new - old:
            self.holders[tp] += 1
        self.changed.set()

    @property
    def covered(self) -> int:
        return len(self.holders)


class Member:
    """One consumer-protocol member on its own connection."""

    def __init__(self, conn: Conn, group_id: str, topic: str, group: Group) -> None:
        self.conn = conn
        self.group_id, self.topic, self.group = group_id, topic, group
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.interval = 1.0
        self.owned: set[tuple[uuid.UUID, int]] = set()
        self.joined = False
        self.running = True

    async def heartbeat(self, *, full: bool = False, leave: bool = False) -> int:
        fields: dict[str, Any] = {
            "group_id": self.group_id, "member_id": self.member_id,
            "member_epoch": -1 if leave else self.epoch, "topic_partitions": None,
        }  # fmt: skip
        if not self.joined and not leave:
            fields.update(rebalance_timeout=300_000, subscribed_topic_names=[self.topic],
                          server_assignor="uniform", topic_partitions=[])  # fmt: skip
        elif full:
            by_topic: dict[uuid.UUID, list[int]] = {}
            for topic_id, p in self.owned:
                by_topic.setdefault(topic_id, []).append(p)
            fields["topic_partitions"] = [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in by_topic.items()
            ]
        answer = await self.conn.request(
            build(hb_req.ConsumerGroupHeartbeatRequest, fields),
            hb_resp.ConsumerGroupHeartbeatResponse,
        )
        code = int(answer.error_code)
        if code or leave:
            return code
        self.joined = True
        self.epoch = int(answer.member_epoch)
        self.interval = answer.heartbeat_interval.total_seconds()
        if answer.assignment is not None:
            new = {(t.topic_id, int(p)) for t in answer.assignment.topic_partitions
                   for p in t.partitions}  # fmt: skip
            if new != self.owned:
                self.group.move(self.owned, new)
                self.owned = new
                return -100  # changed: acknowledge at once
        return 0

    async def run(self) -> None:
        """Heartbeat as Java does until stopped (an answer that changed the assignment is
        acknowledged at once, with what is owned now)."""
        ack = False
        while self.running:
            code = await self.heartbeat(full=ack)
            if code in RETRY:
                await asyncio.sleep(0.1)
                continue
            if code not in (0, -100):
                raise RuntimeError(f"{self.member_id}: heartbeat error {code}")
            ack = code == -100
            if not ack:
                await asyncio.sleep(self.interval)

    async def leave(self) -> None:
        self.running = False
        await self.heartbeat(leave=True)
        self.group.move(self.owned, set())
        self.owned = set()


async def wait_for(cond: Any, timeout: float, what: str, group: Group) -> None:
    deadline = now() + timeout
    while not cond():
        left = deadline - now()
        if left <= 0:
            raise RuntimeError(f"timed out waiting for {what}")
        group.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(group.changed.wait(), min(left, 0.05))


def settled(members: list[Member], group: Group) -> bool:
    epochs = {m.epoch for m in members}
    held = sum(len(m.owned) for m in members)
    return len(epochs) == 1 and group.covered == group.partitions == held


async def trial(
    target: Target, size: int, seconds: float, n: int, interval: float, window: int
) -> tuple[float, float, float, float]:
    """(leave s, join s, heartbeats/s one in flight, and `window` in flight) for one fresh
    group of `size` members."""
    draws = random.Random(n)
    host, port = target.host, target.port
    topic = f"cp-{size}-{n}-{uuid.uuid4().hex[:6]}"
    partitions = 2 * size
    await admin.create_topic(host, target.admin_port, topic, partitions)
    group_id = f"g-{topic}"
    await find_coordinator(host, port, group_id)
    group = Group(partitions)
    members = [Member(await connect(host, port), group_id, topic, group) for _ in range(size)]
    tasks = [asyncio.ensure_future(m.run()) for m in members]
    try:
        await wait_for(lambda: settled(members, group), 120 + size / 5, "the group to settle",
                       group)  # fmt: skip
        await asyncio.sleep(1.0 + draws.uniform(0, interval))

        # leave: until every partition is held again
        leaving = members.pop(len(members) // 2)
        started = now()
        await leaving.leave()
        await wait_for(lambda: group.covered == partitions, 120, "the leaver's partitions",
                       group)  # fmt: skip
        leave_s = now() - started
        await wait_for(lambda: settled(members, group), 120, "the group to settle again", group)
        await asyncio.sleep(1.0 + draws.uniform(0, interval))

        # join: until the new member holds a partition
        new = Member(await connect(host, port), group_id, topic, group)
        started = now()
        members.append(new)
        tasks.append(asyncio.ensure_future(new.run()))
        await wait_for(lambda: bool(new.owned), 120, "the new member's first partition", group)
        join_s = now() - started
        await wait_for(lambda: settled(members, group), 120, "the group to settle again", group)

        # heartbeats/s: back to back, one in flight per member
        for m in members:
            m.running = False
        await asyncio.gather(*tasks, return_exceptions=True)
        single = await hammer(members, seconds, 1)
        windowed = await hammer(members, seconds, window)
        return leave_s, join_s, single, windowed
    finally:
        for m in members:
            m.running = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for m in [*members]:
            if m.conn.transport is not None:
                m.conn.transport.close()


async def hammer(members: list[Member], seconds: float, window: int) -> float:
    """Heartbeats answered per second, every member sending its steady heartbeat again the
    moment one is answered, `window` in flight each. The requests are encoded once and
    only the error code of an answer is read: the load generator does as little per
    heartbeat as it can, so that it measures the server."""
    done = errors = 0
    stop_at = now() + seconds
    left = len(members)
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def drive(m: Member) -> None:
        conn = m.conn
        frame = conn.frame(build(hb_req.ConsumerGroupHeartbeatRequest, {
            "group_id": m.group_id, "member_id": m.member_id, "member_epoch": m.epoch,
            "topic_partitions": None,
        }))  # fmt: skip

        in_flight = window

        def on_frame(payload: bytes) -> None:
            nonlocal done, errors, left, in_flight
            done += 1
            # correlation id, header tagged fields, throttle time, then the error code
            if ERROR.unpack_from(payload, 9)[0] != 0:
                errors += 1
            if now() < stop_at:
                assert conn.transport is not None
                conn.transport.write(frame)
                return
            in_flight -= 1
            if in_flight:
                return
            conn.on_frame = None
            left -= 1
            if left == 0 and not finished.done():
                finished.set_result(None)

        conn.on_frame = on_frame
        assert conn.transport is not None
        conn.transport.write(frame * window)

    began = now()
    for m in members:
        drive(m)
    await finished
    if errors:
        raise RuntimeError(f"{errors} heartbeats failed")
    return done / (now() - began)


def measure(target: Target, sizes: list[int], trials: int, seconds: float,
            interval: float, window: int) -> dict[int, Any]:  # fmt: skip
    out: dict[int, Any] = {}
    for size in sizes:
        runs = [asyncio.run(trial(target, size, seconds, n, interval, window))
                for n in range(trials)]  # fmt: skip
        out[size] = tuple(median([r[i] for r in runs]) for i in range(4))
    return out


@contextlib.contextmanager
def kgroups_on(store: str, *extra: str) -> Iterator[Target]:
    """The coordinator on `store`: SQLite, or one replica on a fresh PostgreSQL serving
    every shard."""
    if store == "sqlite":
        with kgroups_coordinator(*extra) as target:
            yield target
        return
    import psycopg

    pg = PostgresServer(fsync=True).start()
    try:
        subprocess.run(["taskset", "-a", "-p", "-c", SERVER_CPU, str(pg.pid())],
                       check=False, capture_output=True)  # fmt: skip
        url = pg.create_database()
        with kgroups_coordinator(*extra, "--store", url, "--lease-ttl", "5") as target:
            deadline = time.monotonic() + START_S
            owned = "SELECT count(*) FROM kgroups.shard_owners WHERE owner IS NOT NULL"
            while True:
                with psycopg.connect(url) as db:
                    row = db.execute(owned).fetchone()
                if row is not None and row[0] == 50:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica never took every shard")
                time.sleep(0.2)
            yield target
    finally:
        pg.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--interval-ms", type=int, default=500)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    pin_self(LOAD_CPU)
    interval, every = str(args.interval_ms), args.interval_ms / 1000
    results: dict[str, dict[int, Any]] = {}
    with kgroups_on(args.store, "--consumer-heartbeat-interval-ms", interval) as target:
        results["kgroups"] = measure(target, sizes, args.trials, args.seconds, every,
                                       args.window)  # fmt: skip
    kafka_settings = {
        "group.consumer.heartbeat.interval.ms": interval,
        "group.consumer.min.heartbeat.interval.ms": interval,
        "group.consumer.assignment.interval.ms": "0",
    }
    with kafka_broker(extra=kafka_settings) as broker:
        if broker is not None:
            results[KAFKA_LABEL] = measure(broker, sizes, args.trials, args.seconds, every,
                                               args.window)  # fmt: skip
    print(
        f"\nConsumer protocol (KIP-848): members heartbeat every {args.interval_ms} ms and "
        f"ack at once; 2 partitions per member; median of {args.trials} trials; kgroups "
        f"on {'SQLite' if args.store == 'sqlite' else 'PostgreSQL (one replica)'}"
    )
    w = args.window
    print(f"{'target':<14}{'members':>8}{'leave s':>10}{'join s':>10}"
          f"{'hb/s, 1 each':>14}{f'hb/s, {w} each':>15}")  # fmt: skip
    for name, by_size in results.items():
        for size, (leave_s, join_s, single, windowed) in by_size.items():
            print(f"{name:<14}{size:>8}{leave_s:>10.3f}{join_s:>10.3f}{single:>14,.0f}"
                  f"{windowed:>15,.0f}")  # fmt: skip
    if KAFKA_LABEL in results:
        for size in sizes:
            ours, theirs = results["kgroups"][size], results[KAFKA_LABEL][size]
            print(
                f"kgroups / kafka, {size} members: leave {ours[0] / theirs[0]:.2f}, "
                f"join {ours[1] / theirs[1]:.2f}, heartbeats/s {ours[2] / theirs[2]:.2f} "
                f"(1 in flight each), {ours[3] / theirs[3]:.2f} ({w} in flight each)"
            )


if __name__ == "__main__":
    main()
