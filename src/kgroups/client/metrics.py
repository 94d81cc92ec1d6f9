"""Kafka's consumer-coordinator metrics for group members, in Prometheus' shapes.

A Java consumer reports how its group membership goes (`consumer-coordinator-metrics`:
rebalance-latency, rebalance-total, failed-rebalance-total, join-time, sync-time,
heartbeat-response-time, partition-*-latency, commit-latency, assigned-partitions...).
Our members report the same facts the Prometheus way: durations as `_seconds`
histograms (aggregatable across members, unlike Kafka's windowed avg/max), counts as
`_total` counters, "seconds ago" as `_timestamp_seconds`, and one label, `group`: member
ids change with every join and would make a new series each time.

The families live in a prometheus_client `CollectorRegistry`, the default `REGISTRY`
unless the application passes its own, so an application exposes them however it
exposes its other metrics. `MemberMetrics.of(registry)` gives every caller the same
families for the same registry: all the members of a process share them, one series per
group. Members of one group in one process add up (counts, durations, assigned
partitions); their generation is the newest of theirs.

What a member *is* (its generation, how many partitions it holds) is read when
Prometheus asks, from every live member, rather than copied on each of the many paths
that change it; what *happens* (a rebalance, a heartbeat) is recorded as it happens by
`MemberStats`, one per member, whose methods the member calls where Kafka's sensors
record. Durations come from the member, measured on its event loop's clock; timestamps
(unix seconds) are read here, from `wall_clock`, the only wall time a member reads.

No `_created` series. prometheus_client only turns them off process-wide
(`disable_created_metrics()`), which would change the application's own metrics too, so
our families are kept out of any registry and `Families` (the one collector registered)
yields their samples without `_created`.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Self, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from kgroups.exposition import REBALANCE_BUCKETS, REQUEST_BUCKETS
from kgroups.protocol.groups import NO_GENERATION

__all__ = [
    "CALLBACKS",
    "REBALANCE_BUCKETS",
    "REQUEST_BUCKETS",
    "Families",
    "MemberMetrics",
    "MemberStats",
]

CALLBACKS = ("assigned", "revoked", "lost")
"""The `callback` label: `on_partitions_<callback>` of the rebalance listener."""

F = TypeVar("F", Counter, Gauge, Histogram)

_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, dict[type[Families], Families]] = (
    weakref.WeakKeyDictionary()
)


class Families:
    """Metric families kept out of any registry, collected without `_created` series.

    Subclasses create their families with `self.add(...)` in `__init__`; `of(registry)`
    registers one instance per registry and gives it back to every later caller."""

    def __init__(self) -> None:
        self._families: list[Counter | Gauge | Histogram] = []

    @classmethod
    def of(cls, registry: CollectorRegistry | None = None) -> Self:
        """The instance registered in `registry` (default: prometheus_client.REGISTRY)."""
        target = REGISTRY if registry is None else registry
        with _lock:
            mine = _by_registry.setdefault(target, {})
            found = mine.get(cls)
            if found is None:
                found = cls()
                target.register(found)
                mine[cls] = found
        assert isinstance(found, cls)
        return found

    def add(self, family: F) -> F:
        self._families.append(family)
        return family

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            for metric in family.collect():
                created = metric.name + "_created"
                metric.samples = [s for s in metric.samples if s.name != created]
                yield metric

    def describe(self) -> Iterator[Metric]:
        """The names, so that a registry refuses a second collector that clashes."""
        for family in self._families:
            yield from family.describe()


def _counter(name: str, doc: str) -> Counter:
    return Counter(name, doc, ["group"], registry=None)


def _histogram(name: str, doc: str, buckets: Iterable[float], *labels: str) -> Histogram:
    return Histogram(name, doc, ["group", *labels], buckets=tuple(buckets), registry=None)


class MemberMetrics(Families):
    """The `kgroups_member_*` families of one registry (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        add = self.add
        self.rebalance_duration = add(_histogram(
            "kgroups_member_rebalance_duration_seconds",
            "A successful rebalance as this member saw it: first JoinGroup sent to the "
            "SyncGroup assignment received, failed attempts included (rebalance-latency).",
            REBALANCE_BUCKETS,
        ))  # fmt: skip
        self.rebalances = add(_counter(
            "kgroups_member_rebalances",
            "Successful rebalances (rebalance-total).",
        ))  # fmt: skip
        self.failed_rebalances = add(_counter(
            "kgroups_member_failed_rebalances",
            "Rebalance attempts that failed: JoinGroup or SyncGroup answered with an error, "
            "or no answer (failed-rebalance-total).",
        ))  # fmt: skip
        self.last_rebalance = add(Gauge(
            "kgroups_member_last_rebalance_timestamp_seconds",
            "When the last successful rebalance completed, unix seconds "
            "(last-rebalance-seconds-ago).",
            ["group"], registry=None,
        ))  # fmt: skip
        self.join_duration = add(_histogram(
            "kgroups_member_join_duration_seconds",
            "JoinGroup round trip, answered without error (join-time).",
            REQUEST_BUCKETS,
        ))  # fmt: skip
        self.sync_duration = add(_histogram(
            "kgroups_member_sync_duration_seconds",
            "SyncGroup round trip, answered without error (sync-time).",
            REQUEST_BUCKETS,
        ))  # fmt: skip
        self.heartbeat_duration = add(_histogram(
            "kgroups_member_heartbeat_response_duration_seconds",
            "Heartbeat round trip (heartbeat-response-time; _count is heartbeat-total).",
            REQUEST_BUCKETS,
        ))  # fmt: skip
        self.last_heartbeat = add(Gauge(
            "kgroups_member_last_heartbeat_timestamp_seconds",
            "When the last heartbeat was sent, unix seconds (last-heartbeat-seconds-ago).",
            ["group"], registry=None,
        ))  # fmt: skip
        self.callback_duration = add(_histogram(
            "kgroups_member_partitions_callback_duration_seconds",
            "The application's rebalance listener callbacks (partition-*-latency).",
            REBALANCE_BUCKETS, "callback",
        ))  # fmt: skip
        self.commit_duration = add(_histogram(
            "kgroups_member_commit_duration_seconds",
            "OffsetCommit round trip (commit-latency; _count is commit-total).",
            REQUEST_BUCKETS,
        ))  # fmt: skip
        self.commit_failures = add(_counter(
            "kgroups_member_commit_failures",
            "Commits that raised: refused by the member (its generation moved on), refused "
            "by the coordinator, or not answered.",
        ))  # fmt: skip
        self._live: weakref.WeakSet[MemberStats] = weakref.WeakSet()
        self._groups: set[str] = set()
        self._live_lock = threading.Lock()

    def member(
        self,
        group: str,
        status: Callable[[], tuple[int, int]],
        wall_clock: Callable[[], float] | None = None,
    ) -> MemberStats:
        """A new member of `group`; `status()` tells its generation and how many
        partitions it holds, whenever Prometheus asks."""
        stats = MemberStats(self, group, status, wall_clock or time.time)
        with self._live_lock:
            self._live.add(stats)
            self._groups.add(group)
        return stats

    def _forget(self, stats: MemberStats) -> None:
        with self._live_lock:
            self._live.discard(stats)

    def collect(self) -> Iterator[Metric]:
        yield from super().collect()
        generation, assigned = self._gauges()
        with self._live_lock:
            live, groups = list(self._live), sorted(self._groups)
        newest = dict.fromkeys(groups, NO_GENERATION)
        held = dict.fromkeys(groups, 0)
        for stats in live:
            g, n = stats.status()
            newest[stats.group] = max(newest[stats.group], g)
            held[stats.group] += n
        for group in groups:
            generation.add_metric([group], newest[group])
            assigned.add_metric([group], held[group])
        yield assigned
        yield generation

    def describe(self) -> Iterator[Metric]:
        yield from super().describe()
        yield from self._gauges()

    @staticmethod
    def _gauges() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        generation = GaugeMetricFamily(
            "kgroups_member_generation",
            "The generation this member is in (-1 when none).",
            labels=["group"],
        )
        assigned = GaugeMetricFamily(
            "kgroups_member_assigned_partitions",
            "Partitions assigned to this member now (assigned-partitions).",
            labels=["group"],
        )
        return generation, assigned


class MemberStats:
    """What one member records, as it happens; the member calls these where Kafka's
    sensors record. Durations are the member's, on its event loop's clock."""

    def __init__(
        self,
        metrics: MemberMetrics,
        group: str,
        status: Callable[[], tuple[int, int]],
        wall_clock: Callable[[], float],
    ) -> None:
        self.group = group
        self.status = status
        self._metrics = metrics
        self._wall_clock = wall_clock
        self._rebalance_started: float | None = None
        m = metrics
        # Created now, so a member's counts read 0 (not absent) before anything happened.
        self._rebalance = m.rebalance_duration.labels(group)
        self._rebalances = m.rebalances.labels(group)
        self._failed = m.failed_rebalances.labels(group)
        self._join = m.join_duration.labels(group)
        self._sync = m.sync_duration.labels(group)
        self._heartbeat = m.heartbeat_duration.labels(group)
        self._callbacks = {c: m.callback_duration.labels(group, c) for c in CALLBACKS}
        self._commit = m.commit_duration.labels(group)
        self._commit_failures = m.commit_failures.labels(group)

    # -- a rebalance: from its first JoinGroup to an assignment, across failed attempts --

    def join_sent(self, at: float) -> None:
        """A JoinGroup is sent: the first one since the last success starts a rebalance."""
        if self._rebalance_started is None:
            self._rebalance_started = at

    def joined(self, seconds: float) -> None:
        self._join.observe(seconds)

    def synced(self, seconds: float) -> None:
        self._sync.observe(seconds)

    def rebalance_failed(self) -> None:
        """This attempt failed; the rebalance goes on with the next one."""
        self._failed.inc()

    def rebalance_completed(self, at: float) -> None:
        """The assignment arrived at `at`: the rebalance succeeded."""
        started, self._rebalance_started = self._rebalance_started, None
        if started is not None:
            self._rebalance.observe(max(at - started, 0.0))
        self._rebalances.inc()
        self._metrics.last_rebalance.labels(self.group).set(self._wall_clock())

    # -- the rest --------------------------------------------------------------------------

    def heartbeat_sent(self) -> None:
        self._metrics.last_heartbeat.labels(self.group).set(self._wall_clock())

    def heartbeat_answered(self, seconds: float) -> None:
        self._heartbeat.observe(seconds)

    def callback(self, name: str, seconds: float) -> None:
        """`name`: the listener's method (`on_partitions_revoked`) or the label itself."""
        self._callbacks[name.removeprefix("on_partitions_")].observe(seconds)

    def committed(self, seconds: float) -> None:
        """An OffsetCommit was answered (whatever the answer)."""
        self._commit.observe(seconds)

    def commit_failed(self) -> None:
        self._commit_failures.inc()

    def close(self) -> None:
        """The member is closed: it no longer counts in the group's gauges."""
        self._rebalance_started = None
        self._metrics._forget(self)

    def __repr__(self) -> str:
        return f"MemberStats(group={self.group!r})"
