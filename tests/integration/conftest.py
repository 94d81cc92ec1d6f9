"""Fixtures for integration tests: a real coordinator process and its members."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import Coordinator, Member
from tests.postgres import PostgresServer

FAST = (
    "--initial-rebalance-delay-ms", "300",
    "--min-session-timeout-ms", "1000",
    "--consumer-session-timeout-ms", "6000",
    "--consumer-heartbeat-interval-ms", "500",
    "--log-level", "INFO",
)  # fmt: skip


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    coord = Coordinator(tmp_path / "data", *FAST)
    coord.start()
    yield coord
    coord.kill()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    """Register members here; all are killed at teardown whatever the test did."""
    started: list[Member] = []
    yield started
    for m in started:
        m.kill()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server per worker (tests/postgres.py); a test takes its own
    database from it (`postgres.create_database()`)."""
    server = PostgresServer().start()
    yield server
    server.close()
