"""The runtime leaves the host as it found it (issue 13: "restoring whatever the runtime,
kubelet and kube-proxy changed on the host").

dockerd adds iptables chains and rules, a bridge and turns on IP forwarding; a container
run adds a veth and NAT rules. `runtime.sh down` must take all of it back: the rules, the
sysctls it records, and every link that did not exist before.
"""

from __future__ import annotations

import os
import subprocess

from tests.cluster.conftest import RUNTIME

SYSCTLS = ("net.ipv4.ip_forward", "kernel.panic", "vm.overcommit_memory")


def run(*cmd: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True, env=env)
    return done.stdout


def rules(tool: str) -> set[str]:
    """Every rule and user chain (an empty table of ACCEPT built-in chains is no rule)."""
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
    }


def test_down_restores_rules_sysctls_and_links_after_a_container_ran(kgroups_image: str) -> None:
    run("bash", str(RUNTIME), "down")
    before = host()
    try:
        socket = run("bash", str(RUNTIME), "up").strip().splitlines()[-1]
        env = {**os.environ, "DOCKER_HOST": f"unix://{socket}"}
        # A container with a published port: a veth on the bridge and NAT rules.
        run("docker", "run", "--rm", "-p", "127.0.0.1::9", "kgroups/debian:bookworm", "true",
            env=env)  # fmt: skip
        during = host()
        assert during["iptables"] != before["iptables"], "dockerd should have added rules"
        assert "docker0" in during["links"]  # type: ignore[operator]
        run("bash", str(RUNTIME), "down")
        assert host() == before
    finally:
        run("bash", str(RUNTIME), "up")  # the rest of the session expects it running


def test_a_privileged_container_runs_even_where_root_lacks_a_capability(
    docker_host: str, kgroups_image: str
) -> None:
    """Every kind node is a --privileged container. Where root's bounding set lacks
    CAP_SYS_RESOURCE (these machines), runc cannot grant it and fails unless runtime.sh's
    wrapper takes it out of the spec; the container must get every other capability."""
    env = {**os.environ, "DOCKER_HOST": docker_host}
    out = run("docker", "run", "--rm", "--privileged", "kgroups/debian:bookworm",
              "grep", "CapEff", "/proc/self/status", env=env)  # fmt: skip
    effective = int(out.split()[1], 16)
    with open("/proc/self/status") as status:
        bounding = next(int(line.split()[1], 16) for line in status if line.startswith("CapBnd"))
    # Docker 20.10 grants the capabilities it knows: up to CAP_AUDIT_READ (37).
    known = (1 << 38) - 1
    assert effective == bounding & known, f"{effective:x} != {bounding & known:x}"
