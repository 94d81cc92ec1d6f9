"""What every tier shares.

`make test` runs the tiers on several workers (pytest-xdist, `--dist loadgroup`); what
cannot share a worker's neighbours is placed here (`pytest_collection_modifyitems`): the
kind cluster's tests on one worker, in order; the e2e tier on two (a control plane
each); a module whose fixtures outlive a test (a module-scoped coordinator, a broker) on
one worker, so they are set up once; tests that measure latency beside an attack, the
demo's whole story and the Spark applications' tests (`alone`) after the others, by
themselves.

Every coroutine test runs under `_no_leaked_tasks`: a task it (or its fixtures) started and
left running fails it, by name, as kopf's own tests do (a task nobody keeps is work nobody
stops, and its failure is seen by nobody).

librdkafka (confluent-kafka) aborts the whole process when one of its clients is destroyed
from one of its own threads, and Python may do exactly that: a client left in a reference
cycle is destroyed by whichever thread next triggers the garbage collector, possibly a
librdkafka callback thread (confluentinc/confluent-kafka-python#2129). So after each test
of a module that uses confluent-kafka in this process, the garbage is collected here, on
the main thread, and no such client outlives its test.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import gc
import inspect
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.tiers import TierSummary

SPARK_TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
"""The JVM of every Spark application a test starts (through pyspark, the demo's too) runs
a short job: without the optimizing compiler and with the serial collector it costs ~40%
less CPU than the JVM's defaults (12-13 against 20-22 CPU-seconds for a short local job,
measured here), on a machine the whole tier set keeps busy. Users' jobs keep the defaults.
With C1 alone the JVM reserves a small code cache, which Delta Lake's writes filled (the
JVM then stops compiling): hence the explicit size."""
JVM_TMP = Path(tempfile.mkdtemp(prefix="kgroups-test-jvm-"))
"""java.io.tmpdir of the Spark JVMs the tests start on this machine: the native libraries
they unpack (snappy, lz4) and Spark's artifact directories go there, a JVM a test kills
leaves them behind, and /tmp filled up run after run. The directory goes when the process
that made it exits (its pyspark subprocesses are stopped by then)."""
atexit.register(shutil.rmtree, JVM_TMP, True)
LOCAL_SPARK_JVM = f"{SPARK_TEST_JVM} -Djava.io.tmpdir={JVM_TMP}"
"""SPARK_TEST_JVM for a JVM on this machine (not in a pod: the path is this machine's)."""
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{LOCAL_SPARK_JVM}' pyspark-shell"
)

ALONE = (
    "tests/integration/test_hostile.py",
    "tests/integration/test_abuse.py",
    "tests/integration/test_wire_fuzz.py",
    "tests/e2e/test_demo.py",
)
"""They time another group's heartbeats during an attack (p99 under 500 ms; under 1 s
beside the wire fuzzer) and compare answer times: what they measure is the coordinator,
not the machine's other work (beside make test's other workers the fuzzer's victim once
saw a 4-s p99, every heartbeat of one stretch waiting on the machine). The demo joins
them: its three Spark applications are timed against 10-s sessions through a kill and a
freeze, and beside the parallel run their drivers missed heartbeats (one run's story lost
two applications in its first minute and timed out); it is also the heaviest test there
(three JVMs, 400-640 s beside the other workers, about 150 s alone)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--test-times", default=".kgroups/test-times.tsv",
                     help="where to write each test file's busy time (relative to the root)")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    times = Path(str(config.rootpath)) / str(config.getoption("--test-times"))
    config.pluginmanager.register(TierSummary(times), "kgroups-tier-summary")
    config.addinivalue_line(
        "markers",
        "alone: run by itself after the parallel run (it measures latency or times sessions)",
    )


SPARK = (
    "tests/integration/test_spark_tables.py",
    "tests/integration/test_spark_pipeline.py",
    "tests/integration/test_benchmarks_run.py::test_spark_delta",
)
"""Tests that run several Spark applications each (and a Kafka broker, for some): they run
after the parallel run, by themselves, one after the other (`alone`). On two cores, side
by side, each took twice as long or more (three at once: 385, 288 and 268 s against 217,
100 and 93 s) and one timed out; on one worker of the parallel run, in order, they took
16 minutes and still timed out beside the rest (a broker not up in 90 s, a growing topic's
new partitions not read in 240 s), while their three JVMs at a time slowed every other
worker's timed steps (the operator's status, sessions)."""


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (it names items by them)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::")[0]
        if path.startswith(ALONE) or item.nodeid.startswith(SPARK):
            item.add_marker(pytest.mark.alone)
        group = _worker_group(item, path)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


E2E_FIRST_HALF = ("test_chart.py", "test_serviceaccount_tokens.py")
"""The e2e tier on two workers: a worker starts its own control plane (etcd, kube-apiserver,
controller manager), which keeps using CPU while it runs. The first half is small (about 3
minutes): it starts beside make test's heaviest setups, and the operator's timed steps
(a new generation in status within the session + 3.5 s) missed there when they ran on it."""


def _worker_group(item: pytest.Item, path: str) -> str | None:
    if path.startswith("tests/cluster/"):
        return "cluster"
    if path.startswith("tests/e2e/"):
        return "e2e-1" if path.endswith(E2E_FIRST_HALF) else "e2e-2"
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        if any(d.scope in ("module", "class") for d in defs):
            return path
    return None


@functools.cache
def _uses_librdkafka(path: str) -> bool:
    try:
        return "confluent_kafka" in Path(path).read_text(errors="replace")
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _librdkafka_clients_die_on_the_main_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if _uses_librdkafka(str(request.path)):
        gc.collect()


@pytest.fixture(autouse=True)
def _tasks_checked_in_coroutine_tests(request: pytest.FixtureRequest) -> None:
    if isinstance(request.node, pytest.Function) and inspect.iscoroutinefunction(request.node.obj):
        # Set up before the test's own fixtures, so torn down after them.
        request.getfixturevalue("_no_leaked_tasks")


@pytest.fixture
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)  # let tasks cancelled by the teardowns finish
    leaked = [
        t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()
    ]
    for task in leaked:
        task.cancel()
    assert not leaked, f"tasks left running: {sorted(t.get_name() for t in leaked)}"
