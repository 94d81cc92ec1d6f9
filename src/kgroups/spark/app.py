"""What every Spark application in a group does around its own logic: the command line,
the SparkSession, the source, the pipeline and its signals.

An application is its transform (or its outbox `process`) and its sink; the rest is the
same for all, so it lives here (examples/spark/clickcount.py and clicks_to_delta.py are
built on it, and so can a user's):

    args = app.arguments(parser)          # --bootstrap, --group, --topic, --source, ...
    spark = app.session(args, delta=True) # local[2] unless spark-submit or --master says
    source = app.source(spark, args)      # files:DIR or kafka:HOST:PORT (+ --kafka-option)
    app.run(args, spark, source, transform=..., sink=...)   # until SIGTERM or SIGINT

The kgroups coordinator's own TLS and SASL come from KGROUPS_* environment variables
(`ClientSecurity.from_env`), as for the other kgroups commands; the Kafka cluster's from
`--kafka-option NAME=VALUE` (Kafka's client property names) or `--kafka-options-file`
(a Java properties file, as Kafka's tools' --command-config).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kgroups.security.client import ClientSecurity
from kgroups.spark.pipeline import Pipeline
from kgroups.spark.sources import FileLogSource, KafkaSource, Source

KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
DELTA_PACKAGE = "io.delta:delta-spark_2.13:4.4.0"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options every application takes."""
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", required=True,
                        help="the kgroups coordinator, HOST:PORT")  # fmt: skip
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--source", required=True, help="files:DIR or kafka:HOST:PORT[,...]")
    parser.add_argument(
        "--kafka-option", action="append", default=[], metavar="NAME=VALUE",
        help="a Kafka client property for the source (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.location, ...)",
    )  # fmt: skip
    parser.add_argument("--kafka-options-file", type=Path, default=None,
                        help="Kafka client properties, one NAME=VALUE a line")  # fmt: skip
    parser.add_argument(
        "--group-protocol", choices=["classic", "consumer"], default="classic",
        help="classic (JoinGroup/SyncGroup, the members assign) or consumer (Kafka 4's "
        "KIP-848: the coordinator assigns, and a member losing no partition never waits "
        "for another's batch)",
    )  # fmt: skip
    parser.add_argument(
        "--server-assignor", choices=["uniform", "range"], default=None,
        help="the coordinator's assignor under --group-protocol consumer (default: the "
        "group's, uniform unless configured)",
    )  # fmt: skip
    parser.add_argument(
        "--session-timeout-ms", type=int, default=45_000,
        help="the member's session; under --group-protocol consumer the coordinator's "
        "(group.consumer.session.timeout.ms) rules, and this says what it is",
    )  # fmt: skip
    parser.add_argument(
        "--heartbeat-interval-ms", type=int, default=None,
        help="default: a fifteenth of the session timeout, Kafka's ratio (3 s of 45 s)",
    )  # fmt: skip
    parser.add_argument(
        "--assignor", action="append", default=None,
        choices=["range", "roundrobin", "sticky", "cooperative-sticky"],
        help="partition assignor (repeat for several; default: cooperative-sticky, so that "
        "a rebalance waits only for batches losing partitions, not every batch in flight)",
    )  # fmt: skip
    parser.add_argument(
        "--partition-check-interval-s", type=float, default=30.0,
        help="how often the source's partition count is compared with the coordinator's "
        "(a topic grown in Kafka is grown on the coordinator)",
    )  # fmt: skip
    parser.add_argument("--max-records", type=int, default=10_000,
                        help="records per partition per micro-batch, at most")  # fmt: skip
    parser.add_argument(
        "--auto-offset-reset", default="earliest",
        help="where to start without a usable committed offset (Kafka's auto.offset.reset): "
        "earliest, latest, none, by_duration:<ISO-8601, e.g. PT1H> or by_timestamp:<epoch ms>",
    )  # fmt: skip
    parser.add_argument("--name", default=f"{Path(sys.argv[0]).stem}-{os.getpid()}")
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
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting, as spark-submit's --conf (repeat): e.g. the Kubernetes "
        "scheduler's spark.kubernetes.* settings for --master k8s://...",
    )  # fmt: skip
    parser.add_argument(
        "--jars", default=os.environ.get("KGROUPS_SPARK_JARS"),
        help="a directory of jars for Spark: the Kafka source's and Delta's "
        f"(tools/spark/fetch.sh prints one); under spark-submit use --packages "
        f"{KAFKA_PACKAGE},{DELTA_PACKAGE}",
    )  # fmt: skip
    return parser


def protocol_options(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline's options for the group protocol asked for; options of the other
    protocol are refused, not ignored."""
    if args.group_protocol == "consumer":
        if args.assignor or args.heartbeat_interval_ms:
            raise SystemExit("--assignor and --heartbeat-interval-ms are the classic "
                             "protocol's: under --group-protocol consumer the coordinator "
                             "assigns and sets the interval (--server-assignor)")  # fmt: skip
        return {"group_protocol": "consumer", "server_assignor": args.server_assignor}
    if args.server_assignor:
        raise SystemExit("--server-assignor needs --group-protocol consumer")
    return {"assignors": args.assignor} if args.assignor else {}


def kafka_options(args: argparse.Namespace) -> dict[str, str]:
    options: dict[str, str] = {}
    lines = args.kafka_options_file.read_text().splitlines() if args.kafka_options_file else []
    for given in [*lines, *args.kafka_option]:
        line = given.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"a Kafka option is NAME=VALUE, not {line!r}")
        options[name.strip()] = value.strip()
    return options


def spark_conf(args: argparse.Namespace) -> list[tuple[str, str]]:
    """--conf KEY=VALUE, each checked."""
    pairs = []
    for given in getattr(args, "conf", []):
        key, sep, value = given.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--conf is KEY=VALUE, not {given!r}")
        pairs.append((key.strip(), value))
    return pairs


def session(args: argparse.Namespace, *, delta: bool = False, conf: Mapping[str, str] = {}) -> Any:
    """The application's SparkSession (its own, unless spark-submit made one)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import kgroups too
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(args.name)
    if args.master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master(args.master or "local[2]")
    for key in ("spark.ui.enabled", "spark.ui.showConsoleProgress"):  # a batch job, logged
        builder = builder.config(key, "false")
    if args.jars:
        jars = sorted(str(p) for p in Path(args.jars).glob("*.jar"))
        builder = builder.config("spark.jars", ",".join(jars))
    if delta:
        from kgroups.spark.delta import configure

        builder = configure(builder, snapshot_partitions=2)
    for key, value in [*conf.items(), *spark_conf(args)]:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def source(spark: Any, args: argparse.Namespace) -> Source:
    kind, _, where = args.source.partition(":")
    if kind == "files" and where:
        return FileLogSource(spark, where)
    if kind == "kafka" and where:
        return KafkaSource(spark, where, options=kafka_options(args))
    raise SystemExit("--source must be files:DIR or kafka:HOST:PORT")


def run(args: argparse.Namespace, spark: Any, source: Source, **pipeline: Any) -> int:
    """Join the group and turn the pipeline (`pipeline`: its transform and sink, or
    process and output) until SIGTERM or SIGINT: the batch in flight finishes (or is
    abandoned, to whoever owns its partitions next), then the member leaves the group."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")  # fmt: skip
    heartbeat = args.heartbeat_interval_ms or max(args.session_timeout_ms // 15, 100)
    rebalance = max(60_000, args.session_timeout_ms * 2)
    protocol = protocol_options(args)
    security = ClientSecurity.from_env()
    running = Pipeline(
        bootstrap=args.bootstrap, group=args.group, topic=args.topic, source=source,
        name=args.name, max_records=args.max_records, auto_offset_reset=args.auto_offset_reset,
        cancel=spark.sparkContext.cancelAllJobs, session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=heartbeat, rebalance_timeout_ms=rebalance,
        metrics=args.metrics, security=security, **protocol, **pipeline,
        partition_check_interval=args.partition_check_interval_s,
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: running.stop())
    signal.signal(signal.SIGINT, lambda *_: running.stop())
    try:
        running.start()
        print(f"{args.name}: joined {args.group}", flush=True)
        running.run()
    finally:
        try:
            running.close()
        finally:
            # A signal to the whole process group stops Spark's JVM with the driver: then
            # there is nothing left to close.
            with contextlib.suppress(Exception):
                if isinstance(source, KafkaSource):
                    source.close()
                spark.stop()
    return 0
