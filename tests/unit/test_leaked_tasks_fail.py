"""The fixture in tests/conftest.py fails a coroutine test that leaves a task running
(and passes one that cleans up after itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = "from tests.conftest import _no_leaked_tasks, _tasks_checked_in_coroutine_tests\n"


def test_a_coroutine_test_that_leaves_a_task_running_fails_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        """
        import asyncio

        async def test_leaks():
            asyncio.get_running_loop().create_task(asyncio.sleep(100), name="forgotten")

        async def test_cleans_up():
            task = asyncio.get_running_loop().create_task(asyncio.sleep(100), name="kept")
            task.cancel()
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "asyncio", "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"
    )  # fmt: skip
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.re_match_lines([r".*tasks left running: \['forgotten'\]"])
