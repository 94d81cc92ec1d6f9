"""The directory sink's stage, commit, publish (`kgroups.spark.directory.DirectorySink`).

Spark's writer is stood in for by `Frame`, which writes what Spark's file writers leave
in a directory (part files under `partitionBy` subdirectories, checksum files,
`_SUCCESS`); the pipelines run on test_loop.py's virtual-time world with a real
coordinator. Real Spark writes the same sink in tests/integration/test_spark_tables.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kgroups.spark.batches import MicroBatch
from kgroups.spark.directory import STAGING, DirectorySink
from tests.sim.fake_cluster import crash
from tests.unit.spark.world import PARTITIONS, SESSION, Log, Spark, World, first_turn, until


class Writer:
    """`DataFrame.write`'s builder, writing JSON lines as Spark's file writers lay out."""

    def __init__(self, rows: list[tuple[int, int]]) -> None:
        self.rows = rows
        self.by: tuple[str, ...] = ()

    def format(self, name: str) -> Writer:
        return self

    def mode(self, mode: str) -> Writer:
        assert mode == "overwrite"  # a batch staged again replaces its earlier attempt
        return self

    def options(self, **options: str) -> Writer:
        return self

    def partitionBy(self, *columns: str) -> Writer:
        self.by = columns
        return self

    def save(self, path: str) -> None:
        root = Path(path)
        groups: dict[Path, list[tuple[int, int]]] = {}
        for p, o in self.rows:
            sub = root / f"partition={p}" if self.by == ("partition",) else root
            groups.setdefault(sub, []).append((p, o))
        for directory, rows in groups.items():
            directory.mkdir(parents=True, exist_ok=True)
            name = f"part-00000-{uuid.uuid4()}.c000.json"
            (directory / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
            (directory / f".{name}.crc").write_bytes(b"crc")
        (root / "_SUCCESS").write_text("")


class Frame:
    def __init__(self, rows: Any) -> None:
        self.write = Writer(list(rows))


def frame(rows: Any, batch: MicroBatch) -> Frame:
    return Frame(rows)


def job(spark: Spark) -> Any:
    """A transform whose Spark job takes the time `spark` says."""

    def transform(rows: Any, batch: MicroBatch) -> Frame:
        spark.job()
        return Frame(rows)

    return transform


def table_rows(path: Path) -> list[tuple[int, int]]:
    """What a reader of the table sees (it skips paths beginning with "." or "_")."""
    rows = []
    for file in path.rglob("part-*.json"):
        if any(part.startswith((".", "_")) for part in file.relative_to(path).parts):
            continue
        rows += [tuple(json.loads(line)) for line in file.read_text().splitlines()]
    return sorted(rows)


def everything(end: int) -> list[tuple[int, int]]:
    return [(p, o) for p in range(PARTITIONS) for o in range(end)]


def test_publishing_moves_the_staged_files_in_place_once(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path / "t", "json", partition_by=["partition"])
    batch = MicroBatch.of("clicks", {0: (0, 3), 1: (0, 2)}, 4, "a")
    metadata = sink.stage(batch, Frame([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]))
    assert set(metadata) == {0, 1} and len(set(metadata.values())) == 1
    assert table_rows(sink.path) == []  # staged: nobody reads it yet
    staged = sink.staging / sink.staged_dir(batch)
    first = next(staged.rglob("part-*"))  # a crash after one file moved
    target = sink.path / first.relative_to(staged)
    target.parent.mkdir(parents=True)
    first.rename(target)
    sink.recover("clicks", 1, metadata[1], "b")  # the next owner of partition 1 finishes it
    assert table_rows(sink.path) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert sorted(p.name for p in sink.path.iterdir()) == [STAGING, "partition=0", "partition=1"]
    assert not staged.exists()
    assert sink.publish_dir(sink.staged_dir(batch)) == 0  # published already: nothing moves
    sink.recover("clicks", 0, metadata[0], "c")
    assert table_rows(sink.path) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_recovery_sweeps_what_no_commit_names_and_refuses_paths_outside(tmp_path: Path) -> None:
    sink = DirectorySink(f"file://{tmp_path}/t")
    lane = sink.staging / "clicks" / "2"
    refused = MicroBatch.of("clicks", {2: (0, 5)}, 3, "zombie")
    sink.stage(refused, Frame([(2, o) for o in range(5)]))
    # Another member's recent staging may be the lane's current owner's (and the one
    # recovering a zombie): left alone; a day old, it goes; its own goes at once.
    sink.recover("clicks", 2, None, "other")
    assert [p.name for p in lane.iterdir()] == [sink.staged_dir(refused).split("/")[-1]]
    stale = time.time() - 2 * 24 * 3600
    os.utime(lane / sink.staged_dir(refused).split("/")[-1], (stale, stale))
    sink.recover("clicks", 2, None, "other")
    assert not any(lane.iterdir())
    sink.stage(refused, Frame([(2, o) for o in range(5)]))
    sink.recover("clicks", 2, None, "zombie")
    assert table_rows(sink.path) == [] and not any(lane.iterdir())
    with pytest.raises(ValueError, match="outside"):
        sink.publish_dir("../../etc")
    with pytest.raises(ValueError, match="use DeltaSink"):
        DirectorySink("s3://bucket/t")


@pytest.mark.parametrize("finished", [False, True], ids=["cancelled", "finished-and-refused"])
def test_through_a_crash_before_publishing_and_a_zombie_every_record_is_published_once(
    tmp_path: Path, finished: bool
) -> None:
    world = World(tmp_path)
    log = Log(end=30)
    table = tmp_path / "table"

    async def scenario() -> None:
        dies = world.pipeline("dies", log, Spark(), sink=DirectorySink(table, "json"),
                              transform=frame)  # fmt: skip
        assert isinstance(dies.sink, DirectorySink)

        def died(batch: MicroBatch, metadata: Any) -> None:
            raise RuntimeError("died")

        dies.sink.publish = died  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="died"):
            await first_turn(dies)
        crash(dies.member, world.wires["dies"])
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 30)  # the decision
        assert table_rows(table) == []

        log.end = dict.fromkeys(range(PARTITIONS), 45)
        slow = Spark(seconds=5 * SESSION, finished_before_cancel=finished)
        zombie = world.pipeline("zombie", log, slow, sink=DirectorySink(table, "json"),
                                transform=job(slow))  # fmt: skip
        heir = world.pipeline("heir", log, Spark(), sink=DirectorySink(table, "json"),
                              transform=frame)  # fmt: skip
        await zombie.start(timeout=3 * SESSION)
        await heir.start(timeout=3 * SESSION)
        await until(lambda: len(zombie.member.assignment) == 2 == len(heir.member.assignment)
                    and zombie.member.generation == heir.member.generation, 30, "two members")  # fmt: skip
        turn = asyncio.create_task(zombie.run_once())
        await until(lambda: slow.running, 10, "the zombie's batch in flight")
        world.partition("zombie")
        runner = asyncio.create_task(heir.run())
        await until(lambda: world.committed() == dict.fromkeys(range(PARTITIONS), 45),
                    10 * SESSION, "the heir read everything")  # fmt: skip
        world.heal("zombie")
        progress = await turn
        assert progress is not None and progress.dropped and not progress.published
        heir.stop()
        await runner
        assert table_rows(table) == everything(45)
        assert not [p for p in (table / STAGING).rglob("*") if p.is_file()]
        crash(zombie.member, world.wires["zombie"])

    world.play(scenario)
