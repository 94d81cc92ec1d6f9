"""What `make test` runs in parallel is placed by tests/conftest.py: a module whose
fixtures outlive a test runs on one worker (its fixture set up once), the kind cluster's
tests share one worker. Checked through pytest-xdist itself, since its grouping depends on
pytest internals (pytest 9.2 broke it silently: every group was spread over every worker).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_module_scoped_fixture_keeps_its_tests_on_one_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(
        "from tests.conftest import pytest_collection_modifyitems, pytest_configure\n"
        "from tests.conftest import pytest_addoption\n"
    )
    pytester.makepyfile(
        test_grouped="""
        import os
        import pytest

        @pytest.fixture(scope="module")
        def once():
            return os.environ["PYTEST_XDIST_WORKER"]

        @pytest.mark.parametrize("i", range(16))
        def test_grouped(once, i):
            with open(f"grouped-{i}", "w") as out:
                out.write(os.environ["PYTEST_XDIST_WORKER"])
        """,
        test_free="""
        import os
        import pytest

        @pytest.mark.parametrize("i", range(16))
        def test_free(i):
            with open(f"free-{i}", "w") as out:
                out.write(os.environ["PYTEST_XDIST_WORKER"])
        """,
    )
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:randomly")
    result.assert_outcomes(passed=32)

    def workers(kind: str) -> set[str]:
        return {(pytester.path / f"{kind}-{i}").read_text() for i in range(16)}

    # Both workers ran tests (however the load fell), and the grouped ones on one only
    # (each worker would have set up its own `once` had they been spread).
    assert workers("grouped") | workers("free") == {"gw0", "gw1"}
    assert len(workers("grouped")) == 1
