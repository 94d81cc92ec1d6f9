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
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kgroups.spark import app
from kgroups.spark.publish import Batch


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
    parser = app.add_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--output", required=True, help="the directory the counts go to")
    args = parser.parse_args(argv)
    spark = app.session(args)
    source = app.source(spark, args)
    return app.run(args, spark, source, process=count_users, output=args.output)


if __name__ == "__main__":
    sys.exit(main())
