"""`make demo` as a user runs it: examples/demo.py end to end (its own control plane,
coordinator, operator and three Spark applications), judged by what it prints.

The demo checks the pipelines' result itself and exits 1 on any difference; this test
adds that the story it tells happened in order: `kubectl get cg` showed three members,
then two after the kill, one during the freeze, two after the wake, none after the stop,
each rebalance in a newer generation.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.integration.harness import PYTHON, ROOT

TIMEOUT_S = 840  # under pytest-timeout's 900 s; a loaded machine's demo took 405 s


def run_demo() -> tuple[int, str]:
    proc = subprocess.Popen([PYTHON, str(ROOT / "examples" / "demo.py")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the demo stops everything it started
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"the demo ran over {TIMEOUT_S} s:\n{out[-6000:]}")
    return proc.returncode, out


def cg_tables(out: str) -> list[list[dict[str, str]]]:
    """Every `kubectl get cg` table the demo printed, rows as {column: value}; columns are
    cut where the header's names start (kubectl aligns them; a cell may be empty)."""
    tables, lines = [], out.splitlines()
    for i, line in enumerate(lines):
        if not line.strip().startswith("$ kubectl get cg"):
            continue
        header = lines[i + 1]
        names = header.split()
        starts = [header.index(f" {n}") + 1 if k else header.index(n) for k, n in enumerate(names)]
        rows = []
        for row in lines[i + 2 :]:
            if not row.strip():
                break
            cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            rows.append(dict(zip(names, cells, strict=True)))
        tables.append(rows)
    return tables


def test_make_demo_tells_the_story_and_the_counts_are_equal() -> None:
    code, out = run_demo()
    print(out)  # shown by pytest -s, or with the failure
    assert code == 0, out[-6000:]
    assert any(line.startswith("EQUAL:") for line in out.splitlines()), out[-3000:]

    tables = cg_tables(out)
    rows = [r for t in tables for r in t if r["NAME"] == "clicks"]
    seen = [(r["STATE"], int(r["MEMBERS"]), r["ASSIGNED"]) for r in rows]
    assert seen == [
        ("Stable", 3, "6/6"),  # three apps joined
        ("Stable", 2, "6/6"),  # one killed
        ("Stable", 1, "6/6"),  # one frozen past its session timeout
        ("Stable", 2, "6/6"),  # the frozen one woken and back
        ("Empty", 0, "0/6"),  # all stopped
    ], out
    generations = [int(r["GENERATION"]) for r in rows]
    assert generations == sorted(set(generations)), generations
