"""What a container runtime and a Kubernetes node change on the host they run on, as a
value to compare: iptables and ip6tables rules, the sysctls dockerd, kubelet and
kube-proxy set (the kernel's, not a network namespace's: a privileged kind node writes
the host's), network links, and the cgroups at the top of each hierarchy (the runtime
makes one for its containers).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SYSCTLS = (
    "net.ipv4.ip_forward",  # dockerd
    "kernel.panic",  # kubelet (protectKernelDefaults off: it sets these)
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)


def run(*cmd: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True, env=env)
    return done.stdout


def rules(tool: str) -> set[str]:
    """Every rule and user chain (an empty table of ACCEPT built-in chains is no rule).
    On a fresh machine the tool is not installed yet (e2e/cluster/runtime.sh installs
    it): then nothing has set a rule through it, and its rules are none."""
    if shutil.which(f"{tool}-save") is None:
        return set()
    out = run(f"{tool}-save")
    kept = set()
    table = ""
    for line in out.splitlines():
        if line.startswith("*"):
            table = line
        elif line.startswith("-A") or (line.startswith(":") and line.split()[1] == "-"):
            kept.add(f"{table} {line}")
        elif line.startswith(":") and line.split()[1] != "ACCEPT":
            kept.add(f"{table} {line.split()[0]} policy {line.split()[1]}")
    return kept


def host() -> dict[str, object]:
    links = {line.split(": ")[1].split("@")[0] for line in run("ip", "-o", "link").splitlines()}
    return {
        "iptables": rules("iptables"),
        "ip6tables": rules("ip6tables"),
        "sysctl": {k: run("sysctl", "-n", k).strip() for k in SYSCTLS},
        "links": links,
        "cgroups": top_cgroups(),
    }


def top_cgroups() -> set[str]:
    """The cgroups just under each hierarchy's root (v2: one root; v1: one a controller)."""
    root = Path("/sys/fs/cgroup")
    roots = [root] if (root / "cgroup.procs").exists() else [
        r for r in root.iterdir() if (r / "cgroup.procs").exists()
    ]  # fmt: skip
    return {str(c) for r in roots for c in r.iterdir() if (c / "cgroup.procs").exists()}
