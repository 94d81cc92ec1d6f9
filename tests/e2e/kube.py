"""The e2e tier's view of Kubernetes: a real control plane (e2e/controlplane/up.sh),
kubectl as users run it, and the operator as a process.

Everything talks to the API server over loopback with client certificates; every wait
is bounded; every process started is stopped by the fixture that started it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.harness import PYTHON, ROOT

CONTROLPLANE = ROOT / "e2e" / "controlplane"


def tools() -> tuple[Path, Path]:
    """(the directory with kubectl, helm): built by e2e/controlplane/build.sh, cached."""
    out = subprocess.run(
        ["bash", str(CONTROLPLANE / "build.sh")], check=True, capture_output=True, text=True
    ).stdout.split()
    return Path(out[0]), Path(out[2]) / "helm"


class Kubectl:
    """kubectl as users run it, against one cluster's admin kubeconfig."""

    bin: Path
    kubeconfig: Path

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        # kubectl's own --timeout (a delete --wait) gets its time, and half a minute more.
        waits = [int(a[len("--timeout=") : -1]) for a in args
                 if a.startswith("--timeout=") and a.endswith("s") and a[10:-1].isdigit()]  # fmt: skip
        result = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=max([60, *(w + 30 for w in waits)]),
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def get(self, kind: str, name: str, namespace: str = "default") -> dict[str, Any]:
        out = self.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout
        obj: dict[str, Any] = json.loads(out)
        return obj

    def exists(self, kind: str, name: str, namespace: str = "default") -> bool:
        return self.kubectl("get", kind, name, "-n", namespace, check=False).returncode == 0


class ControlPlane(Kubectl):
    """etcd + kube-apiserver + kube-controller-manager in `dir`, admin kubeconfig."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.kubeconfig = directory / "kubeconfig"
        self.bin, self.helm = tools()

    def up(self) -> None:
        subprocess.run(
            ["bash", str(CONTROLPLANE / "up.sh"), str(self.dir)], check=True, capture_output=True
        )

    def down(self) -> None:
        subprocess.run(["bash", str(CONTROLPLANE / "down.sh"), str(self.dir)], check=False)

    def user(self, name: str, group: str | None = None) -> Path:
        args = ["bash", str(CONTROLPLANE / "user.sh"), str(self.dir), name]
        out = subprocess.run([*args, *([group] if group else [])], check=True,
                             capture_output=True, text=True)  # fmt: skip
        return Path(out.stdout.strip())


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return None


class Operator:
    """`kgroups operator` as a subprocess with a given kubeconfig."""

    def __init__(self, kubeconfig: Path, coordinator: str, log_path: Path, *extra: str) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "kgroups", "operator", "--coordinator", coordinator, *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        )
        log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
