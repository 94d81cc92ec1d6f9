"""Count clicks per user with Spark, as one member of a kgroups consumer group.

Run several copies with the same --group: they split the topic's partitions, take over
each other's when one dies, and publish every record's count exactly once:

    python examples/spark/clickcount.py --bootstrap-server 127.0.0.1:9092 --group clicks \\
        --topic clicks --source files:/data/log --output /data/counts

(or the same under spark-submit). Each published file is one batch of one partition,
`<output>/<topic>-<partition>-<start>-<end>.json` (end exclusive), holding
{"<user>": count} for the records in it ("null" for records without a "user" string).
SIGTERM finishes the batch in flight, then leaves the group.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kgroups.spark.pipeline import Pipeline
from kgroups.spark.publish import Batch
from kgroups.spark.sources import FileLogSource, KafkaSource, Source


def count_users(frame: Any, batches: Sequence[Batch]) -> Mapping[int, dict[str, int]]:
    """The per-batch logic: a function of the batch's DataFrame."""
    from pyspark.sql import functions as f

    rows = (
        frame.select("partition", f.get_json_object("value", "$.user").alias("user"))
        .fillna("null", subset=["user"])
        .groupBy("partition", "user")
        .count()
        .collect()
    )
    counts: dict[int, dict[str, int]] = {b.partition: {} for b in batches}
    for row in rows:
        counts[row["partition"]][row["user"]] = row["count"]
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bootstrap-server",
        "--bootstrap",
        dest="bootstrap",
        required=True,
        help="the kgroups coordinator, HOST:PORT",
    )
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--source", required=True, help="files:DIR or kafka:HOST:PORT")
    parser.add_argument("--output", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument(
        "--heartbeat-interval-ms",
        type=int,
        default=None,
        help="default: a fifteenth of the session timeout, Kafka's ratio (3 s of 45 s)",
    )
    parser.add_argument(
        "--assignor", action="append", default=None,
        choices=["range", "roundrobin", "sticky", "cooperative-sticky"],
        help="partition assignor (repeat for several; default: range, cooperative-sticky, "
        "as Java; only cooperative-sticky alone rebalances cooperatively)",
    )  # fmt: skip
    parser.add_argument("--max-records", type=int, default=10_000)
    parser.add_argument(
        "--auto-offset-reset", choices=["earliest", "latest", "none"], default="earliest",
        help="where to start without a usable committed offset (Kafka's auto.offset.reset)",
    )  # fmt: skip
    parser.add_argument("--name", default=f"clickcount-{os.getpid()}")
    parser.add_argument(
        "--metrics", default=None,
        help="serve the member's and the micro-batches' Prometheus metrics at "
        "http://HOST:PORT/metrics from the driver",
    )  # fmt: skip
    parser.add_argument(
        "--master", default=os.environ.get("SPARK_MASTER"),
        help="Spark master (default: spark-submit's --master, else local[2])",
    )  # fmt: skip
    parser.add_argument(
        "--kafka-jars", default=os.environ.get("KGROUPS_SPARK_KAFKA_JARS"),
        help="directory of Spark's Kafka source jars (tools/spark/fetch.sh prints one); "
        "under spark-submit use --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
    )  # fmt: skip
    args = parser.parse_args(argv)
    kind, _, where = args.source.partition(":")
    if kind not in ("files", "kafka") or not where:
        parser.error("--source must be files:DIR or kafka:HOST:PORT")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")  # fmt: skip
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import kgroups too
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(args.name)
    if args.master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master(args.master or "local[2]")
    for key in ("spark.ui.enabled", "spark.ui.showConsoleProgress"):  # a batch job, logged
        builder = builder.config(key, "false")
    if kind == "kafka" and args.kafka_jars:
        jars = sorted(str(p) for p in Path(args.kafka_jars).glob("*.jar"))
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    source: Source = FileLogSource(spark, where) if kind == "files" else KafkaSource(spark, where)
    heartbeat = args.heartbeat_interval_ms or max(args.session_timeout_ms // 15, 100)
    assignors = {"assignors": args.assignor} if args.assignor else {}
    pipeline = Pipeline(
        bootstrap=args.bootstrap, group=args.group, topic=args.topic, source=source,
        process=count_users, output=args.output, name=args.name,
        max_records=args.max_records, auto_offset_reset=args.auto_offset_reset,
        cancel=spark.sparkContext.cancelAllJobs,
        session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=heartbeat, **assignors,
        rebalance_timeout_ms=max(60_000, args.session_timeout_ms * 2), metrics=args.metrics,
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: pipeline.stop())
    signal.signal(signal.SIGINT, lambda *_: pipeline.stop())
    try:
        pipeline.start()
        print(f"{args.name}: joined {args.group}", flush=True)
        pipeline.run()
    finally:
        pipeline.close()
        if isinstance(source, KafkaSource):
            source.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
