"""Members' Kafka consumer-coordinator metrics against the real coordinator.

Sidecars are real `kgroups sidecar` processes; their GET /metrics is scraped with urllib
and read with prometheus_client's own parser, as Prometheus would. In-process
`GroupMember`s report to registries the test passes. Two members join, one leaves; what
the metrics say is checked against what the members say (their generation and
assignment) and against the wall time the test itself measured around each rebalance.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from kgroups.client import GroupMember
from tests.integration.harness import (
    Coordinator,
    SidecarProcess,
    create_topic,
    free_port,
    wait_until,
)

GROUP, TOPIC, PARTITIONS = "apps", "jobs", 6


class Sidecar(SidecarProcess):
    """`kgroups sidecar` with HTTP; revocations are released after 100 ms (no app)."""

    def __init__(self, coordinator: Coordinator, name: str, tmp: Path) -> None:
        super().__init__(coordinator, name, "range", tmp, group=GROUP, topics=TOPIC,
                         extra=("--revoke-timeout-ms", "100"))  # fmt: skip

    def get(self, path: str) -> tuple[str, bytes]:
        with urllib.request.urlopen(f"http://{self.address}{path}", timeout=10) as response:
            return response.headers["Content-Type"], response.read()

    def assignment(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.get("/assignment")[1])
        return doc

    def metrics(self) -> dict[str, float]:
        """name{labels} -> value; every series must carry group=GROUP and no member id."""
        kind, body = self.get("/metrics")
        assert kind == CONTENT_TYPE_LATEST
        found = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                assert s.labels.get("group") == GROUP, s
                extra = {k: v for k, v in s.labels.items() if k not in ("group", "le")}
                key = s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(extra.items()))
                if "le" in s.labels:
                    key += f"{{le={s.labels['le']}}}"
                found[key] = s.value
        assert not [k for k in found if k.endswith("_created")], found
        return found

    def stable_in(self, generation: int) -> bool:
        doc = self.assignment()
        return bool(doc["state"] == "stable" and doc["generation"] >= generation)


def test_sidecars_serve_their_members_metrics(coordinator: Coordinator, tmp_path: Path) -> None:
    create_topic(coordinator, TOPIC, PARTITIONS)
    started_wall = time.time()
    cars: list[Sidecar] = []
    try:
        a = Sidecar(coordinator, "a", tmp_path)
        cars.append(a)
        wait_until(lambda: a.stable_in(1), 30, "a alone in generation 1")
        first = a.metrics()
        assert first["kgroups_member_rebalances_total"] == 1
        assert first["kgroups_member_generation"] == a.assignment()["generation"] == 1
        assert first["kgroups_member_assigned_partitions"] == PARTITIONS

        # b joins: one more rebalance for a, b's first.
        joined_at = time.monotonic()
        b = Sidecar(coordinator, "b", tmp_path)
        cars.append(b)
        wait_until(lambda: a.stable_in(2) and b.stable_in(2), 30, "a and b in generation 2")
        join_wall = time.monotonic() - joined_at
        for car, rebalances in ((a, 2), (b, 1)):
            doc, seen = car.assignment(), car.metrics()
            assert seen["kgroups_member_rebalances_total"] == rebalances
            assert seen["kgroups_member_generation"] == doc["generation"] == 2
            assert seen["kgroups_member_assigned_partitions"] == len(doc["assignment"][TOPIC])
            assert seen["kgroups_member_assigned_partitions"] == PARTITIONS // 2
        b_rebalance = b.metrics()["kgroups_member_rebalance_duration_seconds_sum"]
        assert 0 < b_rebalance < join_wall

        # b leaves: a rebalances once more, alone, and measures it.
        before = a.metrics()
        left_at = time.monotonic()
        assert b.stop() == 0
        wait_until(lambda: a.stable_in(3), 30, "a alone in generation 3")
        leave_wall = time.monotonic() - left_at
        after, doc = a.metrics(), a.assignment()
        assert after["kgroups_member_rebalances_total"] == 3
        assert after["kgroups_member_generation"] == doc["generation"] == 3
        assert after["kgroups_member_assigned_partitions"] == len(doc["assignment"][TOPIC])
        assert after["kgroups_member_assigned_partitions"] == PARTITIONS
        took = (
            after["kgroups_member_rebalance_duration_seconds_sum"]
            - before["kgroups_member_rebalance_duration_seconds_sum"]
        )
        assert after["kgroups_member_rebalance_duration_seconds_count"] == 3
        assert 0 < took < leave_wall
        assert after["kgroups_member_failed_rebalances_total"] == 0
        # Eager: a revoked everything before rejoining, twice (b's join, b's leave).
        assert (
            after["kgroups_member_partitions_callback_duration_seconds_count{callback=revoked}"]
            == 2
        )
        assert (
            after["kgroups_member_partitions_callback_duration_seconds_count{callback=assigned}"]
            == 3
        )
        # Heartbeats every 300 ms, the last one just now.
        assert after["kgroups_member_heartbeat_response_duration_seconds_count"] > 3
        last = after["kgroups_member_last_heartbeat_timestamp_seconds"]
        assert started_wall < last <= time.time()
        assert (
            started_wall < after["kgroups_member_last_rebalance_timestamp_seconds"] <= time.time()
        )
        # Join and sync round trips: each under the rebalance that contained it.
        assert after["kgroups_member_join_duration_seconds_count"] == 3
        assert after["kgroups_member_sync_duration_seconds_count"] == 3
        assert (
            after["kgroups_member_join_duration_seconds_sum"]
            + after["kgroups_member_sync_duration_seconds_sum"]
            <= after["kgroups_member_rebalance_duration_seconds_sum"]
        )
    finally:
        for car in cars:
            car.stop()


def test_group_members_in_process_report_to_the_registry_they_were_given(
    coordinator: Coordinator,
) -> None:
    create_topic(coordinator, TOPIC, PARTITIONS)
    reg_a, reg_b = CollectorRegistry(), CollectorRegistry()

    def sample(registry: CollectorRegistry, name: str) -> float:
        found = registry.get_sample_value(name, {"group": GROUP})
        assert found is not None, name
        return found

    async def scenario() -> None:
        options: dict[str, Any] = {
            "session_timeout_ms": 4000, "heartbeat_interval_ms": 300, "assignors": ["range"],
        }  # fmt: skip
        a = GroupMember(coordinator.bootstrap, GROUP, [TOPIC], registry=reg_a, **options)
        b = GroupMember(coordinator.bootstrap, GROUP, [TOPIC], registry=reg_b, **options)
        try:
            await a.start(timeout=30)
            joined_at = time.monotonic()
            await b.start(timeout=30)
            await a.wait_stable(after_generation=1, timeout=30)
            wall = time.monotonic() - joined_at
            assert a.generation == b.generation == 2
            for member, registry in ((a, reg_a), (b, reg_b)):
                assert sample(registry, "kgroups_member_generation") == member.generation
                assert sample(registry, "kgroups_member_assigned_partitions") == len(
                    member.assignment
                )
            assert sample(reg_a, "kgroups_member_rebalances_total") == 2
            assert sample(reg_b, "kgroups_member_rebalances_total") == 1
            assert 0 < sample(reg_b, "kgroups_member_rebalance_duration_seconds_sum") < wall

            before = sample(reg_a, "kgroups_member_rebalance_duration_seconds_sum")
            left_at = time.monotonic()
            await b.close()
            await a.wait_stable(after_generation=2, timeout=30)
            wall = time.monotonic() - left_at
            assert sample(reg_a, "kgroups_member_generation") == a.generation == 3
            assert sample(reg_a, "kgroups_member_assigned_partitions") == PARTITIONS
            assert sample(reg_b, "kgroups_member_generation") == -1
            assert sample(reg_b, "kgroups_member_assigned_partitions") == 0
            assert sample(reg_a, "kgroups_member_rebalances_total") == 3
            took = sample(reg_a, "kgroups_member_rebalance_duration_seconds_sum") - before
            assert 0 < took < wall
            assert sample(reg_b, "kgroups_member_rebalances_total") == 1  # b's, not a's
        finally:
            await b.close()
            await a.close()

    asyncio.run(scenario())


def test_a_sidecars_metrics_port_serves_only_metrics_and_health(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """`--metrics HOST:PORT`: what Prometheus scrapes there is the member's, and the
    application's API (assignment, commits) is not reachable through it."""
    create_topic(coordinator, TOPIC, PARTITIONS)
    port = free_port()
    car = SidecarProcess(coordinator, "m", "range", tmp_path, group=GROUP, topics=TOPIC,
                         extra=("--metrics", f"127.0.0.1:{port}"))  # fmt: skip
    try:
        wait_until(lambda: json.loads(http_get(car.address, "/assignment"))["state"] == "stable",
                   30, "the sidecar stable")  # fmt: skip
        seen = {
            s.name: s.value
            for f in text_string_to_metric_families(http_get(f"127.0.0.1:{port}", "/metrics"))
            for s in f.samples
            if s.labels.get("group") == GROUP
        }
        assert seen["kgroups_member_generation"] == 1
        assert seen["kgroups_member_assigned_partitions"] == PARTITIONS
        assert http_get(f"127.0.0.1:{port}", "/healthz") == "ok\n"
        with pytest.raises(urllib.error.HTTPError) as refused:
            http_get(f"127.0.0.1:{port}", "/assignment")
        assert refused.value.code == 404
    finally:
        car.stop()


def http_get(address: str, path: str) -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
        return str(response.read().decode())
