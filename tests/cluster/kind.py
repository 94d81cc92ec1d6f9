"""A kind cluster on this machine's own container runtime (e2e/cluster/kind.sh), driven
the way its users drive it: kubectl, helm, and images loaded into the node.

Waits are bounded and poll the API server; `holds` asserts a state over a stretch of
time, not one lucky sample. What a failed test leaves to look at (events, pod logs, the
node's kubelet and containerd journals) is collected by `logs`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests import waits
from tests.e2e.kube import Kubectl, tools
from tests.integration.harness import ROOT
from tests.waits import within

KIND = ROOT / "e2e" / "cluster" / "kind.sh"
IMAGES = ROOT / "e2e" / "cluster" / "images.sh"
NAMESPACE = "kgroups"
RELEASE = "kgroups"


def script(docker_host: str, *args: str, timeout: float) -> str:
    """Run one of e2e/cluster's scripts; its stdout, or a failure with its stderr's tail."""
    done = subprocess.run(
        ["bash", *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "DOCKER_HOST": docker_host},
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


class KindCluster(Kubectl):
    """One kind cluster, created (or reused) by `up`, deleted by `down`."""

    def __init__(self, name: str, docker_host: str) -> None:
        self.name = name
        self.docker_host = docker_host
        self.bin, self.helm_bin = tools()
        self._loader = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-load")
        self._loading: dict[str, Future[None]] = {}

    def up(self) -> None:
        out = script(self.docker_host, str(KIND), "up", self.name, timeout=1800)
        self.kubeconfig = Path(out.strip().splitlines()[-1])

    def load(self, images: list[str]) -> None:
        script(self.docker_host, str(KIND), "load", self.name, *images, timeout=1200)

    def load_meanwhile(self, images: list[str]) -> None:
        """Load `images` into the node one after the other while tests run (the Spark
        image alone takes a minute): kubectl waits for any of them a manifest names."""
        for image in images:
            self._loading[image] = self._loader.submit(self.load, [image])

    def loaded(self, text: str = "") -> None:
        """Wait until every image still loading that `text` names (all: "") is in."""
        for image, done in self._loading.items():
            if not text or image in text:
                done.result()

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        if "apply" in args or "create" in args:
            # A pod of an image not yet in the node would back off pulling it from a
            # registry nobody can reach: what a manifest names is loaded first.
            files = [
                args[i + 1] for i, a in enumerate(args[:-1]) if a == "-f" and args[i + 1] != "-"
            ]
            self.loaded("".join([input or "", *(Path(f).read_text() for f in files)]))
        return super().kubectl(*args, input=input, check=check, kubeconfig=kubeconfig)

    def logs(self, directory: Path) -> Path:
        script(self.docker_host, str(KIND), "logs", self.name, str(directory), timeout=300)
        return directory

    def down(self) -> None:
        subprocess.run(
            ["bash", str(KIND), "down", self.name], capture_output=True, timeout=300, check=False,
            env={**os.environ, "DOCKER_HOST": self.docker_host},
        )  # fmt: skip

    def helm(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run(
            [str(self.helm_bin), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stderr[-4000:]}")
        return done.stdout

    def k(self, *args: str, input: str | None = None) -> str:
        """kubectl in the release's namespace; its stdout."""
        return self.kubectl("-n", NAMESPACE, *args, input=input).stdout

    def status(self, kind: str, name: str) -> dict[str, Any]:
        """The object's status ({} while it has none, or while the object is missing)."""
        got = self.kubectl("get", kind, name, "-n", NAMESPACE, "-o", "json", check=False)
        if got.returncode != 0:
            return {}
        obj: dict[str, Any] = json.loads(got.stdout)
        return dict(obj.get("status") or {})

    def pods(self, app: str) -> list[dict[str, Any]]:
        out = self.k("get", "pods", "-l", f"app={app}", "-o", "json")
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def node(self, *command: str) -> str:
        """Run a command on the (only) node, as root in its own namespaces; its stdout."""
        done = subprocess.run(
            ["docker", "exec", f"{self.name}-control-plane", *command],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "DOCKER_HOST": self.docker_host},
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"on the node: {' '.join(command)} failed:\n{done.stderr}")
        return done.stdout

    def exec_python(self, target: str, code: str) -> str:
        """Run Python in a pod (`target` as kubectl exec takes it) and return its stdout."""
        return self.k("exec", target, "--", "python", "-c", code)


def ready(status: dict[str, Any]) -> dict[str, Any]:
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            return dict(c)
    return {}


def wait_for(probe: Callable[[], Any], timeout: float, what: str, poll: float = 1.0) -> Any:
    """`probe()`'s first truthy value, or a failure naming `what` and the last value seen
    (the bound scaled by KGROUPS_TEST_SLOWNESS: `tests/waits.py`)."""
    timeout = within(timeout)
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {last!r}")


def holds(probe: Callable[[], Any], seconds: float, what: str, poll: float = 1.0) -> int:
    """Assert `probe()` is truthy at every sample for `seconds`; returns the sample count
    (`tests/waits.holds`, sampling every second by default: each probe runs kubectl)."""
    return waits.holds(probe, seconds, what, poll)
