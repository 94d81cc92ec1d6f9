"""Heartbeats per second through the real coordinator, on one core.

A group of members is formed; then every member's connection keeps a window of
Heartbeat requests in flight for a few seconds. The coordinator process is pinned to one
CPU and the load generator to the other. The same load runs against a real Kafka broker
(pinned the same way) when one can run here, so the two figures come from one run.

    python bench/heartbeats.py [--members 50] [--window 16] [--seconds 5] [--runs 3]
                               [--listeners both|plaintext|secured]

Both listeners by default: PLAINTEXT, then SASL_SSL with SCRAM-SHA-512 on both servers
(the load generator does TLS and the SCRAM exchange on every connection first).
"""

from __future__ import annotations

import argparse
import asyncio
import struct
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
    pin_self,
)
from bench.loadgen import Member, form_group, now
from kgroups import admin

ERROR = struct.Struct(">h")


class _Run:
    """One timed run: every connection keeps `window` heartbeats in flight until `stop_at`."""

    def __init__(self, group: list[Member], window: int, seconds: float) -> None:
        self.done = 0
        self.errors = 0
        self.stop_at = now() + seconds
        self.active = len(group)
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for m in group:
            self._drive(m, window)

    def _drive(self, m: Member, window: int) -> None:
        conn = m.conn
        frame = conn.frame(m.heartbeat_body())
        in_flight = window

        def on_frame(payload: bytes) -> None:
            nonlocal in_flight
            self.done += 1
            # correlation id, header tagged fields, throttle time, then the error code
            if ERROR.unpack_from(payload, 9)[0] != 0:
                self.errors += 1
            if now() < self.stop_at:
                assert conn.transport is not None
                conn.transport.write(frame)
                return
            in_flight -= 1
            if in_flight == 0:
                self.active -= 1
                if self.active == 0 and not self.finished.done():
                    self.finished.set_result(None)

        conn.on_frame = on_frame
        assert conn.transport is not None
        conn.transport.write(frame * window)


async def measure(
    target: Target, members: int, window: int, seconds: float, runs: int
) -> list[float]:
    topic = "hb"
    await admin.create_topic(target.host, target.admin_port, topic, members * 10)
    group = await form_group(target.host, target.port, "hb-group", topic, members, 10,
                             security=target.security)  # fmt: skip
    await _Run(group, window, min(seconds, 2)).finished  # warm-up (a JIT deserves one), not counted
    rates = []
    for _ in range(runs):
        start = now()
        run = _Run(group, window, seconds)
        await run.finished
        elapsed = now() - start
        if run.errors:
            raise RuntimeError(f"{target.name}: {run.errors} heartbeats failed")
        rates.append(run.done / elapsed)
    for m in group:
        m.conn.on_frame = None
        assert m.conn.transport is not None
        m.conn.transport.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--listeners", choices=("both", "plaintext", "secured"), default="both",
                        help="PLAINTEXT, SASL_SSL with SCRAM-SHA-512 (TLS and SASL on both "
                        "sides), or both")  # fmt: skip
    args = parser.parse_args()
    pin_self(LOAD_CPU)
    modes = {"both": (False, True), "plaintext": (False,), "secured": (True,)}[args.listeners]
    for secure in modes:
        results: dict[str, list[float]] = {}
        with kgroups_coordinator(secure=secure) as target:
            results["kgroups"] = asyncio.run(
                measure(target, args.members, args.window, args.seconds, args.runs)
            )
        with kafka_broker(secure=secure) as broker:
            if broker is not None:
                results[KAFKA_LABEL] = asyncio.run(
                    measure(broker, args.members, args.window, args.seconds, args.runs)
                )
        listener = "SASL_SSL (TLS, SCRAM-SHA-512)" if secure else "PLAINTEXT"
        print(
            f"\nHeartbeats/s on {listener}, server pinned to one core; {args.members} members, "
            f"{args.window} in flight each, {args.runs} runs of {args.seconds:g} s"
        )
        print(f"{'target':<14}{'median':>12}{'min':>12}{'max':>12}")
        for name, rates in results.items():
            print(f"{name:<14}{median(rates):>12,.0f}{min(rates):>12,.0f}{max(rates):>12,.0f}")
        if KAFKA_LABEL in results:
            ratio = median(results["kgroups"]) / median(results[KAFKA_LABEL])
            print(f"kgroups / kafka (median): {ratio:.2f}")


if __name__ == "__main__":
    main()
