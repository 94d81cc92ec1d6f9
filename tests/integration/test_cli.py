"""The `kgroups` command line against a running coordinator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.integration.harness import ROOT, Coordinator


def kgroups(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgroups", *args],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_topic_lifecycle(coordinator: Coordinator) -> None:
    at = ("--bootstrap", coordinator.bootstrap)
    created = kgroups("topic", "create", "orders", "--partitions", "3", *at)
    assert created.returncode == 0, created.stderr
    assert "created topic orders with 3 partitions" in created.stdout
    again = kgroups("topic", "create", "orders", "--partitions", "3", *at)
    assert again.returncode == 1
    assert "topic_already_exists" in again.stderr
    shrink = kgroups("topic", "partitions", "orders", "--partitions", "2", *at)
    assert shrink.returncode == 1
    assert "invalid_partitions" in shrink.stderr
    assert kgroups("topic", "partitions", "orders", "--partitions", "5", *at).returncode == 0
    assert kgroups("topic", "list", *at).stdout.splitlines() == ["orders\t5"]
    assert kgroups("topic", "delete", "orders", *at).returncode == 0
    assert kgroups("topic", "list", *at).stdout == ""


def test_clear_errors_for_bad_arguments_and_unreachable_coordinators() -> None:
    unreachable = kgroups("topic", "list", "--bootstrap", "127.0.0.1:1")
    assert unreachable.returncode == 1
    assert "cannot reach the coordinator" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    bad = kgroups(
        "coordinator", "--min-session-timeout-ms", "9000", "--max-session-timeout-ms", "10"
    )
    assert bad.returncode != 0
    assert "group_min_session_timeout_ms exceeds" in bad.stderr
    assert kgroups("topic", "list", "--bootstrap", "nonsense:port").returncode != 0


def test_a_data_dir_it_cannot_use_stops_it_with_the_reason_for_kubernetes(tmp_path: Path) -> None:
    """A volume that is not a usable directory (read-only, full, a file): the coordinator
    exits 1 at once with one line naming the path and the error, and writes the same line
    where a kubelet reads why a container stopped (its termination log)."""
    data = tmp_path / "data"
    data.write_text("not a directory")
    termination = tmp_path / "termination-log"
    termination.touch()  # a kubelet creates it; the coordinator only writes where it exists
    done = subprocess.run(
        [sys.executable, "-m", "kgroups", "coordinator", "--listen", "127.0.0.1:0",
         "--data-dir", str(data)],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "KGROUPS_TERMINATION_LOG": str(termination)},
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    message = termination.read_text()
    assert message.startswith(f"coordinator stopped: cannot open {data}: ")
    assert message.strip() in done.stderr
    assert data.read_text() == "not a directory"  # nothing of it touched


def test_the_port_file_says_where_each_listener_is_bound(tmp_path: Path) -> None:
    """One listener: the port alone (scripts read it with int()); several: the first's
    port, then `PROTOCOL PORT` per listener."""
    single = Coordinator(tmp_path / "one")
    single.start()
    try:
        assert (tmp_path / "one.port").read_text() == f"{single.port}\n"
    finally:
        single.kill()
    users = tmp_path / "users.yaml"
    users.write_text("users: {alice: {password: pw}}\n")
    double = Coordinator(tmp_path / "two", "--sasl-mechanisms", "PLAIN", "--credentials",
                         str(users), listeners=("PLAINTEXT", "SASL_PLAINTEXT"))  # fmt: skip
    double.start()
    try:
        first, *rest = (tmp_path / "two.port").read_text().splitlines()
        ports = dict(line.split() for line in rest)
        assert int(first) == double.port == int(ports["PLAINTEXT"])
        assert int(ports["SASL_PLAINTEXT"]) == double.ports["SASL_PLAINTEXT"] != double.port
    finally:
        double.kill()
