"""A stand-in for kgroups' /metrics: every metric of the vocabulary, with moving values.

Tests of the dashboards, the alerting rules' wiring and the dashboard renderer need a
Prometheus that has every series those queries read, shaped as the vocabulary says (labels,
histogram buckets), without running a coordinator, members and Spark. `FakeExporter` serves
its own prometheus_client registry on a loopback port; a named background thread `tick()`s
it (counters grow, histograms get observations) until `close()`.

Two groups: "billing" is Stable with all partitions held; "orders" is stuck in
PreparingRebalance with unassigned partitions and refused commits.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tests.observability.prom import Prometheus
from tests.observability.vocabulary import (
    CALLBACKS,
    GROUP_STATES,
    METRICS,
    REBALANCE_BUCKETS,
    REBALANCE_REASONS,
    REQUEST_BUCKETS,
    STORE_WRITE_RECORDS_BUCKETS,
)

GROUPS = {"billing": "Stable", "orders": "PreparingRebalance"}
APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch")
KINDS = ("ConsumerGroup", "Topic")
VALUES: dict[str, tuple[str, ...]] = {
    "group": tuple(GROUPS),
    "state": GROUP_STATES,
    "reason": REBALANCE_REASONS[:3],
    "callback": CALLBACKS,
    "api": APIS,
    "error": ("NONE", "REBALANCE_IN_PROGRESS"),
    "kind": KINDS,
    "topic": ("orders",),
    "version": ("0.1.0",),
    "result": ("success", "failure"),
    "resource_type": ("GROUP", "TOPIC", "CLUSTER"),
}


def _buckets(name: str) -> tuple[float, ...]:
    if name == "kgroups_store_write_records":
        return STORE_WRITE_RECORDS_BUCKETS
    if any(w in name for w in ("rebalance", "join", "sync", "batch", "callback")):
        return REBALANCE_BUCKETS
    return REQUEST_BUCKETS


class FakeExporter:
    def __init__(self, seed: int = 0) -> None:
        self.registry = CollectorRegistry()
        self.rng = random.Random(seed)
        self.metrics: dict[str, Any] = {}
        for m in METRICS:
            kw: dict[str, Any] = {"labelnames": m.labels, "registry": self.registry}
            if m.kind == "counter":
                self.metrics[m.name] = Counter(m.name, m.help, **kw)
            elif m.kind == "gauge":
                self.metrics[m.name] = Gauge(m.name, m.help, **kw)
            else:
                self.metrics[m.name] = Histogram(m.name, m.help, buckets=_buckets(m.name), **kw)
        self.server: WSGIServer | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._lock = threading.Lock()
        self.tick()

    def children(self, name: str) -> Iterator[tuple[dict[str, str], Any]]:
        """Every label combination of a metric (groups and their own state, see GROUPS)."""
        metric = self.metrics[name]
        labels = next(m.labels for m in METRICS if m.name == name)
        if not labels:
            yield {}, metric
            return
        combos: list[dict[str, str]] = [{}]
        for label in labels:
            combos = [c | {label: v} for c in combos for v in VALUES[label]]
        for combo in combos:
            yield combo, metric.labels(**combo)

    def tick(self) -> None:
        """Advances every metric a little, as a busy coordinator and its members would."""
        with self._lock:
            for m in METRICS:
                for labels, child in self.children(m.name):
                    self._advance(m.name, m.kind, labels, child)

    def _advance(self, name: str, kind: str, labels: dict[str, str], child: Any) -> None:
        group = labels.get("group", "")
        if name == "kgroups_group_state":
            child.set(1 if GROUPS[group] == labels["state"] else 0)
        elif name == "kgroups_groups":
            child.set(sum(1 for s in GROUPS.values() if s == labels["state"]))
        elif name == "kgroups_group_unassigned_partitions":
            child.set(3 if GROUPS[group] != "Stable" else 0)
        elif name == "kgroups_build_info":
            child.set(1)
        elif name.endswith("_timestamp_seconds"):
            child.set_to_current_time()
        elif name in ("kgroups_member_generation", "kgroups_group_generation"):
            child.set(7 if group == "billing" else 12)
        elif kind == "gauge":
            child.set(self.rng.randint(1, 20))
        elif kind == "counter":
            if labels.get("error", "NONE") == "NONE" or group != "billing":
                child.inc(self.rng.randint(1, 5))
        else:
            for _ in range(3):
                child.observe(self.rng.uniform(0.001, 2.0))

    # -- serving ---------------------------------------------------------------------------

    def start(self, tick_every: float = 0.25) -> str:
        """Serves /metrics on a free loopback port; returns "127.0.0.1:PORT"."""
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self._ticker = threading.Thread(target=self._run, args=(tick_every,),
                                        name="fake-exporter-ticker", daemon=True)  # fmt: skip
        self._ticker.start()
        return f"127.0.0.1:{self.server.server_port}"

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            self.tick()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(5)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@contextmanager
def fake_exporter(seed: int = 0) -> Iterator[tuple[FakeExporter, str]]:
    exporter = FakeExporter(seed)
    address = exporter.start()
    try:
        yield exporter, address
    finally:
        exporter.close()


@contextmanager
def scraped_vocabulary(workdir: Path, samples: int = 3) -> Iterator[Prometheus]:
    """A Prometheus scraping a FakeExporter every second (no namespace label, as outside
    Kubernetes), once it holds `samples` scrapes: enough for rate() over 4s."""
    with fake_exporter() as (_, address), Prometheus(workdir, {"kgroups": [address]}) as prom:
        # A scrape answers within Prometheus' 1-s timeout alone in 50 ms; beside make
        # test's other workers every scrape of one 30-s stretch ran out.
        prom.targets(timeout=90)
        prom.wait_for(f"count_over_time(kgroups_connections[1m]) >= {samples}", timeout=30)
        yield prom
