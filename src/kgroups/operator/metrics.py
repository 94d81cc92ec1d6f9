"""The operator's own metrics: is it keeping up, and is the coordinator answering it?

Reconcile passes and their failures per kind, the status patches kopf writes for us and
how long each took, every round trip to the coordinator by API, and how many objects
each watch currently holds. Served with `kgroups operator --metrics HOST:PORT` (kopf's
liveness endpoint stays where it is).

Status patches are applied by kopf after a handler returns, so they are timed by wrapping
kopf's patch function (kopf is pinned; `time_patches` checks the function is there and
puts the original back when the operator stops).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from kopf._cogs.clients import patching  # kopf==1.45.2 pinned: the function that patches
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kgroups import __version__
from kgroups.admin import Admin
from kgroups.exposition import REQUEST_BUCKETS, histogram_family, histos
from kgroups.protocol.apis import metric_api_name

KINDS = ("ConsumerGroup", "Topic")
R = TypeVar("R")


class OperatorMetrics(Collector):
    """Facts recorded on the operator's event loop, rendered at scrape time."""

    def __init__(self) -> None:
        self.reconciles: Tally[str] = Tally()
        self.errors: Tally[str] = Tally()
        self.patches: Tally[str] = Tally()
        self.patch_seconds = histos(REQUEST_BUCKETS)
        self.coordinator_seconds = histos(REQUEST_BUCKETS)
        self.watched: dict[str, set[tuple[str | None, str]]] = {kind: set() for kind in KINDS}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    @contextlib.contextmanager
    def reconciling(self, kind: str) -> Iterator[None]:
        """Count one reconcile pass of `kind`, and an error if it raises."""
        self.reconciles[kind] += 1
        try:
            yield
        except BaseException:
            self.errors[kind] += 1
            raise

    def failed(self, kind: str) -> None:
        """A pass that handled its own failure (the coordinator unreachable, say)."""
        self.errors[kind] += 1

    def event(self, kind: str, event_type: str | None, namespace: str | None, name: str) -> None:
        """A watch event: the object is watched until its DELETED event."""
        if event_type == "DELETED":
            self.watched[kind].discard((namespace, name))
        else:
            self.watched[kind].add((namespace, name))

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("kgroups_build_info", "kgroups' version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        for name, doc, tally in (
            ("kgroups_operator_reconciles", "Reconcile passes (timers included).", self.reconciles),
            ("kgroups_operator_reconcile_errors", "Reconcile passes that failed.", self.errors),
            ("kgroups_operator_status_patches", "Status patches written.", self.patches),
        ):
            family = CounterMetricFamily(name, doc, labels=["kind"])
            for kind in KINDS:
                family.add_metric([kind], tally[kind])
            yield family
        yield histogram_family(
            "kgroups_operator_status_patch_duration_seconds",
            "One status patch to the API server.",
            "kind",
            sorted(self.patch_seconds.items()),
        )
        yield histogram_family(
            "kgroups_operator_coordinator_request_duration_seconds",
            "One request from the operator to the coordinator and its answer.",
            "api",
            sorted(self.coordinator_seconds.items()),
        )
        watched = GaugeMetricFamily(
            "kgroups_operator_watched_objects", "Objects the operator watches.", labels=["kind"]
        )
        for kind in KINDS:
            watched.add_metric([kind], len(self.watched[kind]))
        yield watched


class TimedAdmin(Admin):
    """The operator's admin client: every round trip to the coordinator is timed."""

    def __init__(self, host: str, port: int, metrics: OperatorMetrics, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._metrics = metrics

    async def request(self, body: object, answer: type[R], timeout: float | None = None) -> R:
        api = metric_api_name(getattr(type(body), "__api_key__", -1))
        started = time.monotonic()
        try:
            return await super().request(body, answer, timeout)
        finally:
            self._metrics.coordinator_seconds[api].observe(time.monotonic() - started)


Patch = Callable[..., Awaitable[Any]]


@contextlib.contextmanager
def time_patches(metrics: OperatorMetrics) -> Iterator[None]:
    """While inside: kopf's status patches to our kinds are counted and timed."""
    original: Patch = patching.patch_obj

    async def timed(**kwargs: Any) -> Any:
        kind = getattr(kwargs.get("resource"), "kind", "")
        status = kind in KINDS and "status" in (kwargs.get("patch") or {})
        started = time.monotonic()
        try:
            return await original(**kwargs)
        finally:
            if status:
                metrics.patches[kind] += 1
                metrics.patch_seconds[kind].observe(time.monotonic() - started)

    patching.patch_obj = timed
    try:
        yield
    finally:
        patching.patch_obj = original  # type: ignore[assignment]
