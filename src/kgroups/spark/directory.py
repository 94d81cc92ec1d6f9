"""`DirectorySink`: a directory of Parquet (or any Spark file format) files, exactly once.

The `StagedSink` protocol (see `sinks`), generalised from one file to one directory per
batch. Spark's executors write the batch with Spark's own writer (`DataFrame.write`, with
the format, options and `partitionBy` the user chose) into
`<path>/.staging/<topic>/<lane>/<batch id>.<member>/`; nothing there is read by anyone
(Spark and every Hadoop reader skip paths beginning with "." or "_"). The batch's end
offsets are then committed with metadata naming that directory, and publishing moves its
files into `<path>` under the same relative paths (so `<path>` looks exactly as if every
batch had been appended to it with `df.write.mode("append")`), then deletes the staging
directory.

A crash mid-publish leaves some files moved and some staged: whoever owns one of the
batch's partitions next moves the rest (`recover`), since the commit names the directory
and a file is either still staged or already published. A staging directory that exists
no more was published completely. Staging that no commit names (a refused or a crashed
batch) is deleted by the member that staged it, at its next generation, or by whoever
owns the lane once it is a day old: never another member's recent staging, which may be
the lane's current owner's batch while the one sweeping is a zombie. Readers can see a
batch partly published while the files are moved (a few renames); each file appears
once and whole.

Exactly once holds where `rename` of a file is atomic and a directory listing is
consistent: a local or network POSIX filesystem shared by the members (NFS, a
ReadWriteMany volume), or HDFS through a POSIX mount. It does **not** hold on object
stores (S3, GCS, ADLS), whose "rename" is a copy and a delete: use `delta.DeltaSink`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kgroups.files import fsync_dir
from kgroups.spark.batches import MicroBatch, decode
from kgroups.spark.publish import safe, sweepable

STAGING = ".staging"
_SKIP = ("_SUCCESS", "._SUCCESS.crc")


class DirectorySink:
    """`path`: a local directory (a `file:` URI is accepted); `format`: any format
    Spark writes files in ("parquet", "orc", "json", "csv", "avro" with its package);
    `partition_by` and `options` go to Spark's writer as they are."""

    def __init__(
        self, path: str | Path, format: str = "parquet", *, partition_by: Sequence[str] = (),
        options: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        text = str(path)
        if text.startswith("file:"):
            text = text.removeprefix("file:").removeprefix("//")
        elif "://" in text:
            raise ValueError(
                f"DirectorySink needs a POSIX path, not {text!r}: on object stores a rename "
                "is not atomic, so use DeltaSink"
            )
        self.path = Path(text)
        self.format = format
        self.partition_by = list(partition_by)
        self.options = dict(options or {})
        self.staging = self.path / STAGING

    def staged_dir(self, batch: MicroBatch) -> str:
        """Relative to the staging root: one directory per lane, so that a new owner of
        the lane's partition finds everything staged in it."""
        who = safe(batch.member)
        return f"{safe(batch.topic)}/{batch.lane}/{batch.id}.{who}"

    # -- the StagedSink protocol --------------------------------------------------------------

    def stage(self, batch: MicroBatch, frame: Any) -> dict[int, str]:
        where = self.staged_dir(batch)
        writer = frame.write.format(self.format).mode("overwrite").options(**self.options)
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        writer.save(str(self.staging / where))
        metadata = batch.encode("staged", where)
        return dict.fromkeys(batch.partitions, metadata)

    def publish(self, batch: MicroBatch, metadata: Mapping[int, str]) -> None:
        self.publish_dir(self.staged_dir(batch))

    def discard(self, batch: MicroBatch) -> None:
        shutil.rmtree(self.staging / self.staged_dir(batch), ignore_errors=True)

    def recover(self, topic: str, partition: int, metadata: str | None, member: str) -> None:
        record = decode(metadata)
        if record is not None and record.kind == "staged" and record.where:
            self.publish_dir(record.where)
        self.sweep(topic, partition, member)

    # -- the filesystem work --------------------------------------------------------------------

    def publish_dir(self, where: str) -> int:
        """Move the staged directory's files into the table; returns how many moved here
        (0: published already, by this member or another)."""
        if ".." in where.split("/"):
            raise ValueError(f"commit metadata names a path outside the sink: {where!r}")
        root = self.staging / where
        moved = 0
        touched: set[Path] = set()
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if name in _SKIP:
                    continue
                source = Path(dirpath) / name
                target = self.path / source.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.rename(source, target)
                except FileNotFoundError:
                    continue  # another owner of the batch moved it first
                moved += 1
                touched.add(target.parent)
        for directory in touched:
            fsync_dir(directory)
        shutil.rmtree(root, ignore_errors=True)
        return moved

    def sweep(self, topic: str, partition: int, member: str, *, now: float | None = None) -> int:
        """Delete what `member` staged in the lane, and what anyone staged there more than
        a day ago (`publish.sweepable`); returns how many. Never another member's recent
        staging: it may be the current owner's batch between stage and publish, and the
        one sweeping may be a zombie that has not heard yet that the lane is not its own."""
        lane = self.staging / safe(topic) / str(partition)
        if not lane.is_dir():
            return 0
        removed = 0
        for path in lane.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if sweepable(path, f".{safe(member)}", now):
                    shutil.rmtree(path)
                    removed += 1
        return removed
