"""Spark applications as group members: records per second for 1, 2 and 3 applications,
beside the same per-batch work without kgroups, and how long the survivors take to resume
a dead application's partitions.

Throughput. The same records (P partitions, a warm-up batch of M records per partition,
then R passes of N records per partition) are read in batches of at most M records per
partition (clickcount's --max-records), each batch counted per user by
examples/spark/clickcount.py's `count_users`, by:

* plain loops without kgroups: one process with its own local Spark, no group, no commit,
  no output files. Each batch looks up the end offsets, reads the ranges and counts. One
  reads the file log (kgroups' Spark data source), the other a topic of the real Kafka
  broker holding the same records through Spark's own Kafka source
  (`spark.read.format("kafka")` with assign, explicit offsets and failOnDataLoss=true, as
  kgroups' KafkaSource reads; end offsets looked up with kafka-python);
* K = 1, 2, 3 copies of clickcount.py as one group over the file log, each its own
  process and local Spark, and one copy over the Kafka topic: membership, offsets
  committed pinned to the generation, output staged and published per batch and partition.

Each application's first batch warms its Spark up (Python workers, the data source, the
JIT) and is not timed: the clock starts once every partition's first batch is done
(committed, for kgroups; polled from the coordinator every 50 ms) and stops when the last
record is. The passes are cut where the total of records done crosses each pass's share;
records/s is records over time per pass, and the table quotes the median pass. The plain
loop and the 1-application group take turns (--rounds times, over the file log and over
Kafka), since what else runs on the machine changes from minute to minute. Over the
file log the group is formed (K members, Stable) before any record is appended, so process
start-up and joining are not timed; they are shown apart ("start s": process start to
the group formed, or to the plain loop's Spark session).

Takeover. The biggest group (3 applications) reads a file log that keeps growing; one
application is killed with SIGKILL (its process group: the JVM goes too). The clock runs
from the kill until the survivors have committed progress on every partition the dead
one owned ("resumed"); "new generation" is when the group was Stable again without it.
A replacement is started and the group settles before the next trial. Target: the
session timeout plus one batch (a full batch, P x M records, at the 1-application rate
measured above).

Everything shares the machine's cores: every application runs local[2] Spark (the
default of clickcount.py), so K applications on 2 cores do not scale linearly, and the
Kafka broker and the coordinator (pinned to one core, as in the other benchmarks) compete
with Spark.

    python bench/spark.py [--partitions 6] [--per-partition 20000] [--passes 3]
        [--max-records 10000] [--apps 1,2,3] [--rounds 2] [--trials 3]
        [--session-timeout-ms 6000] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import KAFKA_LABEL, ROOT, kafka_broker, kgroups_coordinator, median
from kgroups import admin
from kgroups.spark.filelog import FileLog

CLICKCOUNT = ROOT / "examples" / "spark" / "clickcount.py"
POLL = 0.05
"""Seconds between two looks at the group's committed offsets."""
T = TypeVar("T")

Done = dict[int, int]
"""partition -> records done (the committed offset, or the plain loop's position)."""


# -- the records --------------------------------------------------------------------------


def records(partition: int, count: int) -> list[bytes]:
    """`count` clicks of 1000 users, as the JSON lines FileLog.append writes."""
    rng = random.Random(partition)
    return [
        json.dumps({"n": i, "user": f"u{rng.randrange(1000)}"}, separators=(",", ":")).encode()
        for i in range(count)
    ]


def append_lines(log: FileLog, topic: str, data: Mapping[int, list[bytes]]) -> None:
    """Append every partition's lines at once (one write each), as a writer would."""
    log.create(topic, len(data))
    for partition, lines in data.items():
        with log.path(topic, partition).open("ab") as f:
            f.write(b"".join(line + b"\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())


def produce(bootstrap: str, topic: str, data: Mapping[int, list[bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50,
                             batch_size=1 << 20, max_request_size=8 << 20)  # fmt: skip
    try:
        for partition, lines in data.items():
            for line in lines:
                producer.send(topic, line, partition=partition)
        producer.flush()
    finally:
        producer.close()


# -- measurements -------------------------------------------------------------------------


@dataclass
class Result:
    what: str
    apps: int
    source: str
    start_s: float
    rates: list[float] = field(default_factory=list)
    """records/s of each pass."""
    load: float = 0.0
    """The 1-minute load average when the measurement ended (others' work shows here)."""

    def __str__(self) -> str:
        rates = ", ".join(f"{r:,.0f}" for r in self.rates)
        return (f"{self.what}, {self.apps} app(s), {self.source}: started in {self.start_s:.1f} s; "
                f"records/s per pass {rates}; load {self.load:.1f}")  # fmt: skip

    def finish(self, points: list[tuple[float, Done]], args: argparse.Namespace) -> None:
        self.rates = pass_rates(points, args.max_records, args.passes)
        self.load = os.getloadavg()[0]


def pass_rates(points: list[tuple[float, Done]], warm: int, passes: int) -> list[float]:
    """Records/s per pass of a run seen as (time, records done per partition) points.

    The clock starts at the first point where every partition has done its warm-up
    batch; pass i ends at the first point where the total done reaches its share."""
    first = next(i for i, (_, done) in enumerate(points) if min(done.values()) >= warm)
    t_start, s_start = points[first][0], sum(points[first][1].values())
    t_end, s_end = points[-1][0], sum(points[-1][1].values())
    edges = [(t_start, s_start)]
    for i in range(1, passes):
        goal = s_start + (s_end - s_start) * i / passes
        edges.append(next((t, sum(d.values())) for t, d in points if sum(d.values()) >= goal))
    edges.append((t_end, s_end))
    return [(s1 - s0) / (t1 - t0) for (t0, s0), (t1, s1) in itertools.pairwise(edges) if t1 > t0]


class Watch:
    """One admin connection to the coordinator, on its own event-loop thread."""

    def __init__(self, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="watch", daemon=True)
        self.thread.start()
        self.admin = admin.Admin("127.0.0.1", port, client_id="bench-watch")

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def committed(self, group: str, topic: str, partitions: int) -> Done:
        got = self.call(self.admin.committed_offsets(group))
        return {p: got.get((topic, p), 0) for p in range(partitions)}

    def group(self, group: str) -> admin.GroupView:
        return self.call(self.admin.describe_group(group))

    def close(self) -> None:
        self.call(self.admin.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def wait_for(what: str, timeout: float, check: Callable[[], Any], poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return value


class App:
    """An example application (examples/spark/clickcount.py unless `script` says another,
    writing where `output` says) in its own process group (its JVM goes with it)."""

    def __init__(self, name: str, source: str, *, bootstrap: str, group: str, topic: str,
                 work: Path, args: argparse.Namespace, env: Mapping[str, str],
                 script: Path | None = None, output: list[str] | None = None) -> None:  # fmt: skip
        self.name = name
        self.log_path = work / f"{name}.log"
        self.started = time.monotonic()
        output = output or ["--output", str(work / f"out-{group}")]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(script or CLICKCOUNT), "--bootstrap", bootstrap,
                 "--group", group, "--topic", topic, "--source", source, *output,
                 "--name", name, "--master", args.master,
                 "--max-records", str(args.max_records),
                 "--session-timeout-ms", str(args.session_timeout_ms),
                 *[a for name in args.assignor or [] for a in ("--assignor", name)]],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                env={**os.environ, **env},
            )  # fmt: skip

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


def stop_all(apps: list[App]) -> None:
    """SIGTERM (finish the batch, leave the group), then whatever is left gets SIGKILL."""
    for app in apps:
        app.signal(signal.SIGTERM)
    for app in apps:
        with contextlib.suppress(subprocess.TimeoutExpired):
            app.proc.wait(timeout=60)
        app.signal(signal.SIGKILL)
        app.proc.wait()


def formed(watch: Watch, group: str, topic: str, apps: list[App]) -> bool:
    """Every application is alive, in the group, and owns partitions; the group is Stable."""
    for app in apps:
        app.check()
    view = watch.group(group)
    owners = {m.client_id for m in view.members if m.assignment.get(topic)}
    return view.state == "Stable" and owners == {a.name for a in apps} == {
        m.client_id for m in view.members
    }


def follow(watch: Watch, group: str, topic: str, partitions: int, total: int,
           apps: list[App]) -> list[tuple[float, Done]]:  # fmt: skip
    """(time, committed offsets) every POLL s until every partition has committed `total`."""
    points: list[tuple[float, Done]] = []
    deadline = time.monotonic() + 1800
    while True:
        done = watch.committed(group, topic, partitions)
        if not points or done != points[-1][1]:
            points.append((time.monotonic(), done))
        if min(done.values()) >= total:
            return points
        for app in apps:
            app.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{group}: stuck at {done}")
        time.sleep(POLL)


def kill_one(watch: Watch, apps: list[App], group: str, topic: str,
             partitions: int) -> tuple[App, float, float]:  # fmt: skip
    """SIGKILL the first of `apps` (it leaves the list); seconds from the kill until the
    group is Stable in a newer generation and until the survivors have committed progress
    on every partition it owned."""
    view = watch.group(group)
    victim = apps.pop(0)
    owned = next(m.assignment[topic] for m in view.members if m.client_id == victim.name)
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.proc.wait()
    before = watch.committed(group, topic, partitions)
    new_generation = None
    while True:
        now_view = watch.group(group)
        if (
            new_generation is None
            and now_view.generation > view.generation
            and (now_view.state == "Stable")
        ):
            new_generation = time.monotonic() - killed
        done = watch.committed(group, topic, partitions)
        if all(done[p] > before[p] for p in owned):
            resumed = time.monotonic() - killed
            return victim, new_generation or resumed, resumed
        if time.monotonic() - killed > 300:
            raise RuntimeError(f"no takeover of {owned} after 300 s: {done}")
        time.sleep(POLL)


@dataclass
class Bench:
    args: argparse.Namespace
    work: Path
    port: int
    watch: Watch
    data: dict[int, list[bytes]]
    jars: str | None = None

    @property
    def total(self) -> int:
        return int(self.args.max_records + self.args.passes * self.args.per_partition)

    def app(self, name: str, source: str, group: str, topic: str) -> App:
        env = {"SPARK_LOCAL_IP": "127.0.0.1"}
        if self.jars:
            env["KGROUPS_SPARK_JARS"] = self.jars
        return App(name, source, bootstrap=f"127.0.0.1:{self.port}", group=group,
                   topic=topic, work=self.work, args=self.args, env=env)  # fmt: skip

    def create_topic(self, topic: str) -> None:
        self.watch.call(self.watch.admin.create_topic(topic, self.args.partitions))

    def plain(self, what: str, source: str, topic: str) -> Result:
        """The loop without kgroups, in its own process (see `plain_loop`)."""
        started = time.monotonic()
        cmd = [sys.executable, str(Path(__file__).resolve()), "plain", "--source", source,
               "--topic", topic, "--partitions", str(self.args.partitions),
               "--total", str(self.total), "--max-records", str(self.args.max_records),
               "--master", self.args.master]  # fmt: skip
        if self.jars:
            cmd += ["--jars", self.jars]
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        with (self.work / f"plain-{topic}.log").open("wb") as log:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, cwd=ROOT, env=env,
                                  check=False, timeout=1800)  # fmt: skip
        if done.returncode != 0:
            tail = (self.work / f"plain-{topic}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the plain loop failed:\n{tail}")
        events = [json.loads(line) for line in done.stdout.splitlines()]
        ready = next(e["ready"] for e in events if "ready" in e)
        points = [(e["t"], {int(p): n for p, n in e["done"].items()})
                  for e in events if "done" in e]  # fmt: skip
        result = Result(what, 1, source.partition(":")[0], ready - started)
        result.finish(points, self.args)
        return result

    def kgroups_files(self, k: int, run: int) -> tuple[Result, list[App]]:
        """K applications over a fresh file-log topic; the group forms before any record
        exists. Returns the applications still running (the caller stops them)."""
        topic, group = f"clicks-{k}-{run}", f"bench-files-{k}-{run}"
        log = FileLog(self.work / "log")
        log.create(topic, self.args.partitions)
        self.create_topic(topic)
        started = time.monotonic()
        apps = [self.app(f"files{k}-{run}-app{i}", f"files:{self.work / 'log'}", group, topic)
                for i in range(k)]  # fmt: skip
        try:
            wait_for(f"{k} applications in {group}", 600,
                     lambda: formed(self.watch, group, topic, apps))  # fmt: skip
            result = Result("kgroups clickcount", k, "files", time.monotonic() - started)
            append_lines(log, topic, self.data)
            points = follow(self.watch, group, topic, self.args.partitions, self.total, apps)
            result.finish(points, self.args)
        except BaseException:
            stop_all(apps)
            raise
        return result, apps

    def kgroups_kafka(self, bootstrap: str, topic: str, run: int) -> Result:
        """One application over the broker's topic, which holds every record already (the
        topic is registered with the coordinator by the caller)."""
        group = f"bench-kafka-1-{run}"
        app = self.app(f"kafka-{run}-app0", f"kafka:{bootstrap}", group, topic)
        try:
            wait_for(f"the application in {group}", 600,
                     lambda: formed(self.watch, group, topic, [app]))  # fmt: skip
            result = Result("kgroups clickcount", 1, "kafka", time.monotonic() - app.started)
            points = follow(self.watch, group, topic, self.args.partitions, self.total, [app])
            result.finish(points, self.args)
            return result
        finally:
            stop_all([app])

    def takeover(self, apps: list[App], k: int, run: int, trials: int) -> list[tuple[float, float]]:
        """Kill one of `apps` (the group of `kgroups_files(k, run)`) per trial while a writer
        appends; (s to the new generation, s to progress on all its partitions) each."""
        topic, group = f"clicks-{k}-{run}", f"bench-files-{k}-{run}"
        parts = self.args.partitions
        log = FileLog(self.work / "log")
        stopping = threading.Event()

        def write() -> None:
            n = 0
            while not stopping.wait(0.2):
                for p in range(parts):
                    log.append(topic, p, [{"n": n + i, "user": f"u{i % 1000}"} for i in range(50)])
                n += 50

        writer = threading.Thread(target=write, name="writer", daemon=True)
        writer.start()
        times = []
        try:
            for trial in range(trials):
                self._settle(apps, group, topic, k)
                victim, new_generation, resumed = kill_one(self.watch, apps, group, topic, parts)
                times.append((new_generation, resumed))
                print(f"  takeover {trial + 1}: {victim.name}; new generation "
                      f"{new_generation:.2f} s, resumed {resumed:.2f} s", flush=True)  # fmt: skip
                apps.append(self.app(f"files{k}-{run}-app{k + trial}", f"files:{self.work / 'log'}",
                                     group, topic))  # fmt: skip
        finally:
            stopping.set()
            writer.join(10)
        return times

    def _settle(self, apps: list[App], group: str, topic: str, k: int) -> None:
        """The group is Stable with k members, and every partition has moved on since."""
        wait_for(f"{k} applications in {group}", 600,
                 lambda: formed(self.watch, group, topic, apps))  # fmt: skip
        parts = self.args.partitions
        base = self.watch.committed(group, topic, parts)
        wait_for("progress on every partition", 300, lambda: all(
            d > base[p] for p, d in self.watch.committed(group, topic, parts).items()))  # fmt: skip


def kafka_jars() -> str:
    """Spark's Kafka source, fetched from Maven Central by tools/spark/fetch.sh."""
    done = subprocess.run(["bash", str(ROOT / "tools/spark/fetch.sh")], check=True,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


# -- the plain loop (a child process) -----------------------------------------------------


@dataclass(frozen=True)
class Span:
    partition: int
    start: int
    end: int


def plain_loop(args: argparse.Namespace) -> None:
    """Batches of at most --max-records per partition until every partition is read to
    --total, counted by clickcount's count_users; one JSON line per batch on stdout."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    spec = importlib.util.spec_from_file_location("clickcount", CLICKCOUNT)
    assert spec is not None
    assert spec.loader is not None
    clickcount = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(clickcount)
    builder = SparkSession.builder.master(args.master).appName("plain")
    builder = builder.config("spark.ui.enabled", "false")
    if args.jars:
        jars = sorted(str(p) for p in Path(args.jars).glob("*.jar"))
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kind, _, where = args.source.partition(":")
    parts, topic = list(range(args.partitions)), args.topic
    read: Callable[[dict[int, tuple[int, int]]], Any]
    if kind == "files":
        from kgroups.spark.sources import FileLogSource

        source = FileLogSource(spark, where)

        def ends() -> dict[int, int]:
            return {p: e for p, (_, e) in source.offsets(topic, parts).items()}

        def read(ranges: dict[int, tuple[int, int]]) -> Any:
            return source.read(topic, ranges)

    else:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=where, enable_auto_commit=False)
        tps = [TopicPartition(topic, p) for p in parts]

        def ends() -> dict[int, int]:
            return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}

        def read(ranges: dict[int, tuple[int, int]]) -> Any:
            start = {topic: {str(p): r[0] for p, r in ranges.items()}}
            end = {topic: {str(p): r[1] for p, r in ranges.items()}}
            frame = (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", where)
                .option("assign", json.dumps({topic: sorted(ranges)}))
                .option("startingOffsets", json.dumps(start))
                .option("endingOffsets", json.dumps(end))
                .option("failOnDataLoss", "true")
                .load()
            )
            return frame.select(f.col("partition").cast("int"), f.col("offset"),
                                f.col("value").cast("string"))  # fmt: skip

    print(json.dumps({"ready": time.monotonic()}), flush=True)
    positions = dict.fromkeys(parts, 0)
    while min(positions.values()) < args.total:
        began = time.monotonic()
        end = ends()
        looked = time.monotonic()
        spans = [Span(p, positions[p], min(end[p], positions[p] + args.max_records))
                 for p in parts if end[p] > positions[p]]  # fmt: skip
        if not spans:
            time.sleep(0.5)
            continue
        counts = clickcount.count_users(read({s.partition: (s.start, s.end) for s in spans}),
                                        spans)  # fmt: skip
        counted = sum(sum(c.values()) for c in counts.values())
        assert counted == sum(s.end - s.start for s in spans), (counted, spans)
        for s in spans:
            positions[s.partition] = s.end
        now = time.monotonic()
        print(json.dumps({"t": now, "done": positions}), flush=True)
        print(
            f"batch {spans[0].start}: end offsets {looked - began:.3f} s, "
            f"read and count {now - looked:.3f} s",
            file=sys.stderr,
            flush=True,
        )
    spark.stop()


# -- main ---------------------------------------------------------------------------------


def merge(results: list[Result]) -> list[Result]:
    """One row per (what, apps, source): the passes of every round together."""
    rows: dict[tuple[str, int, str], list[Result]] = {}
    for r in results:
        rows.setdefault((r.what, r.apps, r.source), []).append(r)
    merged = []
    for (what, apps, source), runs in rows.items():
        row = Result(what, apps, source, median([r.start_s for r in runs]))
        row.rates = [rate for r in runs for rate in r.rates]
        row.load = median([r.load for r in runs])
        merged.append(row)
    return merged


def report(results: list[Result], takeovers: list[tuple[float, float]], group: int,
           args: argparse.Namespace) -> None:  # fmt: skip
    batch = args.partitions * args.max_records
    print(f"\nSpark members: records/s ({args.partitions} partitions x "
          f"{args.per_partition:,} records per pass, {args.passes} passes after a warm-up "
          f"batch; batches of {args.max_records:,} records per partition; "
          f"each application local Spark '{args.master}')")  # fmt: skip
    header = f"{'what':<34}{'apps':>5}  {'source':<12}{'start s':>8}"
    print(f"{header}{'median rec/s':>14}{'min':>10}{'max':>10}{'load':>7}")
    by: dict[tuple[str, int, str], float] = {}
    for r in merge(results):
        source = KAFKA_LABEL if r.source == "kafka" else "file log"
        m = median(r.rates)
        by[(r.what, r.apps, r.source)] = m
        print(f"{r.what:<34}{r.apps:>5}  {source:<12}{r.start_s:>8.1f}"
              f"{m:>14,.0f}{min(r.rates):>10,.0f}{max(r.rates):>10,.0f}{r.load:>7.1f}")  # fmt: skip
    plain_files = by.get(("plain loop, no kgroups", 1, "files"))
    plain_kafka = by.get(("Spark's Kafka source, no kgroups", 1, "kafka"))
    kg = {(k, s): v for (w, k, s), v in by.items() if w == "kgroups clickcount"}
    print()
    if plain_files and (1, "files") in kg:
        ratio = kg[(1, "files")] / plain_files
        print(f"kgroups 1 app / plain loop, both on the file log = {ratio:.3f}: the cost of "
              f"membership, fencing and publishing is {100 * (1 - ratio):.1f}% "
              "(target < 10%)")  # fmt: skip
    if plain_kafka and (1, "kafka") in kg:
        ratio = kg[(1, "kafka")] / plain_kafka
        print(f"kgroups 1 app / Spark's Kafka source, both on Kafka = {ratio:.3f}: the cost "
              f"is {100 * (1 - ratio):.1f}% (target < 10%)")  # fmt: skip
    if plain_kafka and (1, "files") in kg:
        print(f"kgroups 1 app on the file log / Spark's Kafka source on Kafka = "
              f"{kg[(1, 'files')] / plain_kafka:.3f} (the sources differ too)")  # fmt: skip
    if (1, "files") in kg:
        for k in sorted(k for k, s in kg if s == "files" and k > 1):
            print(
                f"kgroups {k} apps / 1 app (file log) = {kg[(k, 'files')] / kg[(1, 'files')]:.2f}"
            )
    if takeovers:
        gens, resumed = [t[0] for t in takeovers], [t[1] for t in takeovers]
        one_app = kg.get((1, "files"))
        batch_s = batch / one_app if one_app else float("nan")
        target = args.session_timeout_ms / 1000 + batch_s
        assignors = ", ".join(args.assignor or ["cooperative-sticky"])
        print(f"\nTakeover ({group} applications, one killed with SIGKILL while records "
              f"are appended; {len(takeovers)} trials; assignors {assignors})")  # fmt: skip
        print(f"{'':<34}{'median s':>10}{'min':>8}{'max':>8}")
        for label, values in (("kill -> new generation", gens), ("kill -> resumed", resumed)):
            print(f"{label:<34}{median(values):>10.2f}{min(values):>8.2f}{max(values):>8.2f}")
        print(f"target: session timeout {args.session_timeout_ms / 1000:.1f} s + one batch "
              f"({batch:,} records at the 1-app rate, {batch_s:.2f} s) "
              f"= {target:.2f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("plain", help="(internal) the plain loop, without kgroups")
    child.add_argument("--source", required=True)
    child.add_argument("--topic", required=True)
    child.add_argument("--partitions", type=int, required=True)
    child.add_argument("--total", type=int, required=True)
    child.add_argument("--max-records", type=int, required=True)
    child.add_argument("--master", required=True)
    child.add_argument("--jars")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--per-partition", type=int, default=20_000,
                        help="records per partition in each pass")  # fmt: skip
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--max-records", type=int, default=10_000,
                        help="a batch's records per partition (and the warm-up's)")  # fmt: skip
    parser.add_argument("--apps", default="1,2,3", help="group sizes over the file log")
    parser.add_argument("--rounds", type=int, default=2,
                        help="how often the plain loops and 1-app groups alternate")  # fmt: skip
    parser.add_argument("--trials", type=int, default=3, help="takeovers (0: none)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--assignor", action="append",
                        help="the applications' assignor (default: clickcount's)")  # fmt: skip
    parser.add_argument("--master", default="local[2]", help="each application's Spark")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data")
    parser.add_argument("--sources", default="files,kafka", help="what to measure")
    args = parser.parse_args()
    if args.command == "plain":
        plain_loop(args)
        return
    if args.per_partition < args.max_records:
        parser.error("--per-partition must be at least --max-records")
    sizes = [int(k) for k in args.apps.split(",")]
    began = time.monotonic()
    print(f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    total = args.max_records + args.passes * args.per_partition
    data = {p: records(p, total) for p in range(args.partitions)}
    results: list[Result] = []
    takeovers: list[tuple[float, float]] = []
    with contextlib.ExitStack() as stack:
        if args.keep:
            work = Path(tempfile.mkdtemp(prefix="kgroups-bench-spark-"))
            print(f"logs and data in {work}", flush=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kgroups-bench-")))
        coordinator = stack.enter_context(kgroups_coordinator())
        watch = Watch(coordinator.port)
        bench = Bench(args, work, coordinator.port, watch, data)
        try:
            append_lines(FileLog(work / "log"), "plain", data)
            # The plain loop and one application alternate (others' load varies), then
            # the bigger groups; the biggest stays up for the takeovers.
            plan = [(1, run) for run in range(args.rounds)] if 1 in sizes else []
            plan += [(k, 0) for k in sizes if k != 1]
            if "files" not in args.sources:
                plan = []
            for k, run in plan:
                if k == 1:
                    files = f"files:{work / 'log'}"
                    results.append(bench.plain("plain loop, no kgroups", files, "plain"))
                    print(f"  {results[-1]}", flush=True)
                result, apps = bench.kgroups_files(k, run)
                results.append(result)
                print(f"  {result}", flush=True)
                try:
                    if k == max(sizes) and k >= 2 and args.trials:
                        takeovers = bench.takeover(apps, k, run, args.trials)
                finally:
                    stop_all(apps)
            if "kafka" in args.sources:
                run_kafka(bench, results)
        finally:
            watch.close()
    report(results, takeovers, max(sizes), args)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; "
          f"{(time.monotonic() - began) / 60:.1f} minutes in all")  # fmt: skip


def run_kafka(bench: Bench, results: list[Result]) -> None:
    with kafka_broker() as broker:
        if broker is None:
            print("(no Kafka broker here: the Kafka rows are left out)", file=sys.stderr)
            return
        import kafkapeer  # type: ignore[import-not-found]

        bootstrap = f"{broker.host}:{broker.port}"
        bench.jars = kafka_jars()
        kafkapeer.create_topic(bootstrap, "clicks", bench.args.partitions)
        started = time.monotonic()
        produce(bootstrap, "clicks", bench.data)
        print(f"  produced {sum(map(len, bench.data.values())):,} records to Kafka in "
              f"{time.monotonic() - started:.1f} s", flush=True)  # fmt: skip
        bench.create_topic("clicks")
        for run in range(bench.args.rounds):
            results.append(bench.plain("Spark's Kafka source, no kgroups", f"kafka:{bootstrap}",
                                       "clicks"))  # fmt: skip
            print(f"  {results[-1]}", flush=True)
            results.append(bench.kgroups_kafka(bootstrap, "clicks", run))
            print(f"  {results[-1]}", flush=True)


if __name__ == "__main__":
    main()
