"""Spark applications writing one Delta Lake table: kgroups with 1, 2 and 3 applications
beside what a Spark user runs today, and how long the survivors take to resume a dead
application's partitions.

The peer is one Structured Streaming query: Spark's Kafka source (subscribe, from the
earliest offsets, `maxOffsetsPerTrigger` = partitions x batch), `foreachBatch` appending
to a Delta table with `txnAppId`/`txnVersion` (= the batch id), checkpointed: Delta's
own recipe for exactly-once writes from a stream. kgroups is K = 1, 2, 3 copies of
examples/spark/clicks_to_delta.py (--max-records = the batch) as one group, each its own
process and local Spark, writing one table. Both transform every record with
clicks_to_delta's `enrich` and read the same records (P partitions x (1 + passes)
batches, produced to the real Kafka broker before the run; JSON clicks of 1000 users).

Each run's first batch warms Spark up and is not timed: the clock starts once every
partition's first batch is written (for kgroups: committed, polled from the coordinator;
for the query: its progress events) and, for K > 1, once the group is Stable with every
application in it (the first to start reads alone meanwhile), and stops when the last
record is. Records/s per pass; the table quotes the median pass. The query and the
1-application group take turns (--rounds), since the machine's other work varies.

Takeover: three applications read a topic a producer keeps appending to (--feed records
per partition per second, few enough that three applications on this machine keep up:
otherwise the figure is the dead one's backlog, not the takeover); one is killed
with SIGKILL (its process group: the JVM goes too), and the clock runs until the
survivors have committed progress on every partition it owned. Target: the session
timeout plus one batch (P x batch records at the 1-application rate measured above).

    python bench/spark_delta.py [--partitions 6] [--batches 10000,100000] [--passes 3]
        [--apps 1,2,3] [--rounds 2] [--trials 5] [--session-timeout-ms 6000] [--feed 50]
        [--assignor NAME] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import kafka_broker, kgroups_coordinator, median
from bench.spark import (
    POLL,
    App,
    Done,
    Result,
    Watch,
    formed,
    kafka_jars,
    kill_one,
    pass_rates,
    produce,
    records,
    stop_all,
    wait_for,
)  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "spark" / "clicks_to_delta.py"
PEER = "Structured Streaming + foreachBatch"
KGROUPS = "kgroups clicks_to_delta"


def stream_peer(args: argparse.Namespace) -> None:
    """The Structured Streaming query (see the module docstring); one JSON line per
    finished batch on stdout: {"t": monotonic, "done": {partition: end offset}}."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(SCRIPT.parent))
    from clicks_to_delta import enrich  # type: ignore[import-not-found]
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    from kgroups.spark.batches import MicroBatch
    from kgroups.spark.delta import configure
    from kgroups.spark.sources import kafka_columns

    builder = SparkSession.builder.master(args.master).appName("peer")
    builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.jars", ",".join(sorted(
        str(p) for p in Path(args.jars).glob("*.jar"))))  # fmt: skip
    spark = configure(builder, snapshot_partitions=2).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    total, done = args.total, threading.Event()

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's names
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's names
            progress = event.progress
            if not progress.numInputRows:
                return
            ends = json.loads(progress.sources[0].endOffset)[args.topic]
            line = {"t": time.monotonic(), "done": {int(p): int(o) for p, o in ends.items()}}
            print(json.dumps(line), flush=True)
            if min(line["done"].values()) >= total and len(line["done"]) == args.partitions:
                done.set()

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's names
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's names
            done.set()

    spark.streams.addListener(Progress())

    def write(frame: Any, batch_id: int) -> None:
        batch = MicroBatch.of(args.topic, {0: (0, 1)}, 0, "peer")
        writer = enrich(kafka_columns(frame), batch).write.format("delta").mode("append")
        writer.option("txnAppId", "peer").option("txnVersion", str(batch_id)).save(args.table)

    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", "earliest")
              .option("includeHeaders", "true")
              .option("maxOffsetsPerTrigger", str(args.batch * args.partitions))
              .option("failOnDataLoss", "true").load())  # fmt: skip
    print(json.dumps({"ready": time.monotonic()}), flush=True)
    query = (source.writeStream.foreachBatch(write)
             .option("checkpointLocation", args.checkpoint).start())  # fmt: skip
    done.wait(1800)
    failed = query.exception()
    query.stop()
    spark.stop()
    if failed is not None:
        raise SystemExit(f"the query failed: {failed}")


class Run:
    def __init__(self, args: argparse.Namespace, work: Path, port: int, watch: Watch,
                 bootstrap: str, jars: str) -> None:  # fmt: skip
        self.args, self.work, self.port, self.watch = args, work, port, watch
        self.bootstrap, self.jars = bootstrap, jars

    def app(self, name: str, group: str, topic: str, batch: int) -> App:
        ns = argparse.Namespace(**{**vars(self.args), "max_records": batch})
        env = {"SPARK_LOCAL_IP": "127.0.0.1", "KGROUPS_SPARK_JARS": self.jars}
        return App(name, f"kafka:{self.bootstrap}", bootstrap=f"127.0.0.1:{self.port}",
                   group=group, topic=topic, work=self.work, args=ns, env=env, script=SCRIPT,
                   output=["--table", str(self.work / f"table-{group}")])  # fmt: skip

    def peer(self, topic: str, batch: int, run: int) -> Result:
        started = time.monotonic()
        total = batch * (1 + self.args.passes)
        cmd = [sys.executable, str(Path(__file__).resolve()), "peer", "--bootstrap",
               self.bootstrap, "--topic", topic, "--partitions", str(self.args.partitions),
               "--batch", str(batch), "--total", str(total), "--master", self.args.master,
               "--jars", self.jars, "--table", str(self.work / f"table-peer-{topic}-{run}"),
               "--checkpoint", str(self.work / f"checkpoint-{topic}-{run}")]  # fmt: skip
        log = self.work / f"peer-{topic}-{run}.log"
        with log.open("wb") as err:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, cwd=ROOT,
                                  env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
                                  check=False, timeout=1800, text=True)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"the query failed:\n{log.read_text(errors='replace')[-3000:]}")
        (self.work / f"peer-{topic}-{run}.events").write_text(done.stdout)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        ready = next(e["ready"] for e in events if "ready" in e)
        points = [(e["t"], {int(p): n for p, n in e["done"].items()})
                  for e in events if "done" in e]  # fmt: skip
        result = Result(PEER, 1, f"kafka {batch}", ready - started)
        result.rates = pass_rates(points, batch, self.args.passes)
        result.load = os.getloadavg()[0]
        return result

    def kgroups(self, k: int, topic: str, batch: int, run: int) -> Result:
        group = f"delta-{topic}-{k}-{run}"
        total = batch * (1 + self.args.passes)
        apps = [self.app(f"{group}-app{i}", group, topic, batch) for i in range(k)]
        try:
            started = time.monotonic()
            points: list[tuple[float, Done]] = []
            formed_at = None
            deadline = started + 1800
            while True:
                done = self.watch.committed(group, topic, self.args.partitions)
                now = time.monotonic()
                if formed_at is None and formed(self.watch, group, topic, apps):
                    formed_at = now
                if not points or done != points[-1][1]:
                    points.append((now, done))
                if min(done.values()) >= total:
                    break
                if now > deadline:
                    raise RuntimeError(f"{group}: stuck at {done}")
                time.sleep(POLL)
            result = Result(KGROUPS, k, f"kafka {batch}", (formed_at or now) - started)
            timed = [pt for pt in points if formed_at is not None and pt[0] >= formed_at]
            result.rates = pass_rates(timed, batch, self.args.passes) if len(timed) > 2 else []
            result.load = os.getloadavg()[0]
            return result
        finally:
            stop_all(apps)

    def moved_on(self, group: str, topic: str) -> None:
        """Wait until every partition has committed progress since now."""
        parts = self.args.partitions
        base = self.watch.committed(group, topic, parts)
        wait_for("progress on every partition", 300, lambda: all(
            d > base[p] for p, d in self.watch.committed(group, topic, parts).items()))  # fmt: skip

    def takeover(self, topic: str, batch: int) -> list[float]:
        """Three applications on `topic`, which a producer keeps appending to; one killed
        per trial; seconds from the kill to progress on every partition it owned."""
        from kafka import KafkaProducer

        group, parts = f"delta-takeover-{topic}", self.args.partitions
        apps = [self.app(f"{group}-app{i}", group, topic, batch) for i in range(3)]
        stopping = threading.Event()

        def feed() -> None:
            producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20)
            tick = max(round(self.args.feed / 5), 1)
            while not stopping.wait(0.2):
                for p in range(parts):
                    for line in records(p, tick):
                        producer.send(topic, line, partition=p)
            producer.close()

        feeder = threading.Thread(target=feed, name="feeder", daemon=True)
        feeder.start()
        times: list[float] = []
        try:
            for trial in range(self.args.trials):
                wait_for("three applications in the group", 600,
                         lambda: formed(self.watch, group, topic, apps))  # fmt: skip
                self.moved_on(group, topic)
                victim, _, resumed = kill_one(self.watch, apps, group, topic, parts)
                times.append(resumed)
                print(f"  takeover {trial + 1}: {victim.name}; resumed {resumed:.2f} s",
                      flush=True)  # fmt: skip
                apps.append(self.app(f"{group}-app{3 + trial}", group, topic, batch))
        finally:
            stopping.set()
            feeder.join(10)
            stop_all(apps)
        return times


def report(results: list[Result], takeovers: list[float], args: argparse.Namespace) -> None:
    print(f"\nRecords/s into one Delta table ({args.partitions} partitions; per batch size, "
          f"a warm-up batch then {args.passes} passes of one batch per partition; each "
          f"application local Spark '{args.master}'; Kafka source)")  # fmt: skip
    print(f"{'what':<38}{'apps':>5}  {'batch/partition':>15}{'start s':>8}"
          f"{'median rec/s':>14}{'min':>10}{'max':>10}{'load':>7}")  # fmt: skip
    rows: dict[tuple[str, int, str], list[Result]] = {}
    for r in results:
        rows.setdefault((r.what, r.apps, r.source), []).append(r)
    by: dict[tuple[str, int, str], float] = {}
    for (what, apps, source), runs in rows.items():
        rates = [x for r in runs for x in r.rates]
        if not rates:
            continue
        by[(what, apps, source)] = m = median(rates)
        print(f"{what:<38}{apps:>5}  {source.split()[1]:>15}"
              f"{median([r.start_s for r in runs]):>8.1f}{m:>14,.0f}{min(rates):>10,.0f}"
              f"{max(rates):>10,.0f}{median([r.load for r in runs]):>7.1f}")  # fmt: skip
    print()
    for source in sorted({s for _, _, s in by}, key=lambda s: int(s.split()[1])):
        peer = by.get((PEER, 1, source))
        for k in sorted(k for w, k, s in by if w == KGROUPS and s == source):
            if peer:
                ratio = by[(KGROUPS, k, source)] / peer
                target = " (target >= 0.9)" if k == 1 else ""
                print(f"kgroups {k} app(s) / Structured Streaming, batches of "
                      f"{source.split()[1]}/partition = {ratio:.3f}{target}")  # fmt: skip
    if takeovers:
        batch = min(int(s.split()[1]) for _, _, s in by) if by else 0
        one = by.get((KGROUPS, 1, f"kafka {batch}"))
        batch_s = args.partitions * batch / one if one else float("nan")
        target = args.session_timeout_ms / 1000 + batch_s
        print(f"\nTakeover (3 applications, one killed with SIGKILL while records are "
              f"appended; {len(takeovers)} trials; batches of {batch:,}/partition): kill -> "
              f"resumed median {median(takeovers):.2f} s (min {min(takeovers):.2f}, max "
              f"{max(takeovers):.2f}); target: session timeout "
              f"{args.session_timeout_ms / 1000:.1f} s + one batch ({batch_s:.2f} s at the "
              f"1-app rate) = {target:.2f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("peer", help="(internal) the Structured Streaming query")
    for name in ("--bootstrap", "--topic", "--master", "--jars", "--table", "--checkpoint"):
        child.add_argument(name, required=True)
    for name in ("--partitions", "--batch", "--total"):
        child.add_argument(name, type=int, required=True)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--batches", default="10000,100000",
                        help="records per partition per batch, one run set each")  # fmt: skip
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--apps", default="1,2,3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=5, help="takeovers (0: none)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--feed", type=int, default=50,
                        help="records appended per partition per second in takeovers")  # fmt: skip
    parser.add_argument("--assignor", action="append",
                        help="the applications' assignor (default: theirs)")  # fmt: skip
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if args.command == "peer":
        stream_peer(args)
        return
    began = time.monotonic()
    sizes = [int(k) for k in args.apps.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    results: list[Result] = []
    takeovers: list[float] = []
    with contextlib.ExitStack() as stack, kafka_broker() as broker:
        if broker is None:
            raise SystemExit("the peer needs the Kafka broker (tools/kafkapeer.py)")
        import kafkapeer  # type: ignore[import-not-found]

        if args.keep:
            work = Path(tempfile.mkdtemp(prefix="kgroups-bench-delta-"))
            print(f"logs and tables in {work}", flush=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kgroups-bench-")))
        coordinator = stack.enter_context(kgroups_coordinator())
        watch = Watch(coordinator.port)
        bootstrap = f"{broker.host}:{broker.port}"
        run = Run(args, work, coordinator.port, watch, bootstrap, kafka_jars())
        try:
            for batch in batches:
                topic = f"clicks-{batch}"
                kafkapeer.create_topic(bootstrap, topic, args.partitions)
                data = {p: records(p, batch * (1 + args.passes)) for p in range(args.partitions)}
                started = time.monotonic()
                produce(bootstrap, topic, data)
                print(f"  produced {sum(map(len, data.values())):,} records to {topic} in "
                      f"{time.monotonic() - started:.1f} s", flush=True)  # fmt: skip
                for r in range(args.rounds):
                    results.append(run.peer(topic, batch, r))
                    print(f"  {results[-1]}", flush=True)
                    if 1 in sizes:
                        results.append(run.kgroups(1, topic, batch, r))
                        print(f"  {results[-1]}", flush=True)
                for k in (k for k in sizes if k != 1):
                    results.append(run.kgroups(k, topic, batch, 0))
                    print(f"  {results[-1]}", flush=True)
            if args.trials:
                topic = "clicks-takeover"
                kafkapeer.create_topic(bootstrap, topic, args.partitions)
                takeovers = run.takeover(topic, min(batches))
        finally:
            watch.close()
    report(results, takeovers, args)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; "
          f"{(time.monotonic() - began) / 60:.1f} minutes in all")  # fmt: skip


if __name__ == "__main__":
    main()
