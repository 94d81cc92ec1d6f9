"""The Spark member's loop (`kgroups.spark.pipeline.Pipeline`) without Spark: a source of
plain rows and a process function the test controls, against the real coordinator.

What only the loop decides: a revocation waits for the batch in flight, which still
commits and publishes (heartbeats go on meanwhile, so a batch longer than the session
timeout costs nobody their place); a new owner starts from what was committed; the
published files tile each partition exactly.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kgroups import admin
from kgroups.spark.pipeline import Pipeline
from kgroups.spark.publish import Batch
from tests.e2e.test_observability import panel_exprs
from tests.integration.harness import Coordinator, wait_until
from tests.observability.prom import Prometheus
from tests.observability.vocabulary import METRICS

PUBLISHED = re.compile(r"^t-(\d+)-(\d+)-(\d+)\.json$")


class Rows:
    """A source whose partitions hold `ends[p]` records; rows are plain tuples."""

    def __init__(self, ends: dict[int, int]) -> None:
        self.ends = ends

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {p: (0, self.ends[p]) for p in partitions}

    def read(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Any:
        return [(p, o) for p, (s, e) in sorted(ranges.items()) for o in range(s, e)]


class Held:
    """A process function whose first batch waits until released (if `hold`)."""

    def __init__(self, *, hold: bool = True) -> None:
        self.hold = hold
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, rows: Any, batches: Sequence[Batch]) -> Mapping[int, Any]:
        self.calls += 1
        if self.calls == 1 and self.hold:
            self.started.set()
            self.release.wait(30)
        return {b.partition: {"records": b.end - b.start} for b in batches}


def tiles(out: Path) -> dict[int, list[tuple[int, int]]]:
    found: dict[int, list[tuple[int, int]]] = {}
    for path in out.iterdir():
        m = PUBLISHED.match(path.name)
        if m:
            found.setdefault(int(m[1]), []).append((int(m[2]), int(m[3])))
    return {p: sorted(t) for p, t in found.items()}


def test_a_revocation_waits_for_the_batch_in_flight_which_still_publishes(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "t", 4))
    source = Rows(dict.fromkeys(range(4), 50))
    out = tmp_path / "out"
    options: dict[str, Any] = {
        "bootstrap": coordinator.bootstrap, "group": "g", "topic": "t", "source": source,
        "output": str(out), "max_records": 50, "poll_interval": 0.05,
        "session_timeout_ms": 2000, "heartbeat_interval_ms": 200,
        "rebalance_timeout_ms": 20_000, "assignors": ["range"],
    }  # fmt: skip
    held = Held()
    first = Pipeline(name="first", process=held, **options)
    second = Pipeline(name="second", process=Held(hold=False), **options)
    second_thread: threading.Thread | None = None
    first.start(timeout=20)
    first_thread = threading.Thread(target=first.run, daemon=True)
    first_thread.start()
    try:
        assert held.started.wait(20)
        generation = first.member.generation
        second_thread = threading.Thread(target=lambda: (second.start(60), second.run()),
                                         daemon=True)  # fmt: skip
        second_thread.start()
        # The batch is held for 1.5 session timeouts: the revocation waits for it, the
        # member stays in the group, and nobody else gets the partitions meanwhile.
        time.sleep(3.0)
        assert not second.member.assignment
        assert first.member.state == "preparing"
        held.release.set()
        wait_until(lambda: len(first.member.assignment) == 2 and len(second.member.assignment)
                   == 2, 30, "the partitions split")  # fmt: skip
        assert first.member.generation > generation
        wait_until(lambda: all(t and t[-1][1] == 50 for t in tiles(out).values())
                   and len(tiles(out)) == 4, 30, "every partition published to its end")  # fmt: skip
        for p, t in tiles(out).items():
            assert t == [(0, 50)], (p, t)  # the held batch published once; nothing re-read
        assert "lost" not in str(first.member.error)
    finally:
        for pipeline in (first, second):
            pipeline.stop()
        first_thread.join(10)
        if second_thread is not None:
            second_thread.join(10)
        first.close()
        second.close()


class Growing(Rows):
    """A source whose every partition grows by `step` records each time it is asked."""

    def __init__(self, partitions: int, step: int) -> None:
        super().__init__(dict.fromkeys(range(partitions), 0))
        self.step = step
        self.lock = threading.Lock()

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        with self.lock:
            for p in partitions:
                self.ends[p] += self.step
            return {p: (0, self.ends[p]) for p in partitions}


def test_the_spark_members_metrics_and_panels_on_a_real_prometheus(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """A Spark member's driver (`Pipeline(metrics=...)`) scraped by Prometheus while its
    source outgrows it: records, batches, batch durations and lag have series; every Spark
    panel of the group dashboard returns data; once the member stops, Prometheus sees the
    lag as the source's ends minus the committed offsets, and every committed record
    counted."""
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "t", 2))
    source = Growing(2, step=30)
    pipeline = Pipeline(
        name="spark", process=Held(hold=False), metrics="127.0.0.1:0",
        bootstrap=coordinator.bootstrap, group="clicks", topic="t", source=source,
        output=str(tmp_path / "out"), max_records=20, poll_interval=0.2, assignors=["range"],
    )  # fmt: skip
    pipeline.start(timeout=20)
    thread = threading.Thread(target=pipeline.run, daemon=True)
    thread.start()
    assert pipeline.metrics_address is not None
    host, port = pipeline.metrics_address
    prom = Prometheus(tmp_path / "prometheus", {"spark": [f"{host}:{port}"]})
    try:
        prom.start()
        t0 = time.time()
        wait_until(lambda: prom.query('kgroups_spark_batches_total{group="clicks"} >= 5'), 30,
                   "five micro-batches in Prometheus", poll=0.5)  # fmt: skip
        time.sleep(2)
        t1 = time.time()
        spark = [m for m in METRICS if m.source == "spark"]
        for metric in spark:
            assert prom.query_range(f'{{__name__=~"{"|".join(metric.series())}"}}', t0, t1, 1), (
                metric.name
            )
        panels = [(w, e) for w, e in panel_exprs("clicks") if "kgroups_spark_" in e]
        assert panels

        def empty() -> list[str]:
            # Rates need two scrapes inside their window: on a loaded machine (scrapes
            # late) that can take longer than the five batches did.
            until = time.time()
            return [w for w, e in panels
                    if not any(s["values"] for s in prom.query_range(e, t0, until, 1))]  # fmt: skip

        try:
            wait_until(lambda: not empty(), 30, "every Spark panel with data", poll=1.0)
        except AssertionError:
            raise AssertionError(f"panels without data: {empty()}") from None
        assert (
            float(prom.query('kgroups_spark_lag_records{group="clicks", topic="t"}')[0]["value"][1])
            > 0
        )  # the source grows faster (30 per turn) than batches read (20)
        pipeline.stop()  # between two turns: the last lag it reported is exact
        thread.join(10)
        with source.lock:
            ends = sum(source.ends.values())
        behind = ends - sum(asyncio.run(committed_offsets(coordinator, "clicks")).values())
        records = (
            f'kgroups_spark_records_total{{group="clicks"}} == {sum(source.ends.values()) - behind}'
        )
        lag = f'kgroups_spark_lag_records{{group="clicks", topic="t"}} == {behind}'
        wait_until(lambda: prom.query(lag) and prom.query(records), 10,
                   "Prometheus to see the final lag and records")  # fmt: skip
    finally:
        prom.stop()
        pipeline.stop()
        thread.join(10)
        pipeline.close()


async def committed_offsets(coordinator: Coordinator, group: str) -> dict[tuple[str, int], int]:
    async with admin.Admin("127.0.0.1", coordinator.port) as client:
        return await client.committed_offsets(group)
