"""Not collected with the others (its name does not start with test_):
`test_interrupted_run.py` runs it through `tools/run-tests.sh` and interrupts the run
while it holds a coordinator and a PostgreSQL server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.integration.harness import Coordinator
from tests.postgres import PostgresServer

MARK = os.environ.get("KGROUPS_INTERRUPT_MARK")


@pytest.mark.skipif(MARK is None, reason="run by test_interrupted_run.py only")
def test_holds_a_coordinator_and_postgresql_until_interrupted(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    coordinator = Coordinator(tmp_path / "data")
    coordinator.start()
    assert coordinator.proc is not None and MARK is not None
    Path(MARK).write_text(f"{coordinator.proc.pid} {postgres.pid()}\n")
    time.sleep(600)  # interrupted long before
