"""The file log: offsets are complete lines, ranges read exactly what they name."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgroups.spark import filelog
from kgroups.spark.filelog import FileLog, FileLogError


def test_offsets_count_only_complete_lines(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    log.create("clicks", 2)
    assert log.end_offsets("clicks", [0, 1]) == {0: 0, 1: 0}
    assert log.append("clicks", 0, [{"user": "a"}, {"user": "b"}]) == 2
    with (tmp_path / "clicks" / "0.jsonl").open("ab") as f:
        f.write(b'{"user": "c"')  # a writer half way through a record
    assert log.end_offset("clicks", 0) == 2
    assert log.read("clicks", 0, 0, 2) == [{"user": "a"}, {"user": "b"}]
    with pytest.raises(FileLogError, match="past the end"):
        log.read("clicks", 0, 1, 3)
    with (tmp_path / "clicks" / "0.jsonl").open("ab") as f:
        f.write(b"}\n")  # ...and finishing it
    assert log.end_offset("clicks", 0) == 3
    assert log.read("clicks", 0, 2, 3) == [{"user": "c"}]


def test_ranges_across_the_sparse_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filelog, "STRIDE", 4)
    log = FileLog(tmp_path)
    for i in range(0, 30, 7):  # appended in uneven chunks, scanned in between
        log.append("t", 0, [{"n": n} for n in range(i, min(i + 7, 30))])
        log.end_offset("t", 0)
    for start, end in [(0, 30), (3, 9), (4, 8), (7, 7), (13, 29), (29, 30)]:
        assert [r["n"] for r in log.read("t", 0, start, end)] == list(range(start, end))
    # A second reader builds its own index from scratch and agrees.
    assert [r["n"] for r in FileLog(tmp_path).read("t", 0, 17, 23)] == list(range(17, 23))


def test_bad_names_and_ranges_are_refused(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    for name in ["", "..", "a/b"]:
        with pytest.raises(FileLogError):
            log.end_offset(name, 0)
    with pytest.raises(FileLogError):
        log.end_offset("t", -1)
    with pytest.raises(FileLogError):
        log.read("t", 0, 2, 1)
    assert log.end_offset("never-written", 3) == 0


def test_an_executor_reads_its_chunk_from_the_position_the_driver_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch read costs what the batch holds: the executor seeks to the chunk's byte
    position and reads nothing before it (here, what precedes it is made unreadable)."""
    monkeypatch.setattr(filelog, "STRIDE", 4)
    driver = FileLog(tmp_path)
    driver.append("t", 0, [{"n": n} for n in range(40)])
    position = driver.position("t", 0, 25)
    path = tmp_path / "t" / "0.jsonl"
    with path.open("r+b") as f:
        f.write(b"x" * position)  # no line before the chunk can be parsed or counted
    executor = FileLog(tmp_path)
    lines = list(executor.lines_at("t", 0, position, 10))
    assert [int(line.split(b":")[1].rstrip(b"}")) for line in lines] == list(range(25, 35))
    with pytest.raises(FileLogError, match="not complete"):
        list(executor.lines_at("t", 0, position, 16))  # past the end: no such records
    with pytest.raises(FileLogError, match="no offset 41"):
        driver.position("t", 0, 41)


def test_a_topics_partition_count_is_its_partition_files(tmp_path: Path) -> None:
    log = FileLog(tmp_path)
    assert log.partitions("clicks") is None
    log.create("clicks", 3)
    assert log.partitions("clicks") == 3
    log.create("clicks", 5)  # grown, as kafka-topics --alter would
    assert log.partitions("clicks") == 5
