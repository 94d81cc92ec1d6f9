"""Prometheus metrics for the coordinator, served on their own HTTP port.

Two kinds, in Kafka's vocabulary and Prometheus' shapes (no member ids as labels):

* what the core reports as it happens: each completed rebalance (`RebalanceCompleted`
  in the effects) feeds a duration histogram and a counter per group;
* what the state is when Prometheus asks: groups per state, members and generation per
  group, topics and partitions, open connections. These are read from the live core at
  scrape time, on the event loop (the HTTP server runs there), so a scrape never sees a
  half-applied request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from kgroups.coordinator.core import GroupCoordinator
from kgroups.coordinator.core.effects import RebalanceCompleted
from kgroups.coordinator.core.states import GroupState

log = logging.getLogger(__name__)

REBALANCE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _StateCollector(Collector):
    def __init__(
        self, coordinator: Callable[[], GroupCoordinator | None], connections: Callable[[], int]
    ) -> None:
        self._coordinator = coordinator
        self._connections = connections

    def collect(self) -> Iterator[Metric]:
        coordinator = self._coordinator()
        if coordinator is None:
            return
        groups = coordinator.groups
        by_state = GaugeMetricFamily(
            "kgroups_groups", "Consumer groups on the coordinator, by state.", labels=["state"]
        )
        tally = Tally(g.state.value for g in groups.values())
        for state in GroupState:
            by_state.add_metric([state.value], tally.get(state.value, 0))
        yield by_state
        members = GaugeMetricFamily(
            "kgroups_group_members", "Members of each group.", labels=["group"]
        )
        generation = GaugeMetricFamily(
            "kgroups_group_generation", "Each group's generation id.", labels=["group"]
        )
        for group_id, group in groups.items():
            members.add_metric([group_id], len(group.members))
            generation.add_metric([group_id], group.generation_id)
        yield members
        yield generation
        topics = coordinator.core.topics
        yield GaugeMetricFamily("kgroups_topics", "Topics on the coordinator.", value=len(topics))
        yield GaugeMetricFamily(
            "kgroups_partitions",
            "Partitions of all topics on the coordinator.",
            value=sum(t.partitions for t in topics.values()),
        )
        yield GaugeMetricFamily(
            "kgroups_connections", "Open client connections.", value=self._connections()
        )


class CoordinatorMetrics:
    """The coordinator's registry; `observe` takes the core's facts as they are emitted."""

    def __init__(
        self,
        coordinator: Callable[[], GroupCoordinator | None],
        connections: Callable[[], int],
    ) -> None:
        self.registry = CollectorRegistry()
        self.rebalance_seconds = Histogram(
            "kgroups_rebalance_duration_seconds",
            "From a group's PreparingRebalance to its leader's assignment (Stable).",
            buckets=REBALANCE_BUCKETS,
            registry=self.registry,
        )
        self.rebalances = Counter(
            "kgroups_rebalances",
            "Completed rebalances per group.",
            ["group"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(coordinator, connections))
        self._server: asyncio.Server | None = None
        self.port = 0

    def observe(self, observations: Iterable[RebalanceCompleted]) -> None:
        for o in observations:
            self.rebalance_seconds.observe(o.duration_ms / 1000)
            self.rebalances.labels(o.group_id).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Just enough HTTP/1.0 for Prometheus: GET /metrics, one request per connection."""
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=10)
            while (line := await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b""):
                if len(line) > 8192:
                    break
            parts = request.decode("latin-1").split()
            status, body, kind = self._answer(parts)
            head = (
                f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, parts: list[str]) -> tuple[str, bytes, Any]:
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET /metrics\n", "text/plain"
        if parts[1].split("?")[0] != "/metrics":
            return "404 Not Found", b"GET /metrics\n", "text/plain"
        return "200 OK", self.render(), CONTENT_TYPE_LATEST
