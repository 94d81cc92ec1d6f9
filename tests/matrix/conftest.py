"""The client matrix (issue 12): every Kafka client and tool, each its own process from its
own package, against a real coordinator. The fixtures are the integration tier's."""

from __future__ import annotations

import pytest

from tests.integration.conftest import coordinator, members

__all__ = ["coordinator", "members"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "matrix" in str(item.fspath):
            item.add_marker(pytest.mark.matrix)
