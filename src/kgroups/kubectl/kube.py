"""kubectl, run for the plugin.

The plugin talks to the API server through the `kubectl` binary rather than an HTTP
client of its own: whatever the user's kubeconfig needs (exec credential plugins such as
cloud logins, OIDC, client certificates, proxies, `KUBECONFIG` with several files, the
context's default namespace) then works exactly as it does for kubectl, and the plugin
holds no credentials. kubectl does not hand its global flags to plugins, so the plugin
takes them itself (`Target`) and passes them on to every call. `KGROUPS_KUBECTL` names
another binary than the `kubectl` on PATH.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any

RESOURCE = "consumergroups.kgroups.io"
KUBECTL_ENV = "KGROUPS_KUBECTL"
CALL_TIMEOUT_S = 60.0


class KubectlError(Exception):
    """kubectl failed; the message is what it said (e.g. the API server's refusal)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Which cluster, as whom, and where: kubectl's global flags."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False

    def flags(self, *, namespaced: bool = True) -> list[str]:
        """The flags for one kubectl call (no namespace flag: the context's namespace)."""
        out: list[str] = []
        if self.kubeconfig:
            out += ["--kubeconfig", self.kubeconfig]
        if self.context:
            out += ["--context", self.context]
        if namespaced and self.all_namespaces:
            out.append("--all-namespaces")
        elif namespaced and self.namespace:
            out += ["--namespace", self.namespace]
        return out


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """kubectl's --timeout values (Go durations: `30s`, `1m30s`, `500ms`, `2h`; a bare
    number is seconds), in seconds."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    if not value or _DURATION.sub("", value):
        raise ValueError(f"invalid duration {text!r}: expected e.g. 30s, 2m or 1m30s")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[unit] for n, unit in _DURATION.findall(value))


class Kubectl:
    """kubectl calls against one `Target`."""

    def __init__(self, target: Target, binary: str | None = None) -> None:
        self.target = target
        self.binary = binary or os.environ.get(KUBECTL_ENV) or "kubectl"

    def run(self, *args: str, namespaced: bool = True) -> str:
        # After the verb: kubectl takes a flag before it (--all-namespaces is get's, not
        # global) for a plugin's name.
        command = [self.binary, *args, *self.target.flags(namespaced=namespaced)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=CALL_TIMEOUT_S, check=False
            )
        except FileNotFoundError as exc:
            raise KubectlError(
                f"{self.binary} not found: kubectl kgroups runs kubectl (set {KUBECTL_ENV} "
                "to use another binary)"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise KubectlError(f"kubectl {args[0]} took longer than {CALL_TIMEOUT_S:.0f}s") from exc
        if done.returncode != 0:
            raise KubectlError(done.stderr.strip() or f"kubectl exited with {done.returncode}")
        return done.stdout

    def json(self, *args: str, namespaced: bool = True) -> Any:
        return json.loads(self.run(*args, "-o", "json", namespaced=namespaced))

    def list(self) -> list[dict[str, Any]]:
        """ConsumerGroups in the target namespace (every namespace with -A)."""
        items: list[dict[str, Any]] = self.json("get", RESOURCE).get("items") or []
        return items

    def get(self, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self.json("get", RESOURCE, name)
        return body

    def find(self, name: str) -> dict[str, Any] | None:
        """The ConsumerGroup, or None once it is gone."""
        out = self.run("get", RESOURCE, name, "--ignore-not-found", "-o", "json")
        body: dict[str, Any] | None = json.loads(out) if out.strip() else None
        return body

    def annotate(self, name: str, annotations: dict[str, str], resource_version: str) -> None:
        """Set annotations, only on the object as read (`resource_version`): the caller
        has checked that version holds no pending request, so nothing pending is replaced
        (a leftover writer annotation of a cancelled request is)."""
        self.run("annotate", RESOURCE, name, *(f"{k}={v}" for k, v in annotations.items()),
                 "--overwrite", f"--resource-version={resource_version}")  # fmt: skip

    def delete(self, name: str) -> str:
        return self.run("delete", RESOURCE, name, "--wait=false").strip()

    def whoami(self) -> str:
        """The user the API server sees (SelfSubjectReview, `kubectl auth whoami`), or
        `unknown` where it cannot say (servers before 1.28, or refused)."""
        try:
            review = self.json("auth", "whoami", namespaced=False)
        except (KubectlError, ValueError):
            return "unknown"
        name = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        return name if isinstance(name, str) and name else "unknown"
