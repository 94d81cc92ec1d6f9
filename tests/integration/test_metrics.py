"""The coordinator's Prometheus endpoint, scraped while real consumers rebalance."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, Member, create_topic, free_port, wait_converged
from tests.waits import within


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _rebalances(seen: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in seen.items()
        if name == "kgroups_group_rebalances_total" and dict(labels)["group"] == "g"
    }


def test_metrics_follow_the_group_through_a_rebalance(
    tmp_path: Path, members: list[Member]
) -> None:
    port = free_port()
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
        assert seen[("kgroups_group_assigned_partitions", (("group", "g"),))] == 4
        assert seen[("kgroups_group_unassigned_partitions", (("group", "g"),))] == 0
        before = _rebalances(seen)
        assert before.get("member_joined", 0) >= 1
        completed = seen[("kgroups_group_rebalance_duration_seconds_count", (("group", "g"),))]
        assert 1 <= completed <= sum(before.values())
        heartbeat = ("kgroups_requests_total", (("api", "Heartbeat"), ("error", "NONE")))
        deadline = time.monotonic() + within(20)
        while _scrape(port).get(heartbeat, 0) < 2:  # members heartbeat every second
            assert time.monotonic() < deadline, "no successful heartbeat counted"
            time.sleep(0.2)

        members[0].kill()  # SIGKILL: no LeaveGroup, the session has to expire
        wait_converged(members[1:], partitions, timeout=30)
        after = _scrape(port)
        # a loaded machine can expire a live member's session too: the counter must
        # match the coordinator's own account of its rebalances, and include the kill's
        expirations = re.findall(
            r"preparing to rebalance group g in state \w+ with old generation \d+ "
            r"\(reason: removing member (\S+) on heartbeat expiration",
            coord.log(),
        )
        assert any(m.startswith("c0-") for m in expirations)
        assert _rebalances(after).get("session_expired", 0) == len(expirations)
        assert after[("kgroups_session_expirations_total", (("group", "g"),))] >= 1
        assert after[("kgroups_group_members", (("group", "g"),))] == 1
        finished = after[("kgroups_group_rebalance_duration_seconds_count", (("group", "g"),))]
        assert completed + 1 <= finished <= sum(_rebalances(after).values())

        for path, body in (("/healthz", b"ok\n"), ("/readyz", b"ok\n")):
            answer = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
            assert (answer.status, answer.read()) == (200, body)

        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
        assert err.value.code == 404
    finally:
        coord.kill()
