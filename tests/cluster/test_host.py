"""The runtime leaves the host as it found it (issue 13: "restoring whatever the runtime,
kubelet and kube-proxy changed on the host").

dockerd adds iptables chains and rules, a bridge and turns on IP forwarding; a container
run adds a veth and NAT rules. `runtime.sh down` must take all of it back: the rules, the
sysctls it records, and every link that did not exist before.
"""

from __future__ import annotations

import os

from tests.cluster.conftest import RUNTIME
from tests.cluster.hoststate import host, run


def test_down_restores_rules_sysctls_and_links_after_a_container_ran(
    kgroups_image: str, host_before: dict[str, object]
) -> None:
    run("bash", str(RUNTIME), "down")
    before = host()
    assert before == host_before
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
