"""The coordinator's Prometheus endpoint, scraped while real consumers rebalance."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, Member, create_topic, wait_converged


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_follow_the_group_through_a_rebalance(
    tmp_path: Path, members: list[Member]
) -> None:
    port = _free_port()
    coord = Coordinator(tmp_path / "data", *FAST, "--metrics", f"127.0.0.1:{port}")
    coord.start()
    try:
        partitions = create_topic(coord, "t", 4)
        for i in range(2):
            members.append(Member("kafka-python", coord.bootstrap, "g", ["t"], client_id=f"c{i}"))
        generation = wait_converged(members, partitions, timeout=30)
        seen = _scrape(port)
        assert seen[("kgroups_groups", (("state", "Stable"),))] == 1
        assert seen[("kgroups_group_members", (("group", "g"),))] == 2
        assert seen[("kgroups_group_generation", (("group", "g"),))] == generation
        assert seen[("kgroups_partitions", ())] == 4
        assert seen[("kgroups_connections", ())] >= 2
        before = seen[("kgroups_rebalances_total", (("group", "g"),))]
        assert before >= 1
        assert seen[("kgroups_rebalance_duration_seconds_count", ())] >= before

        members[0].kill()
        wait_converged(members[1:], partitions, timeout=30)
        after = _scrape(port)
        assert after[("kgroups_rebalances_total", (("group", "g"),))] == before + 1
        assert after[("kgroups_group_members", (("group", "g"),))] == 1

        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
        assert err.value.code == 404
    finally:
        coord.kill()
