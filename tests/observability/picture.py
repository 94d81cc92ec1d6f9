"""`make dashboard-picture`: a rebalance storm and its recovery, drawn by the group dashboard.

Runs what the picture shows, for real: a coordinator, three sidecar members whose
applications commit every half second, and Prometheus (Debian's, on loopback, scraping
every second). After a quiet minute a member starts crash-looping (a sidecar started and
SIGKILLed over and over: each start and each session expiry is a rebalance), another is
frozen past its session timeout, then everything calms down. tools/render_dashboard.py
then draws kgroups-group.json for the group from that Prometheus into
docs/dashboard-group.png, shown in the README (the Spark panels stay empty: no Spark
member runs). About four minutes.

    .venv/bin/python -m tests.observability.picture [--out docs/dashboard-group.png]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.test_observability import GROUP, PARTITIONS, SIDECAR, TOPIC, Committer
from tests.integration.conftest import FAST
from tests.integration.harness import ROOT, Coordinator, SidecarProcess, create_topic, free_port
from tests.observability.prom import Prometheus

QUIET_S = 60
CRASHES = 6
RECOVERY_S = 75


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard-group.png")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kgroups-picture-") as tmp:
        return _run(Path(tmp), args.out)


def _run(tmp: Path, out: Path) -> int:
    metrics = free_port()
    coord = Coordinator(tmp / "data", *FAST, "--metrics", f"127.0.0.1:{metrics}")
    cars: list[SidecarProcess] = []
    committers: list[Committer] = []
    prom: Prometheus | None = None

    def sidecar(name: str) -> SidecarProcess:
        car = SidecarProcess(coord, name, "range", tmp, SIDECAR, group=GROUP, topics=TOPIC)
        cars.append(car)
        committers.append(Committer(car))
        committers[-1].start()
        return car

    try:
        coord.start()
        create_topic(coord, TOPIC, PARTITIONS)
        steady = [sidecar(n) for n in ("a", "b", "c")]
        crashing = sidecar("crashing")
        prom = Prometheus(tmp / "prometheus", {
            "kgroups-coordinator": [f"127.0.0.1:{metrics}"],
            "kgroups-members": [c.address for c in (*steady, crashing)],
        })  # fmt: skip
        prom.start()
        start = time.time()
        print(f"quiet for {QUIET_S}s", file=sys.stderr)
        time.sleep(QUIET_S)
        print("storm: a member crash-loops, another freezes", file=sys.stderr)
        for i in range(CRASHES):
            crashing.proc.kill()
            crashing.proc.wait()
            time.sleep(4)  # its session (3 s) expires: a rebalance
            if i == CRASHES // 2:
                steady[1].proc.send_signal(signal.SIGSTOP)
                time.sleep(5)
                steady[1].proc.send_signal(signal.SIGCONT)
            crashing = sidecar(f"crashing{i}")  # restarted: it joins, a rebalance
            time.sleep(3)
        crashing.proc.kill()
        print(f"recovery for {RECOVERY_S}s", file=sys.stderr)
        time.sleep(RECOVERY_S)
        out.parent.mkdir(parents=True, exist_ok=True)
        return subprocess.call([
            sys.executable, str(ROOT / "tools" / "render_dashboard.py"),
            str(ROOT / "dashboards" / "kgroups-group.json"), "--prometheus", prom.url,
            "--from", f"{start:.0f}", "--to", f"{time.time():.0f}", "--group", GROUP,
            "--scrape-interval", "1s", "--out", str(out),
        ])  # fmt: skip
    finally:
        for committer in committers:
            committer.done.set()
        for car in cars:
            if car.proc.poll() is None:
                car.proc.send_signal(signal.SIGCONT)
                car.stop()
        if prom is not None:
            prom.stop()
        coord.kill()


if __name__ == "__main__":
    sys.exit(main())
