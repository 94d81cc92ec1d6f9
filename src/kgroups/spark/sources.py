"""Where a Spark member's records come from: one small interface, two sources.

A source answers two questions for the pipeline loop: which offsets a partition holds
now (`offsets`: earliest and end, Kafka's ListOffsets) and the records of a set of
offset ranges as a Spark DataFrame (`read`), with at least the columns `partition`
(int), `offset` (long) and `value` (string: the record's text; Kafka's adds `topic`,
`key`, `timestamp` and `headers`). A source may also know its topics' partition counts
(`Partitioned`) and find offsets by time (`Timed`). Reading is Spark's work,
in its executors: the file log through a Python data source whose input partitions are
the ranges (split into chunks so that a big range reads in parallel, each starting at the
byte position the driver looked up, so an executor reads only its chunk); Kafka through
Spark's own Kafka source with `assign` and explicit starting and ending offsets.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kgroups.spark.filelog import FileLog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Ranges = Mapping[int, tuple[int, int]]
"""partition -> [start, end) offsets."""

SCHEMA = "partition int, offset long, value string"
CHUNK = 50_000
"""Records per Spark input partition when the file log is read."""


class Source(Protocol):
    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        """partition -> (earliest, end) offsets held now."""
        ...

    def read(self, topic: str, ranges: Ranges) -> DataFrame: ...


@runtime_checkable
class Partitioned(Protocol):
    """A source that knows its topics' partition counts (the pipeline then keeps the
    group's topic on the coordinator as large)."""

    def partitions(self, topic: str) -> int | None: ...


@runtime_checkable
class Timed(Protocol):
    """A source whose records carry timestamps (a start by time is possible)."""

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int
    ) -> dict[int, int | None]: ...


class FileLogSource:
    """The embedded default: `kgroups.spark.filelog` under `root`, read by Spark."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root
        self.log = FileLog(root)
        register(spark)

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {p: (0, self.log.end_offset(topic, p)) for p in partitions}

    def partitions(self, topic: str) -> int | None:
        return self.log.partitions(topic)

    def read(self, topic: str, ranges: Ranges) -> DataFrame:
        chunks = [
            [p, s, min(end, s + CHUNK), self.log.position(topic, p, s)]
            for p, (start, end) in sorted(ranges.items())
            for s in range(start, end, CHUNK)
        ]
        return (
            self.spark.read.format(NAME)
            .option("path", self.root)
            .option("topic", topic)
            .option("chunks", json.dumps(chunks))
            .load()
        )


class KafkaSource:
    """A Kafka topic, read with Spark's Kafka source (spark-sql-kafka-0-10).

    `options` are Kafka client properties by their Java names (`security.protocol`,
    `sasl.mechanism`, `sasl.jaas.config`, `ssl.truststore.location`, ...), as a Spark user
    gives them to Spark's Kafka source without the `kafka.` prefix. Spark's reads get them
    (as `kafka.<name>`), and so do the offset and partition lookups, which run in the
    driver's JVM with the same Kafka consumer class as Spark's: one configuration, one
    client, whatever the cluster's security (TLS, SASL PLAIN/SCRAM/OAUTHBEARER/GSSAPI).

    The DataFrame has Spark's Kafka columns with the key and value as UTF-8 text:
    `topic, partition, offset, key, value, timestamp, headers`.
    """

    COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")
    TIMEOUT_S = 60

    def __init__(
        self, spark: SparkSession, bootstrap: str, *, options: Mapping[str, str] | None = None
    ) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.options = {k.removeprefix("kafka."): v for k, v in (options or {}).items()}
        self._consumer: Any = None
        """For the lookups, asked every batch: one consumer for the source's life."""
        self._lock = threading.Lock()
        """A KafkaConsumer is for one thread at a time: turns side by side take turns."""

    def _jvm(self) -> Any:
        return self.spark.sparkContext._jvm

    def consumer(self) -> Any:
        if self._consumer is None:
            jvm = self._jvm()
            props = jvm.java.util.Properties()
            raw = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
            settings = {
                "key.deserializer": raw, "value.deserializer": raw,
                "enable.auto.commit": "false", "client.id": "kgroups-spark-lookups",
                # partitionsFor answers from the consumer's metadata: keep it fresher than
                # the pipeline's partition checks (Kafka's default is 5 minutes).
                "metadata.max.age.ms": "5000",
                **self.options, "bootstrap.servers": self.bootstrap,
            }  # fmt: skip
            for key, value in settings.items():
                props.setProperty(key, value)
            self._consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
        return self._consumer

    def _tps(self, topic: str, partitions: Sequence[int]) -> Any:
        jvm = self._jvm()
        tps = jvm.java.util.ArrayList()
        for p in partitions:
            tps.add(jvm.org.apache.kafka.common.TopicPartition(topic, p))
        return tps

    def _timeout(self) -> Any:
        return self._jvm().java.time.Duration.ofSeconds(self.TIMEOUT_S)

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        tps = self._tps(topic, partitions)
        with self._lock:
            consumer = self.consumer()
            first = consumer.beginningOffsets(tps, self._timeout())
            last = consumer.endOffsets(tps, self._timeout())
        return {tp.partition(): (int(first.get(tp)), int(last.get(tp))) for tp in tps}

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count (None: no such topic)."""
        with self._lock:
            found = self.consumer().partitionsFor(topic, self._timeout())
        return int(found.size()) if found is not None and found.size() else None

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int
    ) -> dict[int, int | None]:
        """The first offset of each partition whose record's timestamp is at or after
        `timestamp_ms` (None: no such record yet), Kafka's offsetsForTimes."""
        jvm = self._jvm()
        query = jvm.java.util.HashMap()
        for tp in self._tps(topic, partitions):
            query.put(tp, jvm.java.lang.Long(timestamp_ms))
        with self._lock:
            found = self.consumer().offsetsForTimes(query, self._timeout())
        result: dict[int, int | None] = {}
        for tp in query.keySet():
            hit = found.get(tp)
            result[tp.partition()] = None if hit is None else int(hit.offset())
        return result

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def read(self, topic: str, ranges: Ranges) -> DataFrame:
        start = {topic: {str(p): r[0] for p, r in ranges.items()}}
        end = {topic: {str(p): r[1] for p, r in ranges.items()}}
        reader = self.spark.read.format("kafka")
        for key, value in self.options.items():
            reader = reader.option(f"kafka.{key}", value)
        frame = (
            reader.option("kafka.bootstrap.servers", self.bootstrap)
            .option("assign", json.dumps({topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps(start))
            .option("endingOffsets", json.dumps(end))
            .option("includeHeaders", "true")
            .option("failOnDataLoss", "true")
            .load()
        )
        return kafka_columns(frame)


def kafka_columns(frame: DataFrame) -> DataFrame:
    """Spark's Kafka source's rows as a transform gets them: key and value as UTF-8 text."""
    from pyspark.sql import functions as f

    return frame.select(
        f.col("topic"),
        f.col("partition").cast("int"),
        f.col("offset"),
        f.col("key").cast("string"),
        f.col("value").cast("string"),
        f.col("timestamp"),
        f.col("headers"),
    )


# -- the file log as a Spark Python data source -----------------------------------------

NAME = "kgroups_filelog"
_registered: set[int] = set()


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("kgroups_filelog")` available in this session."""
    if id(spark) in _registered:
        return
    spark.dataSource.register(_data_source())
    _registered.add(id(spark))


def _data_source() -> type:
    """Built on first use, so that importing kgroups.spark does not need pyspark."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Chunk(InputPartition):
        def __init__(self, partition: int, start: int, end: int, position: int) -> None:
            super().__init__((partition, start, end, position))
            self.partition, self.start, self.end = partition, start, end
            self.position = position

    class Reader(DataSourceReader):
        def __init__(self, options: Mapping[str, str]) -> None:
            self.root = options["path"]
            self.topic = options["topic"]
            self.chunks = [Chunk(*c) for c in json.loads(options["chunks"])]

        def partitions(self) -> list[Any]:
            return self.chunks

        def read(self, chunk: Any) -> Iterator[tuple[int, int, str]]:
            lines = FileLog(self.root).lines_at(
                self.topic, chunk.partition, chunk.position, chunk.end - chunk.start
            )
            for offset, line in enumerate(lines, chunk.start):
                yield (chunk.partition, offset, line.decode())

    class FileLogDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return NAME

        def schema(self) -> str:
            return SCHEMA

        def reader(self, schema: Any) -> Reader:
            return Reader(self.options)

    return FileLogDataSource
