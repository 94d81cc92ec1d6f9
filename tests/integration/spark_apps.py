"""Spark applications (examples/spark/*.py) as processes, their input and their tables.

`SparkApp` runs one application in its own process group (its JVM goes with it), so a
test can kill or freeze it whole; `freeze_at` stops it the moment its log says it
reached a step of a batch and reports what it said once thawed. The input is the file log
or a topic of the real Kafka broker (`FilesInput`, `KafkaInput`), appended to by a
`Feeder` while the applications read; `reference` is what a single process computes from
the same input, what every table must equal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kgroups import admin
from kgroups.admin.single import Admin
from kgroups.protocol.client import CoordinatorUnavailable
from kgroups.spark.filelog import FileLog
from tests.conftest import LOCAL_SPARK_JVM
from tests.integration.harness import PYTHON, ROOT, wait_until
from tests.waits import within

T = TypeVar("T")

SESSION_MS = 6000


def spark_jars() -> str:
    """The Kafka source's and Delta's jars, from Maven Central by tools/spark/fetch.sh."""
    done = subprocess.run(["bash", str(ROOT / "tools/spark/fetch.sh")], check=True,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


class SparkApp:
    """One application: `script` with `args` (its --name is `name`), by Python or, with
    `submit`, by spark-submit."""

    def __init__(self, name: str, script: str, args: list[str], tmp: Path, *,
                 submit: bool = False, env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.name = name
        self.log_path = tmp / f"{name}.log"
        # Spark's scratch space in the test's directory: a killed app leaves it behind.
        environ = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "KGROUPS_SPARK_JARS": spark_jars(),
                   "SPARK_LOCAL_DIRS": str(tmp / f"{name}-spark"), **(env or {})}  # fmt: skip
        # spark-submit as from an activated virtualenv (it finds Spark through `python3`
        # on PATH); the driver's Python logs to the launcher's stdout.
        launcher = [str(Path(PYTHON).parent / "spark-submit"), "--master", "local[2]",
                    "--driver-java-options", LOCAL_SPARK_JVM]  # fmt: skip
        if submit:
            environ["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{environ.get('PATH', '')}"
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [*(launcher if submit else [PYTHON]), str(ROOT / script), *args, "--name", name],
            stdout=log if submit else subprocess.DEVNULL, stderr=log, cwd=ROOT,
            start_new_session=True, env=environ,
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

    def alive(self) -> bool:
        assert self.proc.poll() is None, f"{self.name} exited:\n{self.log()[-3000:]}"
        return True

    def freeze_at(self, step: str, seconds: float, woke: Callable[[str], bool],
                  attempts: int = 4) -> str:  # fmt: skip
        """SIGSTOP the whole application (driver and JVM) as soon as its log shows `step`,
        SIGCONT after `seconds`; return its log once `woke` holds for what it said after
        waking. A freeze that landed elsewhere than meant is tried again."""
        said = ""
        for _ in range(attempts):
            mark = self.log_size()
            wait_until(lambda: self.alive() and step in self.log(mark), 120, step, poll=0.005)  # noqa: B023
            self.signal(signal.SIGSTOP)
            time.sleep(seconds)
            thawed = self.log_size()
            self.signal(signal.SIGCONT)
            with contextlib.suppress(AssertionError):
                wait_until(lambda: woke(self.log(thawed)), 60, f"{self.name} awake", poll=0.2)  # noqa: B023
            said = self.log(thawed)
            if woke(said):
                return said
        raise AssertionError(f"{self.name}: not what the freeze meant:\n{said[-3000:]}")

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of it is left (the JVM)
        self.proc.wait()


class Input(Protocol):
    source: str
    topic: str

    def append(self, partition: int, records: list[dict[str, Any]]) -> None: ...
    def partitions(self) -> int: ...
    def ends(self) -> dict[int, int]: ...
    def records(self, partition: int, end: int) -> list[dict[str, Any]]: ...


class FilesInput:
    def __init__(self, root: Path, topic: str, partitions: int) -> None:
        self.log, self.topic = FileLog(root), topic
        self.log.create(topic, partitions)
        self.source = f"files:{root}"

    def append(self, partition: int, records: list[dict[str, Any]]) -> None:
        self.log.append(self.topic, partition, records)

    def partitions(self) -> int:
        return self.log.partitions(self.topic) or 0

    def ends(self) -> dict[int, int]:
        return self.log.end_offsets(self.topic, range(self.partitions()))

    def records(self, partition: int, end: int) -> list[dict[str, Any]]:
        return self.log.read(self.topic, partition, 0, end)


class KafkaInput:
    """A topic of the real Kafka broker (tools/kafkapeer), written and read by the test
    through `bootstrap` (its PLAINTEXT listener); the applications read `source`."""

    def __init__(self, bootstrap: str, topic: str, source: str) -> None:
        from kafka import KafkaProducer

        self.bootstrap, self.topic, self.source = bootstrap, topic, source
        # Metadata refreshed every second: the topic grows during a test.
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                      metadata_max_age_ms=1000)  # fmt: skip

    def append(self, partition: int, records: list[dict[str, Any]]) -> None:
        for record in records:
            key = str(record.get("user", "")).encode()
            self.producer.send(self.topic, json.dumps(record).encode(), key=key,
                               partition=partition)  # fmt: skip
        self.producer.flush()

    def _consumer(self) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)

    def partitions(self) -> int:
        consumer = self._consumer()
        try:
            return len(consumer.partitions_for_topic(self.topic) or ())
        finally:
            consumer.close()

    def grow(self, partitions: int) -> None:
        from kafka.admin import KafkaAdminClient, NewPartitions

        client = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            client.create_partitions({self.topic: NewPartitions(partitions)})
        finally:
            client.close()
        wait_until(lambda: self.partitions() == partitions, 30, "the topic grown", poll=0.5)

    def ends(self) -> dict[int, int]:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions())]
            return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
        finally:
            consumer.close()

    def records(self, partition: int, end: int) -> list[dict[str, Any]]:
        from kafka import TopicPartition

        consumer, tp = self._consumer(), TopicPartition(self.topic, partition)
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            out: list[dict[str, Any]] = []
            deadline = time.monotonic() + within(60)
            while len(out) < end and time.monotonic() < deadline:
                for message in consumer.poll(timeout_ms=500).get(tp, []):
                    if message.offset < end:
                        out.append(json.loads(message.value))
            return out
        finally:
            consumer.close()

    def close(self) -> None:
        self.producer.close()


class Feeder(threading.Thread):
    """Appends clicks to random partitions (of as many as the input has) until stopped."""

    def __init__(self, target: Input) -> None:
        super().__init__(daemon=True)
        self.target, self.stopping, self.rng = target, threading.Event(), random.Random(7)
        self.count = target.partitions()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            p = self.rng.randrange(self.count)
            records = [{"user": f"u{self.rng.randint(1, 9)}", "n": n + i,
                        "page": f"/p{self.rng.randint(1, 4)}", "country": "de"}
                       for i in range(40)]  # fmt: skip
            try:
                self.target.append(p, records)
            except ValueError:  # a new partition the producer has no metadata for yet
                time.sleep(0.2)
                continue
            n += len(records)
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


class Bootstrap(Protocol):
    bootstrap: str
    """`host:port[,host:port...]`: a coordinator, or the live replicas of a cluster."""


def ask_owner(target: Bootstrap, group: str, what: Callable[[Admin, str], Awaitable[T]]) -> T:
    """`what(owner, group)` on whichever coordinator (replica) owns the group: asked
    again while the one named is gone (a replica killed, its shards not yet claimed by
    the others)."""

    async def ask() -> T:
        host, port = target.bootstrap.split(",", maxsplit=1)[0].split(":")
        async with admin.Cluster(host, int(port)) as cluster:
            _, owner = await cluster.group_admin(group)
            return await what(owner, group)

    def attempt() -> tuple[T] | None:
        try:
            return (asyncio.run(ask()),)
        except (CoordinatorUnavailable, admin.AdminError):
            return None

    (answer,) = wait_until(attempt, 30, f"an answer about {group}", poll=0.2)
    return answer


def committed(target: Bootstrap, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of `topic`."""
    offsets = ask_owner(target, group, Admin.committed_offsets)
    return {p: o for (t, p), o in offsets.items() if t == topic}


def reference(records: Input, ends: Mapping[int, int]) -> dict[tuple[int, int], str | None]:
    """(partition, offset) -> the user of that record, computed in one process."""
    return {
        (p, o): r.get("user")
        for p, end in ends.items()
        for o, r in enumerate(records.records(p, end))
    }
