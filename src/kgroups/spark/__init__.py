"""PySpark applications as consumer group members, exactly once per record.

`pipeline.Pipeline` is what a Spark driver runs (one group member per application);
`loop.BatchLoop` makes its decisions; `plan` says where reading starts and what the next
batch is; `publish` is the stage/commit/publish protocol; `sources` reads the embedded
file log (`filelog`) or Kafka with Spark.
"""
