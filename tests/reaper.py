"""Stop everything one test run started: what an interrupted `make test` would leave.

`tools/run-tests.sh` tags its run (`KGROUPS_TEST_RUN`) before pytest starts; every process
the tests start inherits the tag, whatever session or process group it puts itself in:
coordinators, PostgreSQL under `pg_ctl`, Kafka brokers and the other JVMs, the control
plane, the container runtime. On Ctrl-C (or SIGTERM), and at the end of every run, the
script calls this module: the container runtime, if this run started it, is taken down
first (its containers, and the host settings it changed, restored by
`e2e/cluster/runtime.sh down`), then every process still carrying the tag gets SIGTERM
(PostgreSQL's postmaster SIGINT), and SIGKILL if it is still there after a grace period.
At the end of a run that finished by itself, anything found is a process a test leaked,
and is named.

    python -m tests.reaper TAG [--grace SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TAG = "KGROUPS_TEST_RUN"
ROOT = Path(__file__).resolve().parents[1]


def tagged(tag: str) -> dict[int, str]:
    """pid -> command line of every process carrying `tag`, this one and its ancestors
    excepted (the run's own shell, make)."""
    mark = f"{TAG}={tag}".encode()
    spared = _ancestors()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found[int(entry.name)] = command.strip()[:160]
    return found


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def reap(tag: str, grace: float = 10.0) -> dict[int, str]:
    """Stop every process carrying `tag`; returns those found at first."""
    found = tagged(tag)
    if not found:
        return found
    for pid, command in found.items():
        # PostgreSQL's postmaster shuts down fast on SIGINT (SIGTERM waits for its
        # clients); killed, it would leave its shared memory behind.
        _signal(pid, signal.SIGINT if command.startswith("postgres") else signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and tagged(tag):
        time.sleep(0.2)
    for pid in tagged(tag):
        _signal(pid, signal.SIGKILL)
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def runtime_down(tag: str) -> None:
    """The container runtime, if this run started it (its containers do not carry the tag,
    its daemons do; a runtime another run started is that run's)."""
    if not any("dockerd" in command or "containerd" in command
               for command in tagged(tag).values()):  # fmt: skip
        return
    runtime = ROOT / "e2e" / "cluster" / "runtime.sh"
    subprocess.run(["bash", str(runtime), "down"], capture_output=True, timeout=300,
                   check=False)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tag")
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--interrupted", action="store_true",
                        help="the run was interrupted (else what is found was leaked)")  # fmt: skip
    args = parser.parse_args()
    if args.interrupted:
        runtime_down(args.tag)
    found = reap(args.tag, args.grace)
    if found:
        what = "stopped what the interrupted run started" if args.interrupted else (
            "processes the tests left running, stopped")  # fmt: skip
        print(f"== {what}:", file=sys.stderr)
        for pid, command in sorted(found.items()):
            print(f"   {pid} {command}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
