"""Every benchmark the README quotes still runs, at small sizes (issue 23, finding 10).

The security work broke `bench/rebalance.py --sizes 1000` (its thousand members connect
from one address, past the per-address connection limit then in force) and nobody knew:
benchmarks are not run by anything else. Here each runs for a few seconds, against the
same peers as for real (a Kafka broker beside kgroups for the heartbeats, on PLAINTEXT and
on SASL_SSL with SCRAM), and must print its table. The figures themselves are not judged
here (they are quoted from full runs in the README). bench/spark.py's clickcount run is
the one left out, for make test's time: its applications, watches and takeover code run
under bench/spark_delta.py here.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.harness import ROOT


def bench(script: str, *args: str, kafka: bool = True, timeout: float = 300) -> str:
    """Run bench/`script`; its output. Past `timeout` it is stopped with everything it
    started, and the test fails with what it printed."""
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag}
    if not kafka:
        env["KGROUPS_BENCH_NO_KAFKA"] = "1"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # its finally blocks stop what they started
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        _kill_tagged(tag)
        raise AssertionError(
            f"bench/{script} took over {timeout:.0f} s:\n{out[-3000:]}\n{err[-5000:]}"
        ) from None
    assert proc.returncode == 0, f"bench/{script} failed:\n{out[-3000:]}\n{err[-5000:]}"
    return out


TAG = "KGROUPS_BENCH_RUN"
"""An environment variable every process a benchmark starts inherits: what is left of one
stopped at its timeout is found by it (pg_ctl puts PostgreSQL in a session of its own, out
of reach of the benchmark's process group)."""


def _kill_tagged(tag: str) -> None:
    mark = f"{TAG}={tag}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if mark in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def test_heartbeats_runs_on_both_listeners_beside_kafka() -> None:
    out = bench("heartbeats.py", "--members", "4", "--window", "2", "--seconds", "0.5",
                "--runs", "1", "--listeners", "both")  # fmt: skip
    assert "Heartbeats/s on PLAINTEXT" in out and "Heartbeats/s on SASL_SSL" in out, out
    assert len(re.findall(r"^kgroups\s+[\d,]+", out, re.MULTILINE)) == 2, out
    assert len(re.findall(r"^kafka [\d.]+\s+[\d,]+", out, re.MULTILINE)) == 2, out
    assert out.count("kgroups / kafka (median)") == 2, out


def test_rebalance_runs_with_a_thousand_members_from_one_address() -> None:
    out = bench("rebalance.py", "--sizes", "10,1000", "--trials", "1", kafka=False)
    rows = re.findall(r"^kgroups\s+(\d+)\s+\d+\s+[\d.]+", out, re.MULTILINE)
    assert rows == ["10", "1000"], out


def test_assignors_runs() -> None:
    out = bench("assignors.py", "--quick", "--trials", "1", kafka=False)
    assert re.search(r"^range .* kgroups ", out, re.MULTILINE), out


@pytest.mark.slow
def test_spark_delta_runs_beside_structured_streaming() -> None:
    """bench/spark_delta.py (which runs on bench/spark.py's applications and watches):
    the Structured Streaming peer and one kgroups application, tiny batches."""
    out = bench("spark_delta.py", "--partitions", "2", "--batches", "200", "--passes", "2",
                "--apps", "1", "--rounds", "1", "--trials", "0", timeout=600)  # fmt: skip
    assert re.search(r"^Structured Streaming \+ foreachBatch\s+1\s+200\s", out, re.MULTILINE), out
    assert re.search(r"^kgroups clicks_to_delta\s+1\s+200\s", out, re.MULTILINE), out
    assert "kgroups 1 app(s) / Structured Streaming, batches of 200/partition" in out, out


def test_failover_runs_on_three_replicas() -> None:
    out = bench(
        "failover.py",
        "--trials",
        "1",
        "--lease-ttl",
        "5",  # the default: make test's load starves a replica for a second or two
        "--history",
        "2000",
        kafka=False,
        timeout=420,  # 60 s alone; past 300 s once beside make test's heaviest tests
    )
    rows = re.findall(r"^(graceful|kill) \(SIG\w+\)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)\s+20$", out,
                      re.MULTILINE)  # fmt: skip
    assert [mode for mode, _ in rows] == ["graceful", "kill"], out
    assert "Taking over a shard with 2,000 committed offsets" in out, out


def test_commits_runs_on_every_store() -> None:
    """Without its Kafka peer (make test's time: the heartbeat benchmark's test runs one)."""
    out = bench("commits.py", "--groups", "4", "--seconds", "0.5", "--runs", "1", kafka=False)
    names = re.findall(r"^(kgroups, [\w ]+?|kafka [\d.]+)\s+[\d,]+\s+[\d,]+\s+[\d.]+\s+[\d.]+$",
                       out, re.MULTILINE)  # fmt: skip
    assert names == ["kgroups, SQLite", "kgroups, PostgreSQL x1", "kgroups, PostgreSQL x3"], out


def test_scale_runs_on_one_and_three_replicas() -> None:
    """bench/scale.py, tiny: one replica, then three with three times the groups, each
    group's members heartbeating (a heartbeat refused fails the run)."""
    out = bench("scale.py", "--groups", "4", "--members", "2", "--seconds", "1", kafka=False)
    rows = re.findall(r"^kgroups\s+(\d)\s+(\d+)\s+\d+\s+(\d+)\s", out, re.MULTILINE)
    assert rows == [("1", "4", "8"), ("3", "12", "24")], out
    assert "kgroups: 3 nodes hold 3.0x the groups" in out, out


def test_consumer_protocol_runs() -> None:
    """Without its Kafka peer here (for make test's time: a broker is started by the
    heartbeat and commit benchmarks' tests already); the README's figures are full runs."""
    out = bench("consumer_protocol.py", "--sizes", "10", "--trials", "1", "--seconds", "0.5",
                kafka=False)  # fmt: skip
    rows = re.findall(r"^(kgroups)\s+10\s+[\d.]+\s+[\d.]+\s+[\d,]+\s+[\d,]+$", out, re.M)
    assert rows == ["kgroups"], out
