"""A Spark member's metrics: records, micro-batches, their duration and the lag.

The loop (`kgroups.spark.loop.BatchLoop`) runs a real `GroupMember` against the real
coordinator on virtual time (tests/sim/fake_cluster.py) and reads the file source: the
file log's end offsets as `FileLogSource` reports them, its records read without Spark
(reading is Spark's job, and not what is measured here). Each micro-batch's processing
takes a known virtual time, so its duration is exact.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from kgroups.spark.filelog import FileLog
from kgroups.spark.loop import BatchLoop
from kgroups.spark.pipeline import Pipeline
from kgroups.spark.publish import Batch
from kgroups.spark.sources import FileLogSource, Ranges
from tests.sim.fake_cluster import ADDRESS, FakeCluster, MemoryStore
from tests.sim.fake_loop import FakeTimeLoop

TOPIC, PARTITIONS, GROUP = "clicks", 4, "counts"
PROCESSING = 0.5
"""Virtual seconds the user's `process` takes per micro-batch."""


class FileLogWithoutSpark(FileLogSource):
    """`FileLogSource`'s offsets (the files' complete lines); rows read directly."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.log = FileLog(root)

    def read(self, topic: str, ranges: Ranges) -> Any:
        return [
            (p, offset, line.decode())
            for p, (start, end) in sorted(ranges.items())
            for offset, line in enumerate(self.log.lines(topic, p, start, end), start)
        ]


class Driver:
    """The user's `process` (counts records per partition) and a `blocking` in which
    each micro-batch's processing takes PROCESSING virtual seconds."""

    def __init__(self) -> None:
        self.records = 0
        self.batches = 0
        self._pending = 0.0

    def process(self, rows: Any, batches: Sequence[Batch]) -> Mapping[int, Any]:
        self.records += len(rows)
        self.batches += 1
        self._pending = PROCESSING
        return {b.partition: {"records": sum(1 for r in rows if r[0] == b.partition)}
                for b in batches}  # fmt: skip

    async def blocking(self, call: Callable[[], Any]) -> Any:
        result = call()
        delay, self._pending = self._pending, 0.0
        if delay:
            await asyncio.sleep(delay)
        return result


def play(loop: FakeTimeLoop, scenario: Coroutine[Any, Any, None]) -> None:
    try:
        loop.run_until_complete(scenario)
    finally:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=60))
        loop.close()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, {"group": GROUP, **labels})
    assert found is not None, f"no sample {name} {labels}"
    return found


def test_records_batches_and_lag_follow_what_the_loop_processed_and_committed(
    tmp_path: Path,
) -> None:
    loop = FakeTimeLoop()
    store = MemoryStore()
    store.create_topic(TOPIC, PARTITIONS)
    cluster = FakeCluster(loop, store, latency=lambda: 0.0)  # a batch lasts its processing
    log = FileLog(tmp_path / "log")
    log.create(TOPIC, PARTITIONS)
    for partition, count in {0: 25, 1: 10, 3: 7}.items():
        log.append(TOPIC, partition, [{"n": n} for n in range(count)])
    registry = CollectorRegistry()
    driver = Driver()

    def committed() -> dict[int, int]:
        rows = store.rows.rows
        return {p: (r.value.offset if (r := rows.get(("offset", GROUP, TOPIC, p))) else 0)
                for p in range(PARTITIONS)}  # fmt: skip

    def true_lag() -> int:
        ends = log.end_offsets(TOPIC, range(PARTITIONS))
        return sum(ends[p] - offset for p, offset in committed().items())

    async def scenario() -> None:
        await cluster.start()
        member = BatchLoop(
            bootstrap=ADDRESS, group=GROUP, topic=TOPIC,
            source=FileLogWithoutSpark(tmp_path / "log"), process=driver.process,
            output=str(tmp_path / "out"), name="m", max_records=10, blocking=driver.blocking,
            registry=registry, session_timeout_ms=6000, heartbeat_interval_ms=1000,
            connect=cluster.connector("m"),
        )  # fmt: skip
        await member.start(timeout=30)
        assert value(registry, "kgroups_spark_records_total") == 0
        assert value(registry, "kgroups_spark_batches_total") == 0

        # One micro-batch: at most 10 records of each partition with new records.
        progress = await member.run_once()
        assert progress is not None
        assert [b.partitions for b in progress.published] == [(0, 1, 3)]
        assert value(registry, "kgroups_spark_records_total") == 10 + 10 + 7
        assert value(registry, "kgroups_spark_batches_total") == 1
        assert committed() == {0: 10, 1: 10, 2: 0, 3: 7}
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == true_lag() == 15

        # Until the source is drained: two more micro-batches, of partition 0 only.
        while (progress := await member.run_once()) is not None and progress.published:
            pass
        assert driver.batches == 3
        assert driver.records == 42
        assert value(registry, "kgroups_spark_records_total") == driver.records
        assert value(registry, "kgroups_spark_batches_total") == driver.batches
        assert value(registry, "kgroups_spark_batch_duration_seconds_count") == driver.batches
        assert value(registry, "kgroups_spark_batch_duration_seconds_sum") == pytest.approx(
            PROCESSING * driver.batches
        )
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == true_lag() == 0

        # New records: the member sees them on its next look, then works them off.
        log.append(TOPIC, 2, [{"n": n} for n in range(30)])
        member.max_records = 1_000
        await member.run_once()
        assert value(registry, "kgroups_spark_records_total") == 42 + 30
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == true_lag() == 0
        # The member's own metrics are in the same registry.
        assert value(registry, "kgroups_member_rebalances_total") == 1
        assert value(registry, "kgroups_member_commit_duration_seconds_count") == 3 + 1
        assert value(registry, "kgroups_member_assigned_partitions") == PARTITIONS
        await member.close()
        await cluster.stop()

    play(loop, scenario())


def test_the_lag_is_what_the_member_last_saw_until_its_next_turn(tmp_path: Path) -> None:
    """Lag is end minus committed as of the source's ends the loop last asked for."""
    loop = FakeTimeLoop()
    store = MemoryStore()
    store.create_topic(TOPIC, PARTITIONS)
    cluster = FakeCluster(loop, store, latency=lambda: 0.0)  # a batch lasts its processing
    log = FileLog(tmp_path / "log")
    log.create(TOPIC, PARTITIONS)
    registry = CollectorRegistry()
    driver = Driver()

    async def scenario() -> None:
        await cluster.start()
        member = BatchLoop(
            bootstrap=ADDRESS, group=GROUP, topic=TOPIC,
            source=FileLogWithoutSpark(tmp_path / "log"), process=driver.process,
            output=str(tmp_path / "out"), name="m", max_records=4, blocking=driver.blocking,
            registry=registry, session_timeout_ms=6000, heartbeat_interval_ms=1000,
            connect=cluster.connector("m"),
        )  # fmt: skip
        await member.start(timeout=30)
        await member.run_once()
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == 0
        log.append(TOPIC, 1, [{"n": n} for n in range(9)])
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == 0  # not seen yet
        await member.run_once()  # reads 4 of them
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == 9 - 4
        await member.close()
        # A closed member lags behind nothing.
        assert value(registry, "kgroups_spark_lag_records", topic=TOPIC) == 0
        await cluster.stop()

    play(loop, scenario())


def test_a_pipeline_serves_its_registry_over_http_from_the_driver(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    pipeline = Pipeline(
        bootstrap="127.0.0.1:1", group=GROUP, topic=TOPIC,
        source=FileLogWithoutSpark(tmp_path / "log"), process=Driver().process,
        output=str(tmp_path / "out"), registry=registry, metrics="127.0.0.1:0",
    )  # fmt: skip
    try:
        assert pipeline.metrics_address is not None
        host, port = pipeline.metrics_address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        pipeline.close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("kgroups_spark_batches_total", (("group", GROUP),))] == 0
    assert samples[("kgroups_member_rebalances_total", (("group", GROUP),))] == 0
    assert samples[("kgroups_member_generation", (("group", GROUP),))] == -1
    assert not any(name.endswith("_created") for name, _ in samples)
