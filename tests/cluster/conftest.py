"""The container tier (issue 13): a real container runtime on this machine, started by
e2e/cluster/runtime.sh, and images built locally by e2e/cluster/images.sh.

The runtime is started once for this package of tests and stopped after its last one, which also puts the
host back as it was (iptables rules, sysctls, links). Where it cannot start, every test
here fails with the reason: there is no silent skip.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.integration.conftest import members
from tests.integration.harness import ROOT

__all__ = ["members"]

RUNTIME = ROOT / "e2e" / "cluster" / "runtime.sh"
IMAGES = ROOT / "e2e" / "cluster" / "images.sh"


@pytest.fixture(scope="package")
def docker_host() -> Iterator[str]:
    started = subprocess.run(
        ["bash", str(RUNTIME), "up"], capture_output=True, text=True, timeout=900, check=False
    )
    if started.returncode != 0:
        pytest.fail(f"the container runtime did not start:\n{started.stderr[-3000:]}")
    host = f"unix://{started.stdout.strip().splitlines()[-1]}"
    try:
        yield host
    finally:
        subprocess.run(["bash", str(RUNTIME), "down"], timeout=300, check=False)


@pytest.fixture(scope="package")
def kgroups_image(docker_host: str) -> str:
    built = subprocess.run(
        ["bash", str(IMAGES), "kgroups"],
        capture_output=True, text=True, timeout=1800, check=False,
        env={**os.environ, "DOCKER_HOST": docker_host},
    )  # fmt: skip
    if built.returncode != 0:
        pytest.fail(f"the kgroups image did not build:\n{built.stderr[-3000:]}")
    return "kgroups:dev"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)
