"""`kgroups assign`: the assignors checked from outside, as a user debugging a rebalance.

Runs the real command (a subprocess) on JSON documents and checks the printed result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def assign(strategy: str, doc: Any, *, raw: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgroups", "assign", "--strategy", strategy, "--input", "-"],
        input=raw if raw is not None else json.dumps(doc),
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_the_issue_example_gives_each_partition_to_two_members() -> None:
    doc = {
        "topics": {"t": 3},
        "members": {
            "m1": {
                "topics": ["t"],
                "owned": {"t": [0]},
                "generation": 1,
                "instance_id": None,
                "rack": None,
            },
            "m2": {"topics": ["t"]},
        },
        "replicas": 2,
    }
    result = assign("redundant", doc)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "assignment": {"m1": {"t": [0, 1, 2]}, "m2": {"t": [0, 1, 2]}}
    }


def test_range_output_is_kafkas_and_sorted() -> None:
    doc = {
        "topics": {"b": 3, "a": 3},
        "members": {"c1": {"topics": ["a", "b"]}, "c0": {"topics": ["b", "a"]}},
    }
    out = json.loads(assign("range", doc).stdout)
    # RangeAssignor: per topic, the first member (by id) gets the extra partition.
    assert out == {"assignment": {"c0": {"a": [0, 1], "b": [0, 1]}, "c1": {"a": [2], "b": [2]}}}
    assert list(out["assignment"]) == ["c0", "c1"]


def test_sticky_keeps_what_members_owned() -> None:
    doc = {
        "topics": {"t": 6},
        "members": {
            "a": {"topics": ["t"], "owned": {"t": [0, 1, 2]}, "generation": 4},
            "b": {"topics": ["t"], "owned": {"t": [3, 4, 5]}, "generation": 4},
            "c": {"topics": ["t"]},
        },
    }
    out = json.loads(assign("sticky", doc).stdout)["assignment"]
    assert set(out["a"]["t"]) <= {0, 1, 2} and set(out["b"]["t"]) <= {3, 4, 5}
    assert sorted(len(v["t"]) for v in out.values()) == [2, 2, 2]


def test_cooperative_sticky_withholds_partitions_changing_hands() -> None:
    doc = {
        "topics": {"t": 4},
        "members": {
            "a": {"topics": ["t"], "owned": {"t": [0, 1, 2, 3]}, "generation": 2},
            "b": {"topics": ["t"]},
        },
    }
    out = json.loads(assign("cooperative-sticky", doc).stdout)["assignment"]
    assert len(out["a"]["t"]) == 2 and out["b"] == {}  # b gets them next round


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"members": {}}, "topics: required"),
        ({"topics": {"t": "3"}}, "topics.t: expected an integer"),
        ({"topics": {"t": 3}, "members": {"m": {}}}, "members.m.topics: required"),
        (
            {"topics": {"t": 3}, "members": {"m": {"topics": ["t"], "owned": {"t": [-1]}}}},
            "members.m.owned.t[0]",
        ),
        ({"topics": {"t": 3}, "replicas": 0}, "replicas: must be at least 1"),
        ({"topics": {"t": 3}, "extra": 1}, "unknown field(s) extra"),
        (
            {"topics": {"t": 2}, "partition_racks": {"t": [["a"]]}},
            "one list of racks per partition",
        ),
    ],
)
def test_bad_documents_are_rejected_with_the_field_named(doc: Any, message: str) -> None:
    result = assign("range", doc)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_unknown_strategy_and_broken_json() -> None:
    unknown = assign("nope", {"topics": {"t": 1}})
    assert unknown.returncode == 2 and "unknown assignor 'nope'" in unknown.stderr
    assert "cooperative-sticky" in unknown.stderr
    broken = assign("range", None, raw="{not json")
    assert broken.returncode == 2 and "not JSON" in broken.stderr
