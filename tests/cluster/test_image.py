"""The project image, built here (e2e/cluster/images.sh), run as its users will run it.

The coordinator runs in a container as the image's non-root user with a read-only root
filesystem and its data on a mounted directory, as the chart runs it; real kafka-python
members on the host form a group through the published port; the container is killed
(SIGKILL) and started again, and every committed offset and the group come back.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgroups import admin
from tests.integration.harness import Member, wait_converged, wait_until

UID = 65532
NAME = "kgroups-test-coordinator"


def docker(host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "DOCKER_HOST": host},
    )  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed:\n{done.stderr}")
    return done


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def coordinator_container(
    docker_host: str, kgroups_image: str, tmp_path: Path
) -> Iterator[tuple[int, str]]:
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, UID, UID)
    port = free_port()
    docker(docker_host, "rm", "-f", NAME, check=False)
    docker(
        docker_host, "run", "-d", "--name", NAME, "--read-only", "--user", f"{UID}:{UID}",
        "-v", f"{data}:/data", "-p", f"127.0.0.1:{port}:9092", kgroups_image,
        "coordinator", "--listen", "0.0.0.0:9092", "--data-dir", "/data",
        "--advertise", f"127.0.0.1:{port}", "--initial-rebalance-delay-ms", "300",
        "--min-session-timeout-ms", "1000",
    )  # fmt: skip
    try:
        yield port, docker_host
    finally:
        logs = docker(docker_host, "logs", NAME, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])
        docker(docker_host, "rm", "-f", NAME, check=False)


async def topics(port: int) -> dict[str, int]:
    async with admin.Admin("127.0.0.1", port) as client:
        return await client.topics()


async def committed(port: int, group: str) -> dict[tuple[str, int], int]:
    async with admin.Admin("127.0.0.1", port) as client:
        return await client.committed_offsets(group)


def reachable(port: int) -> bool:
    try:
        asyncio.run(topics(port))
    except Exception:  # noqa: BLE001 - not up yet, whatever the reason
        return False
    return True


def test_the_image_runs_non_root_read_only_and_keeps_offsets_across_a_kill(
    coordinator_container: tuple[int, str], kgroups_image: str, members: list[Member]
) -> None:
    port, host = coordinator_container
    user = docker(host, "image", "inspect", "-f", "{{.Config.User}}", kgroups_image).stdout
    assert user.strip() == f"{UID}:{UID}"
    wait_until(lambda: reachable(port), 60, "the coordinator in its container to answer")
    asyncio.run(admin.create_topic("127.0.0.1", port, "orders", 6))
    partitions = {("orders", p) for p in range(6)}
    bootstrap = f"127.0.0.1:{port}"
    for name in ("a", "b"):
        members.append(Member("kafka-python", bootstrap, "g", ["orders"], client_id=name,
                              session_timeout_ms=6000))  # fmt: skip
    generation = wait_converged(members, partitions, 60)
    for m in members:
        seen = len(m.events)
        m.send("commit 42")
        m.wait_event("committed", after=seen)
    # Nothing but /data is writable: the root filesystem refuses a write.
    refused = docker(host, "exec", NAME, "touch", "/kgroups-was-here", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr

    docker(host, "kill", NAME)  # SIGKILL: no chance to flush anything
    docker(host, "start", NAME)
    wait_until(lambda: reachable(port), 60, "the coordinator to come back")
    assert asyncio.run(committed(port, "g")) == dict.fromkeys(partitions, 42)
    assert asyncio.run(topics(port)) == {"orders": 6}
    # The members reconnect and the group settles again, every partition owned once.
    again = wait_converged(members, partitions, 60)
    assert again >= generation
