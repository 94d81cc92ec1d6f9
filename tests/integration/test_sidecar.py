"""`kgroups sidecar`: applications that only read a file or local HTTP never overlap.

Each sidecar is a real process on the real coordinator. Each "application" is a thread
that does what a well-behaved app in any language would: poll GET /assignment, work on
exactly the partitions listed under "assignment", and POST /revoked once it has stopped
working on the ones listed under "revoking". A shared ledger records who works on what;
claiming a partition another app still works on is the failure this test exists for.
Sidecars join, leave (SIGTERM) and rejoin while the apps run, with an eager and with a
cooperative assignor.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kgroups import admin
from tests.integration.harness import PYTHON, ROOT, Coordinator, SidecarProcess, wait_until


async def end_offsets(coordinator: Coordinator, topic: str, partitions: int) -> dict[int, int]:
    async with admin.Admin("127.0.0.1", coordinator.port) as client:
        return await client.end_offsets(topic, partitions)


def http(address: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


DRAIN = 0.3


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.worker: dict[int, str] = {}
        self.violations: list[str] = []


class App(threading.Thread):
    """What a correct application does with the sidecar's HTTP API."""

    def __init__(self, sidecar: SidecarProcess, ledger: Ledger) -> None:
        super().__init__(name=f"app-{sidecar.name}", daemon=True)
        self.sidecar, self.ledger = sidecar, ledger
        self.working: set[int] = set()
        self.stop_flag = threading.Event()
        self.acks = 0

    def run(self) -> None:
        draining_since: float | None = None
        while not self.stop_flag.is_set():
            try:
                _, state = http(self.sidecar.address, "GET", "/assignment")
            except OSError:
                break  # the sidecar is gone (after SIGTERM)
            assigned = set(state["assignment"].get("jobs", []))
            revoking = set(state["revoking"].get("jobs", []))
            # Stopping takes a while (in-flight work finishes): keep working on revoked
            # partitions for DRAIN seconds, then let go and acknowledge.
            if revoking and draining_since is None:
                draining_since = time.monotonic()
            done_draining = draining_since is not None and (
                time.monotonic() - draining_since >= DRAIN
            )
            keep = assigned | (revoking if not done_draining else set())
            with self.ledger.lock:
                for p in self.working - keep:
                    del self.ledger.worker[p]
                for p in keep - self.working:
                    other = self.ledger.worker.get(p)
                    if other is not None:
                        self.ledger.violations.append(f"{self.name} took {p} from {other}")
                    self.ledger.worker[p] = self.name
                self.working = keep
            if done_draining:
                http(self.sidecar.address, "POST", "/revoked", {})
                self.acks += 1
                draining_since = None
            time.sleep(0.02)
        with self.ledger.lock:
            for p in self.working:
                self.ledger.worker.pop(p, None)
            self.working = set()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_apps_behind_sidecars_never_work_on_the_same_partition(
    coordinator: Coordinator, tmp_path: Path, strategy: str
) -> None:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "jobs", 12))
    ledger = Ledger()
    cars: list[SidecarProcess] = []
    apps: list[App] = []

    def launch(name: str) -> tuple[SidecarProcess, App]:
        car = SidecarProcess(coordinator, name, strategy, tmp_path)
        cars.append(car)
        app = App(car, ledger)
        apps.append(app)
        app.start()
        return car, app

    def covered(live: list[App]) -> bool:
        with ledger.lock:
            return sorted(p for a in live for p in a.working) == list(range(12))

    try:
        a, app_a = launch("a")
        b, app_b = launch("b")
        live = [app_a, app_b]
        wait_until(lambda: covered(live), 40, "two apps to cover the topic")
        c, app_c = launch("c")
        live.append(app_c)
        wait_until(lambda: covered(live) and all(len(x.working) == 4 for x in live), 40,
                   "three apps with 4 partitions each")  # fmt: skip
        assert not ledger.violations, ledger.violations
        assert app_a.acks + app_b.acks > 0, "revocations must wait for the app's ack"

        # The file says what HTTP says (atomically written JSON).
        on_disk = json.loads(c.file.read_text())
        _, over_http = http(c.address, "GET", "/assignment")
        assert on_disk["assignment"] == over_http["assignment"]
        assert on_disk["generation"] == over_http["generation"] > 0

        # Commit: own partitions only; a partition of another member is refused.
        mine = over_http["assignment"]["jobs"][0]
        status, body = http(c.address, "POST", "/commit", {"offsets": {"jobs": {str(mine): 5}}})
        assert status == 200 and body["committed"] == 1, body
        theirs = next(p for p in range(12) if p not in over_http["assignment"]["jobs"])
        status, body = http(c.address, "POST", "/commit", {"offsets": {"jobs": {str(theirs): 5}}})
        assert status == 409, body
        status, body = http(c.address, "POST", "/commit", {"nonsense": True})
        assert status == 400, body
        # Pinned to the generation the work was read in: accepted while it is current,
        # refused (409) once it is not, even for a partition the member still holds.
        generation = over_http["generation"]
        pinned = {"offsets": {"jobs": {str(mine): 6}}, "generation": generation}
        status, body = http(c.address, "POST", "/commit", pinned)
        assert status == 200, body
        stale = {"offsets": {"jobs": {str(mine): 7}}, "generation": generation - 1}
        status, body = http(c.address, "POST", "/commit", stale)
        assert status == 409 and "generation" in body["error"], body
        status, body = http(c.address, "POST", "/commit", {**pinned, "generation": "7"})
        assert status == 400, body
        # The application says where its source ends: Kafka's tools then see the true end.
        ended = {**pinned, "log_ends": {"jobs": {str(mine): 90}}}
        assert http(c.address, "POST", "/commit", ended)[0] == 200
        ends = asyncio.run(end_offsets(coordinator, "jobs", 12))
        assert ends[mine] == 90, ends
        status, body = http(c.address, "GET", "/healthz")
        assert status == 200

        # A sidecar stops: its app acknowledges, the others take over.
        assert a.stop() == 0
        app_a.stop_flag.set()
        app_a.join(10)
        live.remove(app_a)
        wait_until(lambda: covered(live), 40, "the remaining apps to cover the topic")
        d, app_d = launch("d")
        live.append(app_d)
        wait_until(lambda: covered(live) and all(len(x.working) == 4 for x in live), 40,
                   "the newcomer to get its share")  # fmt: skip
        assert not ledger.violations, ledger.violations
    finally:
        for car in cars:  # while the apps still run and acknowledge
            car.stop()
        for app in apps:
            app.stop_flag.set()
        for app in apps:
            app.join(10)
    assert not ledger.violations, ledger.violations


def test_consumer_protocol_sidecars_hand_partitions_over_only_after_the_apps_let_go(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """`kgroups sidecar --group-protocol consumer`: Kafka 4's protocol (the coordinator
    assigns) behind the same file and HTTP API: a revocation waits for the app's
    acknowledgement before the release is reported, so no partition is worked on twice."""
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "jobs", 12))
    ledger = Ledger()
    cars: list[SidecarProcess] = []
    apps: list[App] = []
    consumer = ("--group-protocol", "consumer", "--server-assignor", "uniform")

    def launch(name: str) -> App:
        car = SidecarProcess(coordinator, name, "range", tmp_path, extra=consumer)
        cars.append(car)
        app = App(car, ledger)
        apps.append(app)
        app.start()
        return app

    def covered(live: list[App]) -> bool:
        with ledger.lock:
            return sorted(p for a in live for p in a.working) == list(range(12))

    try:
        live = [launch("a"), launch("b")]
        wait_until(lambda: covered(live), 40, "two apps to cover the topic")
        live.append(launch("c"))
        wait_until(lambda: covered(live) and all(len(x.working) == 4 for x in live), 40,
                   "three apps with 4 partitions each")  # fmt: skip
        assert not ledger.violations, ledger.violations
        assert live[0].acks + live[1].acks > 0, "revocations must wait for the app's ack"
        _, state = http(cars[2].address, "GET", "/assignment")
        assert state["state"] == "stable" and state["generation"] > 0, state
        mine = state["assignment"]["jobs"][0]
        status, body = http(
            cars[2].address, "POST", "/commit", {"offsets": {"jobs": {str(mine): 5}}}
        )
        assert status == 200 and body["committed"] == 1, body
        theirs = next(p for p in range(12) if p not in state["assignment"]["jobs"])
        status, body = http(
            cars[2].address, "POST", "/commit", {"offsets": {"jobs": {str(theirs): 5}}}
        )
        assert status == 409, body
        assert cars[0].stop() == 0
        apps[0].stop_flag.set()
        apps[0].join(10)
        live.remove(apps[0])
        wait_until(lambda: covered(live), 40, "the remaining apps to cover the topic")
        assert not ledger.violations, ledger.violations
    finally:
        for car in cars:
            car.stop()
        for app in apps:
            app.stop_flag.set()
        for app in apps:
            app.join(10)
    assert not ledger.violations, ledger.violations


EXAMPLE = ROOT / "examples" / "k8s" / "members.yaml"


def example_member() -> tuple[tuple[str, ...], str]:
    """The sidecar's timeouts and the application script of examples/k8s/members.yaml."""
    import yaml

    pod = next(yaml.safe_load_all(EXAMPLE.read_text()))["spec"]["template"]["spec"]
    sidecar, app = pod["containers"]
    timeouts = tuple(a.replace("=", " ", 1) for a in sidecar["args"] if "-ms=" in a)
    return tuple(" ".join(timeouts).split()), app["args"][0]


def test_the_example_pods_slow_application_keeps_every_member(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """Issue 10, finding 1, as seen with examples/k8s/members.yaml's settings: one sidecar
    alone, two more join, and the applications take 1.5 session timeouts (6 s) to stop
    work on revoked partitions. The sidecars heartbeat meanwhile: nobody is expelled,
    the group settles with all three, and stays so. The example's own application
    script (made 6 s slow) does the acknowledging."""
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "jobs", 6))
    timeouts, script = example_member()
    assert timeouts[:2] == ("--session-timeout-ms", "4000"), timeouts
    slow = script.replace('call("/revoked", {})', 'time.sleep(6); call("/revoked", {})')
    assert slow != script
    cars: list[SidecarProcess] = []
    apps: list[subprocess.Popen[bytes]] = []

    def launch(name: str) -> SidecarProcess:
        car = SidecarProcess(coordinator, name, "range", tmp_path, timeouts)
        cars.append(car)
        code = slow.replace("http://127.0.0.1:8080", f"http://{car.address}")
        apps.append(subprocess.Popen([PYTHON, "-u", "-c", code], stdout=subprocess.DEVNULL,
                                     stderr=(tmp_path / f"{name}-app.log").open("wb")))  # fmt: skip
        return car

    def states() -> list[dict[str, Any]]:
        return [http(car.address, "GET", "/assignment")[1] for car in cars]

    def settled() -> bool:
        now = states()
        return (all(st["state"] == "stable" and len(st["assignment"].get("jobs", [])) == 2
                    for st in now) and len({st["generation"] for st in now}) == 1)  # fmt: skip

    try:
        first = launch("a")
        wait_until(lambda: len(states()[0]["assignment"].get("jobs", [])) == 6, 30, "a alone")
        first_id = states()[0]["member_id"]
        launch("b")
        launch("c")
        wait_until(settled, 60, "three sidecars with two partitions each")
        generation = states()[0]["generation"]
        end = time.monotonic() + 3 * 4.0  # three session timeouts
        while time.monotonic() < end:
            assert settled() and states()[0]["generation"] == generation, states()
            time.sleep(0.25)
        assert states()[0]["member_id"] == first_id  # never expelled, never rejoined anew
        log = (tmp_path / "a.log").read_text()
        assert "partitions lost" not in log, log
        assert first.proc.poll() is None
    finally:  # as a pod stops: both containers get SIGTERM; the apps ack until the end
        for app in apps:
            app.send_signal(signal.SIGTERM)
        for car in cars:
            car.stop()
        for app in apps:
            app.wait(timeout=30)


def test_sidecar_rejects_bad_usage(coordinator: Coordinator) -> None:
    result = subprocess.run(
        [PYTHON, "-m", "kgroups", "sidecar", "--group", "g", "--topics", "t"],
        check=False, capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "--assignment-file" in result.stderr
