"""What every benchmark shares: targets to measure (kgroups, a Kafka broker) and stats.

A target is a coordinator process pinned to one CPU, so "per core" figures mean what they
say; the load generator runs pinned to the other CPU. Every figure printed comes from the
same run as the figures it is compared with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

SERVER_CPU = "0"


def _kafka_label() -> str:
    """ "kafka <version>" from tools/kafka/pom.xml, the one place the peer's version is set."""
    pom = (ROOT / "tools" / "kafka" / "pom.xml").read_text()
    start = pom.find("<kafka.version>") + len("<kafka.version>")
    return "kafka " + pom[start : pom.find("</kafka.version>")]


KAFKA_LABEL = _kafka_label()
LOAD_CPU = "1"


def pin(cpu: str) -> list[str]:
    """A `taskset` prefix when the machine has it and the CPU exists."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > int(cpu):
        return ["taskset", "-c", cpu]
    return []


def pin_self(cpu: str) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > int(cpu):
        os.sched_setaffinity(0, {int(cpu)})


@dataclass
class Target:
    name: str
    host: str
    port: int


@contextlib.contextmanager
def kgroups_coordinator(*extra: str) -> Iterator[Target]:
    with tempfile.TemporaryDirectory(prefix="kgroups-bench-") as tmp:
        port_file = Path(tmp) / "port"
        cmd = [
            *pin(SERVER_CPU), sys.executable, "-m", "kgroups", "coordinator",
            "--listen", "127.0.0.1:0", "--data-dir", f"{tmp}/data", "--port-file", str(port_file),
            "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "1000",
            "--log-level", "WARNING", *extra,
        ]  # fmt: skip
        log = (Path(tmp) / "log").open("wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((Path(tmp) / "log").read_text())
                time.sleep(0.05)
            yield Target("kgroups", "127.0.0.1", int(port_file.read_text()))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


@contextlib.contextmanager
def kafka_broker() -> Iterator[Target | None]:
    """A real Kafka 4.x broker pinned like the coordinator, or None if it cannot run here."""
    try:
        import kafkapeer  # type: ignore[import-not-found]
    except ImportError:
        yield None
        return
    if os.environ.get("KGROUPS_BENCH_NO_KAFKA"):
        yield None
        return
    try:
        kafkapeer.ensure_kafka()
    except Exception as exc:  # noqa: BLE001 - a missing peer is reported, not fatal
        print(f"(Kafka broker unavailable: {exc})", file=sys.stderr)
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        port = kafkapeer.free_port()
        broker = kafkapeer.KafkaBroker(
            port, Path(tmp), group_initial_rebalance_delay_ms=0, cpu=SERVER_CPU
        )
        with broker:
            yield Target("kafka", "127.0.0.1", port)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]
