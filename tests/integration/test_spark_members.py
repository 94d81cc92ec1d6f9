"""Spark applications as one group: examples/spark/clickcount.py, three at once, on the
file log while it is still being appended to; one killed (SIGKILL) mid-run, one frozen
(SIGSTOP on its whole process group, JVM included) past its session timeout.

What must hold at the end: for every partition the published files tile [0, committed
offset) with no gap and no overlap, the committed offset is the partition's end, and the
counts equal a single-process count of the input. The frozen application wakes with a
batch in hand: its commit is refused and its output never published (an overlap or a
count above the reference would show it).
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
from pathlib import Path

import pytest

from kgroups import admin
from kgroups.spark.filelog import FileLog
from tests.integration.harness import PYTHON, ROOT, Coordinator, wait_until

PARTITIONS = 6
PUBLISHED = re.compile(r"^clicks-(\d+)-(\d+)-(\d+)\.json$")
SESSION_MS = 6000

pytestmark = pytest.mark.slow


class App:
    """One clickcount application in its own process group (the JVM goes with it)."""

    def __init__(self, coordinator: Coordinator, name: str, log: Path, out: Path, tmp: Path):
        self.name = name
        self.log_path = tmp / f"{name}.log"
        self.proc = subprocess.Popen(
            [PYTHON, str(ROOT / "examples/spark/clickcount.py"),
             "--bootstrap", coordinator.bootstrap, "--group", "clicks", "--topic", "clicks",
             "--source", f"files:{log}", "--output", str(out), "--name", name,
             "--session-timeout-ms", str(SESSION_MS), "--max-records", "400"],
            stdout=subprocess.DEVNULL, stderr=self.log_path.open("wb"), cwd=ROOT,
            start_new_session=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        )  # fmt: skip

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of it is left (the JVM)
        self.proc.wait()


class Writer(threading.Thread):
    """Appends clicks to random partitions until stopped."""

    def __init__(self, log: FileLog) -> None:
        super().__init__(daemon=True)
        self.log, self.stopping, self.rng = log, threading.Event(), random.Random(7)

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            p = self.rng.randrange(PARTITIONS)
            records = [{"user": f"u{self.rng.randint(1, 9)}", "n": n + i} for i in range(40)]
            self.log.append("clicks", p, records)
            n += len(records)
            time.sleep(0.05)


def published(out: Path) -> dict[int, list[tuple[int, int]]]:
    tiles: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for path in out.iterdir():
        m = PUBLISHED.match(path.name)
        if m:
            tiles[int(m[1])].append((int(m[2]), int(m[3])))
        else:
            assert path.name == ".staging", f"unexpected file in the output: {path.name}"
    return {p: sorted(t) for p, t in tiles.items()}


def test_three_spark_apps_split_a_growing_log_exactly_once_through_kill_and_freeze(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    log_dir, out = tmp_path / "log", tmp_path / "out"
    log = FileLog(log_dir)
    log.create("clicks", PARTITIONS)
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "clicks", PARTITIONS))
    writer = Writer(log)
    writer.start()
    apps = [App(coordinator, f"app{i}", log_dir, out, tmp_path) for i in range(3)]
    try:
        wait_until(lambda: all("reading clicks from" in a.log() for a in apps), 180,
                   "three apps in the group", poll=1)  # fmt: skip
        wait_until(lambda: out.exists() and len(published(out)) == PARTITIONS, 120,
                   "output for every partition", poll=1)  # fmt: skip

        apps[0].signal(signal.SIGKILL)  # dies mid-run, with whatever batch it had
        time.sleep(2)
        apps[1].signal(signal.SIGSTOP)  # frozen, JVM and all, past its session timeout
        time.sleep(SESSION_MS / 1000 * 2)
        apps[1].signal(signal.SIGCONT)  # wakes with a batch in hand
        time.sleep(SESSION_MS / 1000)
        writer.stopping.set()
        writer.join(10)
        ends = log.end_offsets("clicks", range(PARTITIONS))

        async def committed() -> dict[tuple[str, int], int]:
            async with admin.Admin("127.0.0.1", coordinator.port) as client:
                return await client.committed_offsets("clicks")

        def caught_up() -> bool:
            now = asyncio.run(committed())
            return all(now.get(("clicks", p)) == ends[p] for p in range(PARTITIONS))

        wait_until(caught_up, 180, "the committed offsets to reach the end of the log", poll=2)
        tiles = published(out)
        for p in range(PARTITIONS):
            edge = 0
            for start, end in tiles[p]:
                assert start == edge, f"partition {p}: {tiles[p]} (gap or overlap at {edge})"
                edge = end
            assert edge == ends[p], (p, edge, ends[p])
        reference = collections.Counter(
            r["user"] for p in range(PARTITIONS) for r in log.read("clicks", p, 0, ends[p])
        )
        counted: collections.Counter[str] = collections.Counter()
        for path in out.glob("clicks-*.json"):
            counted.update(json.loads(path.read_text()))
        assert counted == reference
        frozen = apps[1].log()
        assert "partitions lost" in frozen or "dropping" in frozen, frozen[-3000:]
    finally:
        writer.stopping.set()
        for app in apps:
            app.stop()
