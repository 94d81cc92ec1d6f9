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
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.hoststate import host
from tests.cluster.kind import IMAGES, KindCluster, script
from tests.integration.conftest import members
from tests.integration.harness import ROOT

__all__ = ["members"]

RUNTIME = ROOT / "e2e" / "cluster" / "runtime.sh"
CLUSTER_NAME = "kgroups-e2e"
LOGS = ROOT / ".kgroups" / "cluster-logs"
KEEP = bool(os.environ.get("KGROUPS_KEEP_CLUSTER"))
"""For whoever works on these tests: keep the runtime and the cluster after the run to look
at (`kind.sh down kgroups-e2e` before the next run)."""


@pytest.fixture(scope="package")
def host_before() -> dict[str, object]:
    """The host before this package's runtime touched it (a runtime left running by
    someone is stopped first, which also restores what it changed)."""
    subprocess.run(["bash", str(RUNTIME), "down"], capture_output=True, timeout=300, check=False)
    return host()


@pytest.fixture(scope="package")
def docker_host(host_before: dict[str, object]) -> Iterator[str]:
    started = subprocess.run(
        ["bash", str(RUNTIME), "up"], capture_output=True, text=True, timeout=900, check=False
    )
    if started.returncode != 0:
        pytest.fail(f"the container runtime did not start:\n{started.stderr[-3000:]}")
    host = f"unix://{started.stdout.strip().splitlines()[-1]}"
    try:
        yield host
    finally:
        if not KEEP:
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


@pytest.fixture(scope="package")
def cluster(docker_host: str) -> Iterator[KindCluster]:
    """A fresh kind cluster with every image the chart and the examples name loaded: the
    images are built while the cluster starts; the chart's is loaded first, the others
    while the first tests run (`KindCluster.load_meanwhile`)."""
    kind = KindCluster(CLUSTER_NAME, docker_host)
    if not KEEP:
        kind.down()  # a cluster left by an interrupted run
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="images") as pool:
            built = pool.submit(script, docker_host, str(IMAGES), "all", timeout=3600)
            try:
                kind.up()
            finally:
                built.result()  # its failure, if any, is the one to report
        chart, *others = script(docker_host, str(IMAGES), "names", timeout=60).split()
        kind.load([chart])
        kind.load_meanwhile(others)
        yield kind
    finally:
        kind.loaded()  # nothing still loading into a node about to go
        if not KEEP:
            kind.down()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """On a failure with a cluster, its events, pod logs and node journals, kept on disk
    and the events in the report."""
    report = yield
    kind = getattr(item, "funcargs", {}).get("cluster")
    if isinstance(kind, KindCluster) and report.failed and call.when != "teardown":
        where = kind.logs(LOGS / item.name)
        events = (where / "events.txt").read_text(errors="replace")[-6000:]
        report.sections.append(("cluster", f"logs in {where}\n{events}"))
    return report


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "after_every_cluster_test: runs after every other test of tests/cluster"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)
            # The first test's setup builds every image and a kind cluster.
            item.add_marker(pytest.mark.timeout(3600))
    # The test that deletes the cluster and checks the host runs after every other
    # cluster test, whichever module they are in.
    last = [i for i in items if i.get_closest_marker("after_every_cluster_test")]
    items[:] = [i for i in items if i not in last] + last
