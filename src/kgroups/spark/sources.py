"""Where a Spark member's records come from: one small interface, two sources.

A source answers two questions for the pipeline loop: which offsets a partition holds
now (`offsets`: earliest and end, Kafka's ListOffsets) and the records of a set of
offset ranges as a Spark DataFrame (`read`), with the columns `partition` (int),
`offset` (long) and `value` (string: the record as JSON text). Reading is Spark's work,
in its executors: the file log through a Python data source whose input partitions are
the ranges (split into chunks so that a big range reads in parallel, each starting at the
byte position the driver looked up, so an executor reads only its chunk); Kafka through
Spark's own Kafka source with `assign` and explicit starting and ending offsets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

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


class FileLogSource:
    """The embedded default: `kgroups.spark.filelog` under `root`, read by Spark."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root
        self.log = FileLog(root)
        register(spark)

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {p: (0, self.log.end_offset(topic, p)) for p in partitions}

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
    """A Kafka topic, read with Spark's Kafka source (spark-sql-kafka-0-10)."""

    def __init__(self, spark: SparkSession, bootstrap: str) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self._consumer: Any = None
        """For ListOffsets, asked every batch: one connection for the source's life."""

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap,
                                           enable_auto_commit=False)  # fmt: skip
        tps = [TopicPartition(topic, p) for p in partitions]
        first = self._consumer.beginning_offsets(tps)
        last = self._consumer.end_offsets(tps)
        return {tp.partition: (int(first[tp]), int(last[tp])) for tp in tps}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def read(self, topic: str, ranges: Ranges) -> DataFrame:
        from pyspark.sql import functions as f

        start = {topic: {str(p): r[0] for p, r in ranges.items()}}
        end = {topic: {str(p): r[1] for p, r in ranges.items()}}
        frame = (
            self.spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("assign", json.dumps({topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps(start))
            .option("endingOffsets", json.dumps(end))
            .option("failOnDataLoss", "true")
            .load()
        )
        return frame.select(
            f.col("partition").cast("int"),
            f.col("offset"),
            f.col("value").cast("string"),
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
