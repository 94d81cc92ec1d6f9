"""What a Spark member did, for Prometheus, beside its member's `kgroups_member_*` metrics.

Spark's own metrics system (the driver's Dropwizard sinks, its PrometheusServlet) reports
the JVM's jobs and stages, not what the Python driver decides; these families report the
pipeline: records and micro-batches completed (committed, then published), how long a
micro-batch takes, and how far the member is behind the source (Kafka's records-lag,
summed over the member's partitions of a topic). They share the registry of the member's
metrics (`kgroups.client.metrics`): one per registry, no `_created` series, labelled by
group (and topic for the lag), never by member.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from kgroups.client.metrics import REBALANCE_BUCKETS, Families


class SparkMetrics(Families):
    """The `kgroups_spark_*` families of one registry (`SparkMetrics.of(registry)`)."""

    def __init__(self) -> None:
        super().__init__()
        self.records = self.add(Counter(
            "kgroups_spark_records",
            "Records of the micro-batches completed (committed and published).",
            ["group"], registry=None,
        ))  # fmt: skip
        self.batches = self.add(Counter(
            "kgroups_spark_batches",
            "Micro-batches completed (committed and published).",
            ["group"], registry=None,
        ))  # fmt: skip
        self.batch_duration = self.add(Histogram(
            "kgroups_spark_batch_duration_seconds",
            "One completed micro-batch: the source's offsets asked, read, processed, "
            "staged, committed and published.",
            ["group"], buckets=REBALANCE_BUCKETS, registry=None,
        ))  # fmt: skip
        self.lag = self.add(Gauge(
            "kgroups_spark_lag_records",
            "The source's end offset minus the committed offset, summed over the member's "
            "partitions of the topic, as of the member's last look at the source.",
            ["group", "topic"], registry=None,
        ))  # fmt: skip


class LoopStats:
    """What one `BatchLoop` records. Its lag is added to the group's and topic's (members
    of one group in one process add up) and taken back out when the loop closes."""

    def __init__(self, metrics: SparkMetrics, group: str, topic: str) -> None:
        # Created now, so the counts read 0 (not absent) before the first batch.
        self._records = metrics.records.labels(group)
        self._batches = metrics.batches.labels(group)
        self._duration = metrics.batch_duration.labels(group)
        self._lag = metrics.lag.labels(group, topic)
        self._my_lag = 0

    def completed(self, records: int, seconds: float) -> None:
        """A micro-batch of `records` was committed and published, after `seconds`."""
        self._records.inc(records)
        self._batches.inc()
        self._duration.observe(seconds)

    def lag(self, records: int) -> None:
        self._lag.inc(records - self._my_lag)
        self._my_lag = records

    def close(self) -> None:
        self.lag(0)
