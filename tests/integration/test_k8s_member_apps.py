"""The consumers of examples/k8s/members.yaml, run as their pods run them (the programs of
examples/k8s/apps with the pods' arguments) against a real coordinator: kafka-python,
confluent-kafka and kgroups' own member form one group and split the topic, each prints
what it owns, commits carry on across a hand-over, and SIGTERM leaves the group."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import yaml

from kgroups import admin
from tests.integration.harness import PYTHON, ROOT, Coordinator, create_topic, wait_until

EXAMPLE = ROOT / "examples" / "k8s" / "members.yaml"
APPS = ROOT / "examples" / "k8s" / "apps"
CLIENTS = {
    "billing-kafka-python": "kafka-python",
    "billing-confluent": "confluent-kafka",
    "billing-kgroups": "kgroups",
}


class App:
    """One consumer pod's container: its program, its arguments, its stdout lines."""

    def __init__(self, deployment: dict[str, Any], bootstrap: str, tmp: Path) -> None:
        self.name = deployment["metadata"]["name"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        python, program = container["command"]
        assert python == "python" and program.startswith("/app/")
        args = [a if not a.startswith("--bootstrap-server=") else f"--bootstrap-server={bootstrap}"
                for a in container["args"]]  # fmt: skip
        self.proc = subprocess.Popen(
            [PYTHON, str(APPS / program.removeprefix("/app/")), *args,
             f"--client-id={self.name}", "--commit-interval-ms=500"],
            stdout=subprocess.PIPE, stderr=(tmp / f"{self.name}.log").open("wb"), text=True,
        )  # fmt: skip
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    @property
    def last(self) -> dict[str, Any] | None:
        return self.lines[-1] if self.lines else None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self._reader.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def settled(apps: list[App], partitions: int) -> int | None:
    """The generation in which `apps` own every partition once, if they do."""
    lasts = [app.last for app in apps]
    if any(last is None or last["generation"] is None for last in lasts):
        return None
    generations = {last["generation"] for last in lasts if last}
    owned = sorted(p for last in lasts if last for _, p in last["assigned"])
    return generations.pop() if len(generations) == 1 and owned == list(range(partitions)) else None


async def committed(port: int) -> dict[tuple[str, int], int]:
    async with admin.Admin("127.0.0.1", port) as client:
        return await client.committed_offsets("billing")


async def members(port: int) -> int:
    async with admin.Admin("127.0.0.1", port) as client:
        return len((await client.describe_group("billing")).members)


def test_the_example_consumers_split_the_topic_commit_and_leave(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    create_topic(coordinator, "orders", 6)
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    started = [App(d, coordinator.bootstrap, tmp_path) for d in docs
               if d["metadata"]["name"] in CLIENTS]  # fmt: skip
    apps = list(started)
    try:
        assert len(apps) == 3
        wait_until(lambda: settled(apps, 6), 60, "three members owning two partitions each")
        for app in apps:
            assert app.last is not None
            assert app.last["client"] == CLIENTS[app.name]
            assert app.last["name"] == app.name
            assert len(app.last["assigned"]) == 2
        assert asyncio.run(members(coordinator.port)) == 3

        def all_committed(at_least: int) -> dict[tuple[str, int], int] | None:
            offsets = asyncio.run(committed(coordinator.port))
            ok = len(offsets) == 6 and min(offsets.values()) >= at_least
            return offsets if ok else None

        before = wait_until(lambda: all_committed(2), 30, "every partition committed")
        # One by one, each consumer told to stop leaves the group (no session timeout to
        # wait out); the others take its partitions and carry on from its offsets.
        while apps:
            leaving = apps.pop(0)
            assert leaving.stop() == 0
            assert leaving.last == {"client": CLIENTS[leaving.name], "name": leaving.name,
                                    "generation": None, "assigned": []}  # fmt: skip
            left = f"explicit LeaveGroup request for ['{leaving.name}-"
            wait_until(lambda: left in coordinator.log(), 10, "the LeaveGroup")  # noqa: B023
            if apps:
                wait_until(lambda: settled(apps, 6), 30, f"{len(apps)} owning all six")
                more = max(before.values()) + 1
                after = wait_until(lambda: all_committed(more), 30, "commits to carry on")  # noqa: B023
                assert all(after[tp] > before[tp] for tp in before)
                before = after
        assert asyncio.run(members(coordinator.port)) == 0
    finally:
        for app in started:
            app.kill()
