"""kcat (librdkafka's command-line client, Debian's `kcat` 1.7.1) as a group member.

The harness runs client "kcat" as `python kcat_member.py <member.py's arguments>`: this
wrapper starts `kcat -G GROUP TOPICS...` as its child and speaks member.py's protocol for
it, so a test drives kcat exactly as it drives every other client: the same arguments, the
same JSON events on stdout, `commit N` and `close` on stdin.

What kcat tells, and how it becomes events. kcat prints one line on stderr per rebalance
callback (checked against kcat 1.7.1 with librdkafka 2.0.2):

    % Group g rebalanced (memberid m): assigned: t [0], t [1]          (eager: range,
    % Group g rebalanced (memberid m): revoked: t [0], t [1]            roundrobin)
    % Group g rebalanced: incremental assignment of 1 partition(s) (memberid m,
      COOPERATIVE rebalance protocol): t [2]                           (cooperative-sticky,
    % Group g rebalanced: incremental revoke of ... : t [0]             one line each)

An eager assignment is the whole assignment; a cooperative one is what was added (librdkafka
calls back once per generation, with 0 partitions if nothing was added). The wrapper keeps
the owned set and reports it whole in `assigned`, as member.py does.

kcat prints no generation. librdkafka logs it, though: `-d cgrp` makes it log every
JoinGroup response ("JoinGroup response: GenerationId 3, Protocol range, ..."), and the
rebalance callback of that generation comes after it on the same stderr (SyncGroup is sent
only after the JoinGroup response). So `assigned` carries the generation of the client's
last successful JoinGroup: what the client itself believes, as every other member reports.
Asking the coordinator instead (DescribeGroups) would race with the next rebalance: by the
time the answer comes, the group may be in a newer generation than the assignment.

The rest of the protocol:
  * `close` on stdin, end of stdin, SIGTERM or SIGINT: kcat gets SIGTERM, on which it
    closes its consumer (LeaveGroup, except for a static member, as Kafka's clients do);
    then `{"event": "closed"}` and exit 0.
  * `commit N`: `commit_failed` ("kcat cannot commit on command"): kcat commits only what it
    consumed, and there is nothing to consume from kgroups, which stores no records.
  * kcat dies on its own: `failed` with its exit code and last words, exit 1.
  * SIGKILL of this wrapper kills kcat with it (PR_SET_PDEATHSIG): a killed member sends
    no LeaveGroup, and the coordinator must notice by session timeout.

Known librdkafka 2.0.2 behaviour: with cooperative-sticky, a member closing while it owns
no partitions sends no LeaveGroup (the coordinator expires it after its session timeout).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

KCAT_SH = Path(__file__).resolve().parents[2] / "tools" / "peers" / "kcat.sh"
STRATEGIES = ("range", "roundrobin", "cooperative-sticky")
"""member.py's strategies that librdkafka has, under the same names (it has no eager sticky)."""

EAGER = re.compile(r"^% Group \S+ rebalanced \(memberid (\S*)\): (assigned|revoked): ?(.*)$")
COOPERATIVE = re.compile(
    r"^% Group \S+ rebalanced: incremental (assignment|revoke) of \d+ partition\(s\) "
    r"\(memberid (\S*), COOPERATIVE rebalance protocol\): ?(.*)$"
)
JOINED = re.compile(r"JoinGroup response: GenerationId (\d+), .*: \(no error\)$")
PARTITION = re.compile(r"([A-Za-z0-9._-]+) \[(\d+)\]")
SHOWN = frozenset({"JOINGROUP", "SYNCGROUP", "REBALANCE", "REJOIN", "LEAVEGROUP", "FAIL"})
"""librdkafka debug facilities worth passing on to our stderr (the test shows its tail)."""
CLOSE_TIMEOUT_S = 20.0
PR_SET_PDEATHSIG = 1


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def partitions(text: str) -> set[tuple[str, int]]:
    return {(topic, int(p)) for topic, p in PARTITION.findall(text)}


def listed(owned: set[tuple[str, int]]) -> list[list[Any]]:
    return [[topic, p] for topic, p in sorted(owned)]


def kcat_path() -> str:
    """kcat on PATH, installed through tools/peers/kcat.sh if it is not there yet."""
    found = shutil.which("kcat")
    if found:
        return found
    done = subprocess.run(["bash", str(KCAT_SH)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"kcat_member: tools/peers/kcat.sh failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def kcat_command(args: argparse.Namespace) -> list[str]:
    conf = {
        "client.id": args.client_id,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "max.poll.interval.ms": max(args.max_poll_interval_ms, args.session_timeout_ms),
        "topic.metadata.refresh.interval.ms": args.metadata_max_age_ms,
        "partition.assignment.strategy": args.strategy,
        "enable.auto.commit": "false",
    }
    if args.instance_id is not None:
        conf["group.instance.id"] = args.instance_id
    options = [f"-X{name}={value}" for name, value in conf.items()]
    return [kcat_path(), "-b", args.bootstrap, "-d", "cgrp", *options,
            "-G", args.group, *args.topics.split(",")]  # fmt: skip


class Translator:
    """Turns kcat's stderr into member events; runs on its own thread."""

    def __init__(self) -> None:
        self.generation = -1
        self.owned: set[tuple[str, int]] = set()
        self.last_words: list[str] = []

    def line(self, text: str) -> None:
        if text.startswith("%7|"):
            joined = JOINED.search(text)
            if joined:
                self.generation = int(joined.group(1))
            if text.split("|", 3)[2] in SHOWN:
                sys.stderr.write(text + "\n")
            return
        sys.stderr.write(text + "\n")
        if not text.startswith("% Reached end"):
            self.last_words = [*self.last_words[-4:], text]
        if eager := EAGER.match(text):
            member_id, kind, parts = eager.group(1), eager.group(2), partitions(eager.group(3))
            self._apply(member_id, "assigned" if kind == "assigned" else "revoked", parts)
        elif cooperative := COOPERATIVE.match(text):
            kind, member_id = cooperative.group(1), cooperative.group(2)
            parts = partitions(cooperative.group(3))
            self._apply(member_id, "assigned" if kind == "assignment" else "revoked", parts)

    def _apply(self, member_id: str, kind: str, parts: set[tuple[str, int]]) -> None:
        if kind == "revoked":
            self.owned -= parts
            emit(event="revoked", partitions=listed(parts))
            return
        self.owned |= parts
        emit(event="assigned", generation=self.generation, member_id=member_id,
             partitions=listed(self.owned), added=listed(parts))  # fmt: skip


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the wrapper dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--strategy", default="range", choices=STRATEGIES)
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-interval-ms", type=int, default=30000)
    parser.add_argument("--metadata-max-age-ms", type=int, default=300000)
    args = parser.parse_args()
    emit(event="started", at=time.time())

    kcat = subprocess.Popen(
        kcat_command(args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # consumed records: kgroups has none
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        preexec_fn=die_with_parent,  # noqa: PLW1509 - no threads exist yet
    )
    translator = Translator()
    actions: queue.Queue[str] = queue.Queue()

    def read_kcat() -> None:
        assert kcat.stderr is not None
        for text in kcat.stderr:
            translator.line(text.rstrip("\n"))
        actions.put("exited")

    def read_stdin() -> None:
        for text in sys.stdin:
            actions.put(text.strip())
        actions.put("close")

    reader = threading.Thread(target=read_kcat, name="kcat-stderr", daemon=True)
    reader.start()
    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: actions.put("close"))

    while True:
        try:
            action = actions.get(timeout=1.0)  # a timeout lets signal handlers run
        except queue.Empty:
            continue
        if action == "close":
            kcat.terminate()  # kcat closes its consumer on SIGTERM: LeaveGroup
            try:
                kcat.wait(timeout=CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kcat.kill()
                kcat.wait()
            reader.join(timeout=5)  # the last revocation lines
            emit(event="closed", exit_code=kcat.returncode)
            sys.exit(0)
        if action == "exited":
            code = kcat.wait()
            emit(event="failed", error=f"kcat exited with {code}: {translator.last_words}")
            sys.exit(1)
        if action.startswith("commit "):
            emit(event="commit_failed", error="kcat cannot commit on command")


if __name__ == "__main__":
    main()
