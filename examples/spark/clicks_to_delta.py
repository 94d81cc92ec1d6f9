"""A clickstream into a Delta Lake table, with Spark, as one member of a kgroups group.

Run several copies with the same --group: they split the topic's partitions, take over
each other's when one dies or freezes, and the table holds every click exactly once:

    python examples/spark/clicks_to_delta.py --bootstrap 127.0.0.1:9092 --group clicks \\
        --topic clicks --source kafka:broker:9092 --table /data/clicks

(or the same under spark-submit, with --packages for the Kafka source and Delta). The
table gets one row per input record, enriched and never aggregated on the driver: the
record's `topic`, `partition` and `offset` (so anyone can check that each is there once),
its `user` (the record's "user" field), `kafka_key` and `event_time` (a Kafka record's
key and timestamp; null from the file log), the `page` and `country` a click names (or
"unknown"), and `batch_id`, `batch_generation` and `processed_at` (which micro-batch wrote
it). `--format parquet` writes a directory of Parquet files instead (on a filesystem with
atomic renames: a shared volume, not an object store).

SIGTERM finishes the batch in flight (or leaves it to the next owner), then leaves the
group.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kgroups.spark import app
from kgroups.spark.batches import MicroBatch


def enrich(frame: Any, batch: MicroBatch) -> Any:
    """The per-batch logic: a function of the batch's DataFrame, run by the executors."""
    from pyspark.sql import functions as f

    columns = set(frame.columns)

    def column(name: str, kind: str) -> Any:
        return f.col(name).cast(kind) if name in columns else f.lit(None).cast(kind)

    field = lambda name: f.get_json_object("value", f"$.{name}")  # noqa: E731
    return frame.select(
        (f.col("topic") if "topic" in columns else f.lit(batch.topic)).alias("topic"),
        f.col("partition").cast("int").alias("partition"),
        f.col("offset").cast("long").alias("offset"),
        field("user").alias("user"),
        column("key", "string").alias("kafka_key"),
        column("timestamp", "timestamp").alias("event_time"),
        f.coalesce(field("page"), f.lit("unknown")).alias("page"),
        f.upper(f.coalesce(field("country"), f.lit("unknown"))).alias("country"),
        f.lit(batch.id).alias("batch_id"),
        f.lit(batch.generation).alias("batch_generation"),
        f.current_timestamp().alias("processed_at"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = app.add_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--table", required=True, help="where the table is (a path or URI)")
    parser.add_argument("--format", choices=["delta", "parquet"], default="delta")
    args = parser.parse_args(argv)
    spark = app.session(args, delta=args.format == "delta")
    source = app.source(spark, args)
    sink: Any
    if args.format == "delta":
        from kgroups.spark.delta import DeltaSink

        sink = DeltaSink(spark, args.table)
    else:
        from kgroups.spark.directory import DirectorySink

        sink = DirectorySink(args.table, "parquet")
    return app.run(args, spark, source, transform=enrich, sink=sink)


if __name__ == "__main__":
    sys.exit(main())
