"""Fixtures for the e2e tier: one real control plane per session, CRDs applied."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.kube import ControlPlane
from tests.integration.harness import ROOT, Member


@pytest.fixture(scope="session")
def controlplane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    cp.up()
    try:
        cp.kubectl("apply", "-f", str(ROOT / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        yield cp
    finally:
        cp.down()


@pytest.fixture
def namespace(controlplane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (deleted afterwards; the controller manager empties it)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:30].strip("-")
    name = f"t-{slug}-{hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]}"
    controlplane.kubectl("create", "namespace", name)
    yield name
    controlplane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "e2e" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        m.kill()
