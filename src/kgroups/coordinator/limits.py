"""Limits no client can exhaust: connections, idle connections and buffered request bytes.

Kafka's broker settings, with bounds where Kafka's defaults are unbounded, because one
coordinator serves every group of a cluster and a single misbehaving client must not
starve the others:

* max.connections (10000 here; Kafka: unbounded, its acceptor blocks) and
  max.connections.per.ip (1000; Kafka: unbounded): a connection over either is closed as
  soon as it is accepted, before a byte is read, and counted;
* connections.max.idle.ms (10 minutes, Kafka's): a connection with no request in flight
  and no whole request received or answer sent for that long is closed. Partial frames do
  not count as activity, so a slow-loris client dribbling a frame is idle;
* queued.max.request.bytes (256 MiB here; Kafka: unbounded): bytes of requests received
  but not yet handled, partial frames included, across all connections. Above it, the
  connection that is adding bytes stops being read (TCP pushes back on its client) until
  the total is below half; other connections' small requests keep flowing;
* before a SASL connection has authenticated, frames are limited to 512 KiB (Kafka's
  sasl.server.max.receive.size): an unauthenticated client cannot make us hold 100 MiB;
* JoinGroup and OffsetCommit rates per principal (off by default, as Kafka's quotas):
  requests over the rate wait (`RateLimiter`).

`ConnectionCounts` and `RateLimiter` are the bookkeeping, pure (time passed in); the
server does the closing, pausing and waiting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

PRE_AUTH_MAX_FRAME_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 10_000
    max_connections_per_address: int = 1_000
    connections_max_idle_ms: int = 600_000
    max_buffered_bytes: int = 256 * 1024 * 1024
    join_rate: float = 0.0
    """JoinGroup requests per second per principal (0: unlimited, as Kafka by default)."""
    commit_rate: float = 0.0
    """OffsetCommit requests per second per principal (0: unlimited)."""

    def validate(self) -> None:
        for name in ("max_connections", "max_connections_per_address",
                     "connections_max_idle_ms", "max_buffered_bytes"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1")
        if self.join_rate < 0 or self.commit_rate < 0:
            raise ValueError("request rates must be 0 (unlimited) or more")


class ConnectionCounts:
    """Open connections, in total and per client address."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self.by_address: Counter[str] = Counter()

    def admit(self, address: str) -> str | None:
        """Count a new connection, or say why it is refused (then nothing is counted)."""
        if self.total >= self.limits.max_connections:
            return "total"
        if self.by_address[address] >= self.limits.max_connections_per_address:
            return "per_address"
        self.total += 1
        self.by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]


class RateLimiter:
    """Requests per second per principal (Kafka's request quotas, by count): a token
    bucket of `burst` tokens refilled at `rate` per second. A request over it is not
    refused but delayed until its token is due, as a Kafka broker throttles (KIP-219
    mutes the channel): a flood of JoinGroups with fresh member ids slows to `rate`, and
    its pending members to `rate` x the session timeout, while other principals'
    requests are untouched. `rate` 0: no limit."""

    def __init__(self, rate: float, burst: float | None = None, max_keys: int = 100_000) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, 2 * rate)
        self._max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        """key -> (tokens at `at`, `at`): tokens may go below 0 (requests already queued)."""

    def delay(self, key: str, now: float) -> float:
        """Take a token for `key` at `now` (seconds); how long the request must wait."""
        if self.rate <= 0:
            return 0.0
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate) - 1
        if len(self._buckets) >= self._max_keys and key not in self._buckets:
            self._buckets.clear()  # a flood of principals: forget, rather than grow
        self._buckets[key] = (tokens, now)
        return 0.0 if tokens >= 0 else -tokens / self.rate
