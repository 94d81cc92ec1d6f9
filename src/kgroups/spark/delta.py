"""`DeltaSink`: a Delta Lake table, exactly once, through Delta's idempotent writes.

The `IdempotentSink` protocol (see `sinks`). Each batch is appended by Spark's executors
with Delta's writer options `txnAppId` = `MicroBatch.app_id` and `txnVersion` =
`MicroBatch.version`: Delta records the highest version committed for each app id in the
table's own log, in the same atomic commit as the data, and skips a write whose version
is not above it. Two writers of one app id at once conflict (the second gets
ConcurrentTransactionException, since both read the app id's version): it is retried,
and then skipped. So are Delta's other optimistic-concurrency conflicts (two first
writes creating the table at once: ProtocolChangedException). So a batch written by its
planner, by the next owner of its partitions replaying the plan, and by a zombie waking
late lands once.

Spark needs Delta's jars (`io.delta:delta-spark_2.13` and `delta-storage`, 4.4.0 for
Spark 4.2; tools/spark/fetch.sh puts them beside the Kafka source's) and the session
settings in `SPARK_CONF` (`configure` adds them to a builder).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kgroups.spark.batches import MicroBatch

log = logging.getLogger(__name__)

SPARK_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What a SparkSession needs to read and write Delta tables."""

CONFLICTS = (
    "ConcurrentTransactionException",  # another writer of this app id committed first
    "ProtocolChangedException",  # two first writes created the table at once
    "MetadataChangedException",
    "ConcurrentAppendException",
    "ConcurrentWriteException",
)
"""Delta's optimistic-concurrency failures: nothing was written, and trying again (the
write is idempotent) either writes or finds the batch in the table."""
RETRIES = 10


def configure(builder: Any, *, snapshot_partitions: int | None = None) -> Any:
    """`builder` (SparkSession.builder) with Delta's settings. `snapshot_partitions`:
    Delta reads a table's log with this many tasks (Delta's default 50 costs a small
    table's every write a few seconds on a small machine)."""
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    if snapshot_partitions is not None:
        builder = builder.config("spark.databricks.delta.snapshotPartitions",
                                 str(snapshot_partitions))  # fmt: skip
    return builder


class DeltaSink:
    """`path`: the table's location (any filesystem Spark's Delta reaches: local, HDFS,
    S3/GCS/ADLS with their connectors); `partition_by` and `options` go to Delta's writer
    as they are (say {"mergeSchema": "true"})."""

    def __init__(
        self, spark: Any, path: str, *, partition_by: Sequence[str] = (),
        options: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.spark = spark
        self.path = path
        self.partition_by = list(partition_by)
        self.options = dict(options or {})
        for reserved in ("txnAppId", "txnVersion"):
            if reserved in self.options:
                raise ValueError(f"{reserved} is set by kgroups for every batch")

    def write(self, batch: MicroBatch, frame: Any) -> bool:
        """Skips at once (no Spark job) a batch the table holds already; otherwise writes,
        and Delta's own check decides a race with another writer of the batch."""
        for attempt in range(RETRIES):
            latest = self.written(batch.app_id)
            if latest is not None and latest >= batch.version:
                log.info("batch %s: in the table already (%s at version %d): skipped",
                         batch.id, batch.app_id, latest)  # fmt: skip
                return False
            writer = (
                frame.write.format("delta").mode("append").options(**self.options)
                .option("txnAppId", batch.app_id).option("txnVersion", str(batch.version))
            )  # fmt: skip
            if self.partition_by:
                writer = writer.partitionBy(*self.partition_by)
            try:
                writer.save(self.path)
                return True
            except Exception as exc:
                conflict = next((name for name in CONFLICTS if name in str(exc)), None)
                if conflict is None or attempt == RETRIES - 1:
                    raise
                log.info("batch %s: another writer committed first (%s); looking again",
                         batch.id, conflict)  # fmt: skip
        return False  # not reached: the last attempt raises

    def written(self, app_id: str) -> int | None:
        """From the table's log, as Delta's writer reads it (DeltaLog's snapshot)."""
        jvm = self.spark.sparkContext._jvm
        # The loop asks from a worker thread; Delta reads its log through the thread's
        # active session, which only Spark's own calls set.
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
            self.spark._jsparkSession, self.path
        )
        none = jvm.scala.Option.empty()
        snapshot = delta_log.update(False, none, none)
        if snapshot.version() < 0:  # no table yet
            return None
        # The version's checksum file lists the app ids, as Delta's own writer reads them;
        # without one, the table's state is rebuilt (a Spark job: seconds).
        known = snapshot.setTransactionsIfKnown()
        if known.isDefined():
            transactions = known.get()
            for i in range(transactions.size()):
                txn = transactions.apply(i)
                if txn.appId() == app_id:
                    return int(txn.version())
            return None
        found = snapshot.transactions().get(app_id)
        return int(found.get()) if found.isDefined() else None
