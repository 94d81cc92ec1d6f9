"""Exposing metrics: a tiny HTTP server for /metrics and probes, and plain histograms.

The coordinator and the operator both answer Prometheus and the kubelet from the event
loop that owns their state, so a scrape reads state between two requests, never in the
middle of one (prometheus_client's threaded server would read it from another thread).
One request per connection, GET or HEAD, bounded header reading: enough for Prometheus'
scraper and kubelet probes, and nothing a client could hold open.

Their counters and histograms are plain numbers (`Histo`) rendered by a collector at
scrape time: no `_created` series, and no process-wide switch to turn those off.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10
MAX_HEADER_LINE = 8192
MAX_HEADER_LINES = 100


REBALANCE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Up to the longest rebalance timeout clients use (Kafka's max.poll.interval.ms is 300 s)."""
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                   5, 10, 30, 60, 300)  # fmt: skip
"""A heartbeat takes well under a millisecond; a parked JoinGroup up to the rebalance timeout."""


@dataclass(slots=True)
class Histo:
    """A cumulative histogram kept as plain numbers (observed on one thread only)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        counts = self.counts or [0] * (len(self.bounds) + 1)
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


def histos(bounds: tuple[float, ...]) -> defaultdict[str, Histo]:
    """One histogram per label value, made on first use."""
    return defaultdict(lambda: Histo(bounds))


def histogram_family(
    name: str, doc: str, label: str | None, items: Iterable[tuple[str | None, Histo]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label] if label else None)
    for value, histo in items:
        family.add_metric([value] if value is not None else [], histo.buckets(), histo.total)
    return family


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}

Route = Callable[[], Answer]


def metrics_route(registry: CollectorRegistry) -> Route:
    """Prometheus' text format for everything in `registry`."""
    return lambda: Answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)


def probe_route(check: Callable[[], str | None]) -> Route:
    """200 "ok" while `check()` returns None, else 503 with the reason it returned."""

    def answer() -> Answer:
        problem = check()
        if problem is None:
            return Answer(200, b"ok\n")
        return Answer(503, problem.encode() + b"\n")

    return answer


class HttpEndpoints:
    """Serves `routes` (path -> answer) on one address until closed."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self._routes = dict(routes)
        self._server: asyncio.Server | None = None
        self.port = 0

    async def serve(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("serving %s on http://%s:%d", ", ".join(self._routes), host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def answer(self, method: str, target: str) -> Answer:
        if method not in ("GET", "HEAD"):
            return Answer(405, b"GET only\n")
        route = self._routes.get(target.split("?", 1)[0])
        if route is None:
            return Answer(404, ("try " + " ".join(self._routes) + "\n").encode())
        return route()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), HEADER_TIMEOUT_S)
            for _ in range(MAX_HEADER_LINES):
                line = await asyncio.wait_for(reader.readline(), HEADER_TIMEOUT_S)
                if line in (b"\r\n", b"\n", b"") or len(line) > MAX_HEADER_LINE:
                    break
            parts = request.decode("latin-1").split()
            method = parts[0] if parts else ""
            answer = self.answer(method, parts[1] if len(parts) > 1 else "")
            head = (
                f"HTTP/1.0 {answer.status} {_REASONS.get(answer.status, '')}\r\n"
                f"Content-Type: {answer.content_type}\r\n"
                f"Content-Length: {len(answer.body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else answer.body))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
