"""Stage, commit, publish: what is committed gets published exactly once, by anyone;
what is not committed never does."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from kgroups.spark.publish import Batch, Outbox, PublishError

PUBLISHED = re.compile(r"^(?P<topic>.+)-(?P<p>\d+)-(?P<start>\d+)-(?P<end>\d+)\.json$")


def published(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.is_file() and PUBLISHED.match(p.name))


def test_a_committed_batch_is_published_by_its_member_or_rolled_forward(tmp_path: Path) -> None:
    out = Outbox(tmp_path)
    batch = Batch("clicks", 3, 100, 250, generation=7, member="app-a")
    metadata = out.stage(batch, {"u1": 4})
    assert published(tmp_path) == []  # staged is not visible
    # The member crashes after its commit (metadata) was accepted, before publishing:
    # the next owner rolls it forward from the committed metadata.
    path = out.roll_forward("clicks", 3, metadata, "a")
    assert path is not None and path.name == "clicks-3-100-250.json"
    assert json.loads(path.read_text()) == {"u1": 4}
    # Publishing again (the original member woke up, or a third owner) changes nothing.
    assert out.publish(metadata) == path
    assert out.roll_forward("clicks", 3, metadata, "a") == path
    assert published(tmp_path) == ["clicks-3-100-250.json"]


def test_output_whose_commit_was_refused_is_never_published(tmp_path: Path) -> None:
    out = Outbox(tmp_path)
    committed = out.stage(Batch("clicks", 0, 0, 10, 4, "a"), {"x": 1})
    out.publish(committed)
    # A zombie's (generation 4, refused), a day old, and the next owner's own earlier
    # batch that it never committed.
    old = out.stage(Batch("clicks", 0, 10, 30, 4, "zombie"), {"x": 99})
    stale = time.time() - 2 * 24 * 3600
    os.utime(out.staging / "clicks" / "0" / json.loads(old)["staged"].split("/")[-1],
             (stale, stale))  # fmt: skip
    later = out.stage(Batch("clicks", 0, 10, 20, 5, "b"), {"x": 2})
    # Another member's recent staging may be the partition's current owner's (and "b"
    # a zombie that has not heard): left alone.
    theirs = out.stage(Batch("clicks", 0, 10, 25, 6, "c"), {"x": 3})
    # Another partition and a topic whose name looks like a partition prefix are untouched.
    other = out.stage(Batch("clicks", 1, 0, 5, 5, "b"), {"y": 1})
    tricky = out.stage(Batch("clicks-0", 0, 0, 5, 5, "c"), {"z": 1})
    out.roll_forward("clicks", 0, committed, "b")
    for gone in (later, old):
        with pytest.raises(PublishError):
            out.publish(gone)
    out.publish(theirs)
    out.publish(other)
    out.publish(tricky)
    assert published(tmp_path) == [
        "clicks-0-0-0-5.json", "clicks-0-0-10.json", "clicks-0-10-25.json", "clicks-1-0-5.json",
    ]  # fmt: skip


def test_metadata_that_names_no_batch(tmp_path: Path) -> None:
    out = Outbox(tmp_path)
    # A plain commit (another tool, or none): nothing to roll forward.
    assert out.roll_forward("t", 0, "", "a") is None
    assert out.roll_forward("t", 0, "checkpoint-42", "a") is None
    with pytest.raises(PublishError):
        out.publish('{"v": 1, "staged": "../../etc/passwd", "published": "x.json"}')
    with pytest.raises(PublishError):
        out.publish('{"v": 1, "staged": "t/0/a.json", "published": "../x.json"}')
