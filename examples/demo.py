"""`make demo`: a coordinator, a topic, three Kafka consumers, one killed, the rebalance,
then a kgroups sidecar joining the same group for an app that speaks only HTTP.

Everything runs on 127.0.0.1 and is stopped at the end (also on Ctrl-C). The first members
are unmodified kafka-python consumers: kgroups speaks the Kafka protocol, so any Kafka
client can be a member. The sidecar is kgroups' own member library in its own process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kafka.admin import KafkaAdminClient

ROOT = Path(__file__).resolve().parents[1]
TOPIC, GROUP, PARTITIONS, SESSION_MS = "orders", "demo", 6, 6000


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


class Member:
    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "kafka_python_member.py"),
             "--bootstrap", bootstrap, "--group", GROUP, "--topic", TOPIC, "--name", name,
             "--session-timeout-ms", str(SESSION_MS), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.events.append(event)
            if event["event"] == "assigned" and event["partitions"]:
                print(
                    f"   {self.name}: generation {event['generation']}, "
                    f"partitions {event['partitions']}",
                    flush=True,
                )

    def owned(self) -> tuple[int, list[int]] | None:
        for event in reversed(self.events):
            if event["event"] == "assigned":
                return event["generation"], event["partitions"]
        return None


class Sidecar:
    """`kgroups sidecar`: its app would read GET /assignment; the demo does the same."""

    def __init__(self, bootstrap: str, work: Path) -> None:
        self.name = "sidecar"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kgroups", "sidecar", "--bootstrap", bootstrap,
             "--group", GROUP, "--topics", TOPIC, "--http", "127.0.0.1:0",
             "--assignment-file", str(work / "assignment.json"),
             "--session-timeout-ms", str(SESSION_MS), "--heartbeat-interval-ms", "1000",
             # The demo is this sidecar's only "app" and acknowledges nothing: on stop,
             # leave after 1 s instead of waiting 10 s for an acknowledgement.
             "--close-timeout-ms", "1000"],
            stdout=subprocess.PIPE, stderr=(work / "sidecar.log").open("w"), text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.address = json.loads(self.proc.stdout.readline())["http"]

    def get(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.address}/assignment", timeout=5) as r:
            state: dict[str, Any] = json.loads(r.read())
        return state

    def owned(self) -> tuple[int, list[int]] | None:
        state = self.get()
        if state["state"] != "stable" or state["revoking"]:
            return None
        return state["generation"], state["assignment"].get(TOPIC, [])


def wait_cover(members: list[Any], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reports = [m.owned() for m in members]
        if all(reports):
            generations = {r[0] for r in reports if r}
            owned = sorted(p for r in reports if r for p in r[1])
            if len(generations) == 1 and owned == list(range(PARTITIONS)):
                return generations.pop()
        time.sleep(0.1)
    raise SystemExit("the group did not converge in time; see .kgroups-demo/coordinator.log")


def main() -> None:
    work = ROOT / ".kgroups-demo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    port_file = Path(tempfile.mkdtemp()) / "port"
    log = (work / "coordinator.log").open("w")
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "kgroups", "coordinator", "--listen", "127.0.0.1:0",
         "--data-dir", str(work / "data"), "--port-file", str(port_file),
         "--initial-rebalance-delay-ms", "1500", "--min-session-timeout-ms", "1000"],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    members: list[Member | Sidecar] = []
    try:
        while not port_file.exists():
            if coordinator.poll() is not None:
                raise SystemExit((work / "coordinator.log").read_text())
            time.sleep(0.05)
        bootstrap = f"127.0.0.1:{port_file.read_text().strip()}"
        say(f"coordinator listening on {bootstrap} (store: {work / 'data'})")

        say(f"kgroups topic create {TOPIC} --partitions {PARTITIONS}")
        subprocess.run(
            [sys.executable, "-m", "kgroups", "topic", "create", TOPIC,
             "--partitions", str(PARTITIONS), "--bootstrap", bootstrap],
            check=True,
        )  # fmt: skip

        say("three kafka-python consumers join group 'demo'")
        members = [Member(bootstrap, f"member-{i}") for i in (1, 2, 3)]
        generation = wait_cover(members, 60)
        say(f"generation {generation}: every partition owned by exactly one member")

        victim = members.pop(1)
        assert isinstance(victim, Member)
        say(f"kill -9 {victim.name}: no LeaveGroup, the coordinator must notice on its own")
        victim.proc.kill()
        killed_at = time.monotonic()
        new_generation = wait_cover(members, SESSION_MS / 1000 + 30)
        elapsed = time.monotonic() - killed_at
        say(
            f"generation {new_generation} after {elapsed:.1f} s (session timeout "
            f"{SESSION_MS / 1000:.0f} s): the survivors own all {PARTITIONS} partitions"
        )

        say("an app in any language joins through `kgroups sidecar` (file + local HTTP)")
        sidecar = Sidecar(bootstrap, work)
        members.append(sidecar)
        generation = wait_cover(members, 60)
        print(f"   GET http://{sidecar.address}/assignment -> {json.dumps(sidecar.get())}")
        say(f"generation {generation}: kafka-python consumers and the sidecar share the topic")

        say("DescribeGroups, through kafka-python's KafkaAdminClient")
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        described = admin.describe_groups([GROUP])[GROUP]
        admin.close()
        print(f"   state={described['group_state']} protocol={described['protocol_data']}")
        for m in described["members"]:
            parts = [
                p for a in m["member_assignment"]["assigned_partitions"] for p in a["partitions"]
            ]
            print(f"   {m['client_id']:<10} {m['member_id']:<48} partitions {sorted(parts)}")
        say("done: stopping the members (they leave the group) and the coordinator")
    finally:
        for m in members:
            m.proc.terminate()
        for m in members:
            try:
                m.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                m.proc.kill()
        coordinator.terminate()
        coordinator.wait(timeout=15)
        log.close()


if __name__ == "__main__":
    main()
