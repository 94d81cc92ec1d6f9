"""Spark applications as one group: examples/spark/clickcount.py, three at once, reading
a topic of the real Kafka broker while it is still being appended to;
one killed (SIGKILL) mid-run, one frozen past its session timeout in the middle of a
batch. The frozen one is its driver (SIGSTOP on the Python process that is the group
member); its JVM finishes the batch's Spark job meanwhile, so the driver wakes with the
batch done and goes on to stage it and commit, as a driver paused by the machine would.

What must hold at the end: the frozen application's commit was refused; for every
partition the published files tile [0, committed offset) with no gap and no overlap, the
committed offset is the partition's end, and the counts equal a single-process count of
the input (so the refused batch was never published: an overlap or a count above the
reference would show it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from kgroups import admin
from kgroups.spark.filelog import FileLog
from tests.conftest import SPARK_TEST_JVM
from tests.integration.harness import PYTHON, ROOT, Coordinator, wait_until

PARTITIONS = 6
PUBLISHED = re.compile(r"^clicks-(\d+)-(\d+)-(\d+)\.json$")
SESSION_MS = 6000

pytestmark = pytest.mark.slow


class App:
    """One clickcount application in its own process group (the JVM goes with it)."""

    def __init__(self, coordinator: Coordinator, name: str, source: str, out: Path, tmp: Path,
                 *, submit: bool = False) -> None:  # fmt: skip
        self.name = name
        self.log_path = tmp / f"{name}.log"
        # Spark's scratch space in the test's directory: a killed app leaves it behind.
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": str(tmp / f"{name}-spark")}  # fmt: skip
        if source.startswith("kafka:"):
            env["KGROUPS_SPARK_JARS"] = kafka_jars()
        # spark-submit as from an activated virtualenv (it finds Spark through `python3`
        # on PATH); the driver's Python logs to the launcher's stdout.
        launcher = [str(Path(PYTHON).parent / "spark-submit"), "--master", "local[2]",
                    "--driver-java-options", SPARK_TEST_JVM]  # fmt: skip
        if submit:
            env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [*(launcher if submit else [PYTHON]), str(ROOT / "examples/spark/clickcount.py"),
             "--bootstrap-server", coordinator.bootstrap, "--group", "clicks", "--topic", "clicks",
             "--source", source, "--output", str(out), "--name", name,
             "--session-timeout-ms", str(SESSION_MS), "--max-records", "400"],
            stdout=log if submit else subprocess.DEVNULL, stderr=log, cwd=ROOT,
            start_new_session=True, env=env,
        )  # fmt: skip
        log.close()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def log(self, since: int = 0) -> str:
        with self.log_path.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def freeze_mid_batch(self, seconds: float, attempts: int = 3) -> str:
        """SIGSTOP the driver as soon as it starts a batch, SIGCONT after `seconds`;
        return what it logged about that batch once awake. A freeze that landed between
        two batches (the driver planned none before it slept) is tried again."""
        for _ in range(attempts):
            mark = self.log_size()
            wait_until(lambda: ": batch [" in self.log(mark), 60, "a batch", poll=0.005)  # noqa: B023
            os.kill(self.proc.pid, signal.SIGSTOP)
            time.sleep(seconds)
            woke = self.log_size()
            os.kill(self.proc.pid, signal.SIGCONT)
            with contextlib.suppress(AssertionError):
                wait_until(lambda: "dropping" in self.log(woke), 20, "the batch's end", poll=0.2)  # noqa: B023
            said = self.log(woke)
            if "commit refused" in said:
                return said
        raise AssertionError(f"{self.name} never woke with a batch to commit:\n{said[-3000:]}")

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of it is left (the JVM)
        self.proc.wait()


def kafka_jars() -> str:
    """Spark's Kafka source, from Maven Central by the project's own tools/spark/fetch.sh."""
    done = subprocess.run(["bash", str(ROOT / "tools/spark/fetch.sh")], check=True,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


class Input(Protocol):
    source: str

    def append(self, partition: int, records: list[dict[str, Any]]) -> None: ...
    def ends(self) -> dict[int, int]: ...
    def records(self, partition: int, end: int) -> list[dict[str, Any]]: ...


class FilesInput:
    def __init__(self, root: Path) -> None:
        self.log = FileLog(root)
        self.log.create("clicks", PARTITIONS)
        self.source = f"files:{root}"

    def append(self, partition: int, records: list[dict[str, Any]]) -> None:
        self.log.append("clicks", partition, records)

    def ends(self) -> dict[int, int]:
        return self.log.end_offsets("clicks", range(PARTITIONS))

    def records(self, partition: int, end: int) -> list[dict[str, Any]]:
        return self.log.read("clicks", partition, 0, end)


class KafkaInput:
    """The same records in a topic of the real Kafka broker (tools/kafkapeer)."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.bootstrap = bootstrap
        self.source = f"kafka:{bootstrap}"
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)

    def append(self, partition: int, records: list[dict[str, Any]]) -> None:
        for record in records:
            self.producer.send("clicks", json.dumps(record).encode(), partition=partition)
        self.producer.flush()

    def _consumer(self) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)

    def ends(self) -> dict[int, int]:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tps = [TopicPartition("clicks", p) for p in range(PARTITIONS)]
            return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
        finally:
            consumer.close()

    def records(self, partition: int, end: int) -> list[dict[str, Any]]:
        from kafka import TopicPartition

        consumer, tp = self._consumer(), TopicPartition("clicks", partition)
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            out: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while len(out) < end and time.monotonic() < deadline:
                for message in consumer.poll(timeout_ms=500).get(tp, []):
                    if message.offset < end:
                        out.append(json.loads(message.value))
            return out
        finally:
            consumer.close()


class Writer(threading.Thread):
    """Appends clicks to random partitions until stopped."""

    def __init__(self, target: Input) -> None:
        super().__init__(daemon=True)
        self.target, self.stopping, self.rng = target, threading.Event(), random.Random(7)

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            p = self.rng.randrange(PARTITIONS)
            records = [{"user": f"u{self.rng.randint(1, 9)}", "n": n + i} for i in range(40)]
            self.target.append(p, records)
            n += len(records)
            time.sleep(0.05)


@pytest.fixture
def records(tmp_path: Path) -> Iterator[Input]:
    """A topic of the real Kafka broker. The same scenario over the file log is the
    demo's (tests/e2e/test_demo.py: three apps, a kill and a freeze, the output tiled
    and counted); the file log under spark-submit is the test after this one."""
    import kafkapeer  # tools/kafkapeer.py: the real broker, from Maven Central

    with kafkapeer.KafkaBroker(kafkapeer.free_port(), tmp_path / "kafka") as broker:
        kafkapeer.create_topic(broker.bootstrap, "clicks", PARTITIONS)
        target = KafkaInput(broker.bootstrap)
        try:
            yield target
        finally:
            target.producer.close()


def published(out: Path) -> dict[int, list[tuple[int, int]]]:
    tiles: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for path in out.iterdir():
        m = PUBLISHED.match(path.name)
        if m:
            tiles[int(m[1])].append((int(m[2]), int(m[3])))
        else:
            assert path.name == ".staging", f"unexpected file in the output: {path.name}"
    return {p: sorted(t) for p, t in tiles.items()}


def caught_up(coordinator: Coordinator, ends: dict[int, int]) -> bool:
    async def committed() -> dict[tuple[str, int], int]:
        async with admin.Admin("127.0.0.1", coordinator.port) as client:
            return await client.committed_offsets("clicks")

    now = asyncio.run(committed())
    return all(now.get(("clicks", p)) == ends[p] for p in range(PARTITIONS))


def check_output(out: Path, records: Input, ends: dict[int, int]) -> None:
    """Published files tile [0, end) per partition; their counts are the input's."""
    tiles = published(out)
    for p in range(PARTITIONS):
        edge = 0
        for start, end in tiles[p]:
            assert start == edge, f"partition {p}: {tiles[p]} (gap or overlap at {edge})"
            edge = end
        assert edge == ends[p], (p, edge, ends[p])
    reference = collections.Counter(
        r["user"] for p in range(PARTITIONS) for r in records.records(p, ends[p])
    )
    counted: collections.Counter[str] = collections.Counter()
    for path in out.glob("clicks-*.json"):
        counted.update(json.loads(path.read_text()))
    assert counted == reference


def test_three_spark_apps_split_a_growing_log_exactly_once_through_kill_and_freeze(
    coordinator: Coordinator, records: Input, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # The group's topic is registered with the coordinator (for Kafka: the same partition
    # count as the broker's topic, whose records the applications read).
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "clicks", PARTITIONS))
    writer = Writer(records)
    writer.start()
    apps = [App(coordinator, f"app{i}", records.source, out, tmp_path) for i in range(3)]
    try:
        wait_until(lambda: all("reading clicks from" in a.log() for a in apps), 180,
                   "three apps in the group", poll=1)  # fmt: skip
        wait_until(lambda: out.exists() and len(published(out)) == PARTITIONS, 120,
                   "output for every partition", poll=1)  # fmt: skip

        apps[0].signal(signal.SIGKILL)  # dies mid-run, with whatever batch it had
        time.sleep(2)
        woke = apps[1].freeze_mid_batch(SESSION_MS / 1000 * 2)  # past its session timeout
        assert "commit refused" in woke, woke[-3000:]
        writer.stopping.set()
        writer.join(10)
        ends = records.ends()

        wait_until(lambda: caught_up(coordinator, ends), 180,
                   "the committed offsets to reach the end of the log", poll=2)  # fmt: skip
        check_output(out, records, ends)
    finally:
        writer.stopping.set()
        for app in apps:
            app.stop()


def test_clickcount_under_spark_submit_publishes_everything_and_leaves_on_sigterm(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    records = FilesInput(tmp_path / "log")
    for p in range(PARTITIONS):
        records.append(p, [{"user": f"u{(p * 7 + i) % 11}"} for i in range(500 + 100 * p)])
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "clicks", PARTITIONS))
    out, ends = tmp_path / "out", records.ends()
    app = App(coordinator, "submitted", records.source, out, tmp_path, submit=True)
    try:

        def done() -> bool:
            assert app.proc.poll() is None, app.log()[-3000:]
            return caught_up(coordinator, ends)

        wait_until(done, 180, "everything committed", poll=1)
        app.signal(signal.SIGTERM)
        app.proc.wait(timeout=60)

        async def members() -> int:
            async with admin.Admin("127.0.0.1", coordinator.port) as client:
                return len((await client.describe_group("clicks")).members)

        assert asyncio.run(members()) == 0, app.log()[-3000:]  # it left the group
        assert "joined clicks" in app.log()
        check_output(out, records, ends)
    finally:
        app.stop()
