"""`make demo`: three Spark applications write clicks into one Delta Lake table as one
kgroups consumer group, managed from kubectl, through a crash and a freeze, and the table
is checked.

The story a user wants to see, end to end on this machine (everything on 127.0.0.1, in a
temporary directory, stopped on exit, Ctrl-C or failure):

1. a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager from
   e2e/controlplane; built once from the Go module proxy), kgroups' CRDs applied;
2. a kgroups coordinator and the kgroups operator pointed at both;
3. a file log of click records (`kgroups.spark.filelog`), still being appended to;
4. a Topic and a ConsumerGroup applied with kubectl: the operator creates the topic on the
   coordinator and mirrors the group into `.status`, which `kubectl get cg` shows;
5. three copies of examples/spark/clicks_to_delta.py in one group: one is killed
   (SIGKILL), another frozen (SIGSTOP, JVM and all) past its session timeout and woken;
6. the Delta table, read back without Spark (delta-rs), must hold every input record
   exactly once with its user, and its per-user counts must equal a single-process count
   of the same input. Anything else exits 1.

`python examples/demo.py --help` lists the knobs; the defaults take about two minutes once
the control plane is built (three or four on a busy two-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kgroups.admin import Admin
from kgroups.spark.filelog import FileLog

ROOT = Path(__file__).resolve().parents[1]
CONTROLPLANE = ROOT / "e2e" / "controlplane"
TOPIC = GROUP = "clicks"
PARTITIONS = 6
USERS = [f"u{i}" for i in range(1, 10)]
# What the applications log that tells the story (the rest goes to their log files).
TOLD = re.compile(r"(generation \d+: reading|dropping|partitions lost|rejoining|joined|"
                  r"again|in the table already|end commit)")  # fmt: skip
LOGGED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \S+ (.*)$")
PARTITION = re.compile(r"TopicPartition\(topic='([^']*)', partition=(\d+)\)")
T = TypeVar("T")
STARTED = time.monotonic()
BOLD, RED, PLAIN = ("\033[1m", "\033[1;31m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


class DemoFailed(Exception):
    """Something the demo promised did not happen; the message says what."""


class Console:
    """The demo's lines and the apps' (from their log threads), never interleaved within
    one call, with at most one blank line in a row."""

    def __init__(self) -> None:
        self.lock, self.blank = threading.Lock(), True

    def emit(self, *lines: str) -> None:
        with self.lock:
            for line in lines:
                if line or not self.blank:
                    print(line)
                self.blank = not line
            sys.stdout.flush()


emit = Console().emit


def say(text: str) -> None:
    elapsed = int(time.monotonic() - STARTED)
    emit("", f"{BOLD}== [{elapsed // 60}:{elapsed % 60:02}] {text}{PLAIN}")


def note(text: str) -> None:
    emit(f"   {text}")


def wait_for(what: str, timeout: float, check: Callable[[], T | None], poll: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


# --- the control plane ------------------------------------------------------------------


def build_controlplane() -> Path:
    """e2e/controlplane/build.sh, its progress (stderr) shown; returns kubectl's directory."""
    proc = subprocess.Popen(
        ["bash", str(CONTROLPLANE / "build.sh")], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    started = time.monotonic()
    try:
        proc.wait(timeout=3)  # a built cache answers at once
    except subprocess.TimeoutExpired:
        say(
            "building the local Kubernetes control plane (first run only, ~10-15 min on two "
            "cores): kube-apiserver, kubectl, etcd, helm from the Go module proxy into "
            "~/.cache/kgroups"
        )
        while True:
            try:
                proc.wait(timeout=60)
                break
            except subprocess.TimeoutExpired:
                minutes = (time.monotonic() - started) / 60
                if minutes > 60:
                    proc.terminate()
                    raise DemoFailed("the control plane build took over an hour") from None
                note(f"... still building ({minutes:.0f} min so far)")
    assert proc.stdout is not None
    out = proc.stdout.read().split()
    if proc.returncode != 0 or len(out) < 2:
        raise DemoFailed(f"e2e/controlplane/build.sh failed (exit {proc.returncode}); see above")
    return Path(out[0])


def run_checked(cmd: list[str], what: str, *, timeout: float, input: str | None = None) -> str:
    """Run `cmd` to completion; its stdout, or DemoFailed with its stderr."""
    done = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise DemoFailed(f"{what} failed:\n{done.stderr}")
    return done.stdout


class Kube:
    """kubectl against the demo's control plane, as a user would type it."""

    def __init__(self, kubectl: Path, kubeconfig: Path) -> None:
        self.kubectl, self.kubeconfig = kubectl, kubeconfig

    def run(self, *args: str, input: str | None = None) -> str:
        return run_checked([str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
                           f"kubectl {' '.join(args)}", timeout=60, input=input)  # fmt: skip

    def show(self, *args: str, why: str = "") -> None:
        out = self.run(*args)
        command = f"   $ kubectl {' '.join(args)}" + (f"    # {why}" if why else "")
        emit("", command, *(f"   {line}" for line in out.rstrip("\n").splitlines()), "")

    def status(self, kind: str, name: str) -> dict[str, Any]:
        obj = json.loads(self.run("get", kind, name, "-o", "json"))
        status: dict[str, Any] = obj.get("status") or {}
        return status


def ready(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})


MANIFESTS = f"""\
apiVersion: kgroups.io/v1alpha1
kind: Topic
metadata:
  name: {TOPIC}
spec:
  partitions: {PARTITIONS}
---
apiVersion: kgroups.io/v1alpha1
kind: ConsumerGroup
metadata:
  name: {GROUP}
spec:
  topics: [{TOPIC}]
  settings:
    initialRebalanceDelayMs: 1000
"""


# --- processes --------------------------------------------------------------------------


def stop(proc: subprocess.Popen[Any], *, group: bool, timeout: float = 20) -> None:
    """SIGTERM (to the process group when it has one), wait, SIGKILL what is left."""

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            elif proc.poll() is None:
                proc.send_signal(sig)

    if group:
        send(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
    send(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)
    send(signal.SIGKILL)  # for a group: whatever is left of it (Spark's JVM)
    proc.wait()


def start_logged(
    cmd: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    # Own session: Ctrl-C reaches only the demo, which then stops everything in order.
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )


class App:
    """One clicks_to_delta application in its own process group (its JVM goes with it);
    the lines of its log that tell the story are echoed as they come."""

    def __init__(self, name: str, bootstrap: str, work: Path, session_ms: int, jars: str) -> None:
        self.name = name
        self.log_path = work / f"{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples/spark/clicks_to_delta.py"),
             "--bootstrap-server", bootstrap, "--group", GROUP, "--topic", TOPIC,
             "--source", f"files:{work / 'log'}", "--table", str(work / "table"),
             "--name", name, "--session-timeout-ms", str(session_ms), "--max-records", "5000",
             # A batch in flight keeps its partitions through a rebalance: only the moved
             # ones wait for it.
             "--assignor", "cooperative-sticky"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
            # Spark's scratch space inside the demo's directory: a killed app leaves its
            # block manager's files behind, and they go with the directory.
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1",
                 "SPARK_LOCAL_DIRS": str(work / f"{name}-spark"), "KGROUPS_SPARK_JARS": jars},
        )  # fmt: skip
        self.reading = threading.Event()
        self.stopped = False
        self._echo = threading.Thread(target=self._read, name=f"{name}-log", daemon=True)
        self._echo.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log_path.open("wb") as log:
            for raw in self.proc.stdout:
                log.write(raw)
                log.flush()
                # Spark redraws a progress bar with carriage returns: keep what follows it.
                line = raw.decode(errors="replace").rstrip().rpartition("\r")[2]
                if TOLD.search(line) and "py4j" not in line:
                    if "reading" in line:
                        self.reading.set()
                    # "<date> <time> <logger> <message>": the message is what matters
                    logged = LOGGED.search(line)
                    message = PARTITION.sub(r"\1-\2", logged[1] if logged else line.strip())
                    note(f"[{self.name}] {message.removeprefix(f'{self.name}: ')}")

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        if self.stopped:  # stopped already: its process group id may have been reused
            return
        self.stopped = True
        stop(self.proc, group=True, timeout=60)
        self._echo.join(5)


# --- the input and the output -------------------------------------------------------------


class Writer(threading.Thread):
    """Appends clicks to random partitions until stopped: the apps read a growing log."""

    def __init__(self, root: Path, per_second: int) -> None:
        super().__init__(name="click-writer", daemon=True)
        self.log, self.per_second = FileLog(root), per_second
        self.stopping, self.rng, self.n = threading.Event(), random.Random(11), 0

    def clicks(self, count: int) -> list[dict[str, Any]]:
        # A few heavy users and a long tail, so the counts differ from user to user.
        users = self.rng.choices(USERS, weights=range(len(USERS), 0, -1), k=count)
        out = [
            {
                "user": u,
                "page": f"/p{self.rng.randint(1, 40)}",
                "n": self.n + i,
                "country": self.rng.choice(["de", "fr", "nl"]),
            }
            for i, u in enumerate(users)
        ]
        self.n += count
        return out

    def fill(self, per_partition: int) -> None:
        self.log.create(TOPIC, PARTITIONS)
        for p in range(PARTITIONS):
            self.log.append(TOPIC, p, self.clicks(per_partition))

    def run(self) -> None:
        chunk = max(self.per_second // 10, 1)
        while not self.stopping.wait(0.1):
            self.log.append(TOPIC, self.rng.randrange(PARTITIONS), self.clicks(chunk))

    def halt(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(10)


def committed(port: int) -> dict[int, int]:
    async def fetch() -> dict[tuple[str, int], int]:
        async with Admin("127.0.0.1", port) as admin:
            return await admin.committed_offsets(GROUP)

    return {p: o for (t, p), o in asyncio.run(fetch()).items() if t == TOPIC}


def table_rows(table: Path) -> list[tuple[int, int, str | None, str]]:
    """(partition, offset, user, batch id) of every row, read without Spark (delta-rs)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        read = DeltaTable(str(table)).to_pyarrow_table(
            columns=["partition", "offset", "user", "batch_id"]
        )
    except TableNotFoundError:  # no first commit yet
        return []
    return list(zip(*(read[c].to_pylist() for c in read.column_names), strict=True))


def compare(work: Path, ends: dict[int, int], offsets: dict[int, int]) -> None:
    """The Delta table against a single-process reading of the input; raises on any
    difference, after printing what it compared."""
    from deltalake import DeltaTable

    rows, problems = table_rows(work / "table"), []
    files_log = FileLog(work / "log")
    history = DeltaTable(str(work / "table")).history()
    say("the check: the Delta table (read by delta-rs) holds every click once; "
        "per-user counts equal one process's")  # fmt: skip
    note(f"{len(rows)} rows in {len(history)} table versions, "
         f"{len({b for *_, b in rows})} micro-batches")  # fmt: skip
    note(
        f"{'partition':>9} {'log end':>8} {'committed':>9} {'in table':>8} "
        f"{'twice':>5} {'missing':>7}"
    )
    seen = collections.Counter((p, o) for p, o, _, _ in rows)
    users = {(p, o): u for p, o, u, _ in rows}
    reference: collections.Counter[str] = collections.Counter()
    for p in range(PARTITIONS):
        records = files_log.read(TOPIC, p, 0, ends[p])
        twice = sum(1 for (q, _), n in seen.items() if q == p and n > 1)
        missing = sum(1 for o in range(ends[p]) if (p, o) not in seen)
        extra = sum(1 for (q, o) in seen if q == p and o >= ends[p])
        wrong = sum(
            1 for o, r in enumerate(records) if users.get((p, o), r.get("user")) != r.get("user")
        )
        for what, n in (("twice", twice), ("missing", missing), ("past the log's end", extra),
                        ("with another user", wrong)):  # fmt: skip
            if n:
                problems.append(f"partition {p}: {n} records {what}")
        if offsets.get(p) != ends[p]:
            problems.append(f"partition {p}: committed {offsets.get(p)}, the log ends at {ends[p]}")
        reference.update(r.get("user", "null") for r in records)
        in_table = sum(1 for (q, _) in seen if q == p)
        note(
            f"{p:>9} {ends[p]:>8} {offsets.get(p, '-')!s:>9} {in_table:>8} {twice:>5} {missing:>7}"
        )
    counted = collections.Counter(u or "null" for _, _, u, _ in rows)
    emit("")
    note(f"{'user':>9} {'table':>9} {'one process':>11}")
    for user in sorted(set(counted) | set(reference), key=lambda u: (len(u), u)):
        mark = "" if counted[user] == reference[user] else "   <-- differs"
        note(f"{user:>9} {counted[user]:>9} {reference[user]:>11}{mark}")
    note(f"{'total':>9} {sum(counted.values()):>9} {sum(reference.values()):>11}")
    if counted != reference:
        problems.append("the per-user counts differ (see the table)")
    if problems:
        raise DemoFailed("the table is NOT the input, once:\n   " + "\n   ".join(problems))
    emit(
        "",
        f"{BOLD}EQUAL: the three pipelines wrote every click exactly once into the Delta "
        f"table: {sum(reference.values())} clicks of {len(reference)} users, "
        f"through a kill and a freeze{PLAIN}",
    )


# --- the demo -----------------------------------------------------------------------------


def cg_is(kube: Kube, members: int, *, newer_than: int = -1) -> Callable[[], dict[str, Any] | None]:
    """A check: the group Stable and Ready with `members` and every partition assigned (a
    cooperative rebalance's first round may end with some unassigned), in a generation >
    newer_than."""

    def check() -> dict[str, Any] | None:
        s = kube.status("cg", GROUP)
        ok = (
            s.get("state") == "Stable"
            and s.get("memberCount") == members
            and s.get("generation", -1) > newer_than
            and s.get("partitions", {}).get("assigned") == PARTITIONS  # a cooperative round ends
            and ready(s).get("status") == "True"
        )
        return s if ok else None

    return check


def run(args: argparse.Namespace, work: Path, stack: contextlib.ExitStack) -> None:
    session_s = args.session_ms / 1000
    if shutil.which("java") is None:
        raise DemoFailed("Spark needs Java 17 (`java` is not on PATH)")
    say("checking the local Kubernetes control plane tools (e2e/controlplane/build.sh)")
    k8s_bin = build_controlplane()

    say(
        f"starting a Kubernetes control plane in {work / 'controlplane'} (etcd, kube-apiserver, "
        "kube-controller-manager on 127.0.0.1)"
    )
    cp_dir = work / "controlplane"
    stack.callback(
        lambda: subprocess.run(
            ["bash", str(CONTROLPLANE / "down.sh"), str(cp_dir)],
            capture_output=True,
            timeout=60,
            check=False,
        )
    )
    run_checked(["bash", str(CONTROLPLANE / "up.sh"), str(cp_dir)], "e2e/controlplane/up.sh",
                timeout=300)  # fmt: skip
    kube = Kube(k8s_bin / "kubectl", cp_dir / "kubeconfig")
    note(kube.run("apply", "-f", str(ROOT / "crds")).strip().replace("\n", "\n   "))
    kube.run("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")

    say("starting a kgroups coordinator and the kgroups operator")
    port_file = work / "coordinator.port"
    coordinator = start_logged(
        [sys.executable, "-m", "kgroups", "coordinator", "--listen", "127.0.0.1:0",
         "--data-dir", str(work / "coordinator"), "--port-file", str(port_file)],
        work / "coordinator.log",
    )  # fmt: skip
    stack.callback(stop, coordinator, group=False)

    def bound() -> bool:
        if coordinator.poll() is not None:
            raise DemoFailed("the coordinator exited:\n" + (work / "coordinator.log").read_text())
        return port_file.exists() and port_file.read_text().strip() != ""

    wait_for("the coordinator to listen", 30, bound, poll=0.1)
    port = int(port_file.read_text())
    bootstrap = f"127.0.0.1:{port}"
    operator = start_logged(
        [sys.executable, "-m", "kgroups", "operator", "--coordinator", bootstrap],
        work / "operator.log",
        env={**os.environ, "KUBECONFIG": str(kube.kubeconfig)},
    )
    stack.callback(stop, operator, group=False)
    note(
        f"coordinator on {bootstrap}; operator watching namespace default "
        f"(logs: {work}/coordinator.log, operator.log)"
    )

    say(f"generating clicks into a file log: {work / 'log' / TOPIC}/<partition>.jsonl")
    writer = Writer(work / "log", args.rate)
    writer.fill(args.records)
    writer.start()
    stack.callback(writer.halt)
    note(
        f"{PARTITIONS} partitions x {args.records} clicks like {json.dumps(writer.clicks(1)[0])}; "
        f"a writer keeps appending ~{args.rate}/s"
    )

    say("kubectl apply: a Topic and a ConsumerGroup")
    for line in MANIFESTS.splitlines():
        note(f"  {line}")
    note(kube.run("apply", "-f", "-", input=MANIFESTS).strip().replace("\n", "\n   "))
    wait_for(
        "the Topic to be Ready (created on the coordinator)",
        30,
        lambda: ready(kube.status("topic", TOPIC)).get("status") == "True",
    )
    # The group's settings reach the coordinator before any member joins.
    wait_for(
        "the operator to observe the ConsumerGroup",
        30,
        lambda: ready(kube.status("cg", GROUP)).get("reason") == "NoMembers",
    )
    kube.show(
        "get", "topic,cg", why="the topic exists on the coordinator; the group has no members yet"
    )
    note("(Dead: the coordinator has no group 'clicks' until a member joins)")

    say("three Spark applications (examples/spark/clicks_to_delta.py) join group 'clicks'")
    note("each starts a JVM: 30-60 s on two cores")
    fetched = run_checked(["bash", str(ROOT / "tools/spark/fetch.sh")],
                          "tools/spark/fetch.sh (Delta's jars)", timeout=600)  # fmt: skip
    jars = fetched.strip().splitlines()[-1]
    apps: list[App] = []
    for i in range(3):
        app = App(f"app{i}", bootstrap, work, args.session_ms, jars)
        apps.append(app)
        stack.callback(app.stop)
    status = wait_for("three apps Stable in the group", 240, cg_is(kube, 3), poll=1)
    wait_for("every app reading", 180, lambda: all(a.reading.is_set() for a in apps), poll=1)
    kube.show("get", "cg", why="three members split the six partitions")
    # Each app's first write creates or joins the table (Delta's first commit: 30-80 s on a
    # loaded 2-core machine), and one that lost the race to create it writes again.
    wait_for(
        "rows in the table from every partition",
        240,
        lambda: (
            (work / "table" / "_delta_log").is_dir()
            and len({p for p, *_ in table_rows(work / "table")}) == PARTITIONS
        ),
        poll=2,
    )
    note(f"rows so far: {len(table_rows(work / 'table'))} in {work / 'table'}")

    victim, frozen, survivor = apps
    say(
        f"kill -9 {victim.name} (and its JVM): no LeaveGroup, the coordinator notices when its "
        f"{session_s:.0f} s session times out"
    )
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    status = wait_for(
        "the group to rebalance to two members",
        session_s + 60,
        cg_is(kube, 2, newer_than=status["generation"]),
    )
    kube.show("get", "cg", why=f"{time.monotonic() - killed:.0f} s after the kill")

    say(
        f"kill -STOP {frozen.name} for {args.freeze_s} s (past its session timeout): "
        "frozen with whatever batch it holds, then woken"
    )
    frozen.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    status = wait_for(
        "the group to rebalance to one member",
        session_s + 60,
        cg_is(kube, 1, newer_than=status["generation"]),
    )
    kube.show(
        "get",
        "cg",
        why=f"{time.monotonic() - stopped:.0f} s into the freeze: {survivor.name} owns everything",
    )
    time.sleep(max(0.0, args.freeze_s - (time.monotonic() - stopped)))
    frozen.signal(signal.SIGCONT)
    note(
        f"kill -CONT {frozen.name}: it wakes in a generation that is gone; a batch it had "
        "planned was written by its heir, so the table skips its late write, or its plan "
        "commit is refused; it rejoins"
    )
    woken = time.monotonic()
    status = wait_for(
        # The survivor first finishes the batches on the partitions it gives back (on a
        # loaded machine a Delta write can take minutes).
        "the woken app to rejoin",
        300,
        cg_is(kube, 2, newer_than=status["generation"]),
    )
    kube.show(
        "get",
        "cg",
        "-o",
        "wide",
        why=f"{time.monotonic() - woken:.0f} s after waking: two members again",
    )

    time.sleep(3)  # a little more work in the new generation
    say("stopping the writer; waiting for the committed offsets to reach the end of the log")
    writer.halt()
    ends = FileLog(work / "log").end_offsets(TOPIC, range(PARTITIONS))
    note(f"the log ends at {ends} ({sum(ends.values())} clicks)")
    wait_for(
        "the committed offsets to reach the log's end", 300, lambda: committed(port) == ends, poll=1
    )
    offsets = committed(port)
    note("caught up: every partition's committed offset is its end")

    say("stopping the applications (SIGTERM: they finish their batch and leave the group)")
    for app in apps:
        app.signal(signal.SIGTERM)
    for app in apps:
        app.stop()
    with contextlib.suppress(DemoFailed):
        wait_for(
            "the group to be Empty", 15, lambda: kube.status("cg", GROUP).get("state") == "Empty"
        )
    kube.show("get", "cg", why="everyone left; the offsets stay committed")

    compare(work, ends, offsets)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records", type=int, default=2000, help="clicks per partition before the apps start"
    )
    parser.add_argument("--rate", type=int, default=300, help="clicks per second appended")
    parser.add_argument(
        "--session-ms",
        type=int,
        # Not the minimum (6000): a Spark driver on a loaded 2-core machine can miss
        # 6 s of heartbeats and fall out of the group before the story starts.
        default=10_000,
        help="the apps' session timeout (the coordinator's minimum is 6000)",
    )
    parser.add_argument(
        "--freeze-s", type=float, default=20.0, help="how long the second app is frozen"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the working directory (it is always kept on failure)",
    )
    args = parser.parse_args()
    # SIGTERM (a timeout, a CI runner) unwinds like Ctrl-C: everything started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="kgroups-demo-"))
    ok = False
    try:
        with contextlib.ExitStack() as stack:
            run(args, work, stack)
            say("done: stopping the operator, the coordinator and the control plane")
        ok = True
    except DemoFailed as exc:
        print(f"\n{RED}DEMO FAILED: {exc}{PLAIN}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: everything the demo started is stopped", file=sys.stderr)
    finally:
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs, input and output are kept in {work}", file=sys.stderr, flush=True)
    print(f"(the demo took {time.monotonic() - STARTED:.0f} s)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
