"""An interrupted `make test` stops everything it started.

Ctrl-C reaches a test run's foreground process group, but not what its tests started in
sessions of their own (PostgreSQL under `pg_ctl`, the container runtime): before, an
interrupted run left PostgreSQL servers, coordinators and JVMs behind, slowing every
later run. `tools/run-tests.sh` (what `make test` runs) tags its run and, on SIGINT,
stops every process carrying the tag (`tests/reaper.py`).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.integration.harness import ROOT
from tests.waits import wait_until, within


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_ctrl_c_stops_the_coordinators_and_postgresql_a_run_started(tmp_path: Path) -> None:
    mark = tmp_path / "started"
    env = {**os.environ, "KGROUPS_INTERRUPT_MARK": str(mark), "TEST_WORKERS": "1"}
    run = subprocess.Popen(
        ["bash", "tools/run-tests.sh", "tests/integration/interrupted_run.py"],
        cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        started = wait_until(
            lambda: mark.exists() and mark.read_text().split(), 120, "the run's processes"
        )
        pids = [int(p) for p in started]
        assert all(alive(pid) for pid in pids)
        os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
        out, _ = run.communicate(timeout=within(120))
        assert run.returncode == 130, out[-3000:]
        assert "stopped what the interrupted run started" in out, out[-3000:]
        left = [pid for pid in pids if alive(pid)]
        assert not left, (left, out[-3000:])
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
