"""Limits no client can exhaust: connections, idle connections and buffered request bytes.

Kafka's broker settings, with bounds where Kafka's defaults are unbounded, because one
coordinator serves every group of a cluster and a single misbehaving client must not
starve the others:

* max.connections (10000 here; Kafka: unbounded, its acceptor blocks) and
  max.connections.per.ip (5000; Kafka: unbounded): a connection over either is closed as
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
  requests over the rate wait (`RateLimiter`);
* a SASL listener's connection must authenticate within `authentication_timeout_ms`
  (15 s) or be closed: ApiVersions forever does not hold a connection slot;
* failed authentications per client address (`FailureBudget`): 10 at once, then 1 a
  second; attempts beyond wait. A password check (PLAIN's key derivation) runs on one
  worker thread, never on the event loop, so guessing cannot slow heartbeats.

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
    max_connections_per_address: int = 5_000
    """Half of max_connections: one address cannot hold every slot, while a load
    generator, a node's pods behind one SNAT address or a benchmark's thousand members
    on one host still fit."""
    connections_max_idle_ms: int = 600_000
    max_buffered_bytes: int = 256 * 1024 * 1024
    join_rate: float = 0.0
    """JoinGroup requests per second per principal (0: unlimited, as Kafka by default)."""
    commit_rate: float = 0.0
    """OffsetCommit requests per second per principal (0: unlimited)."""
    authentication_timeout_ms: int = 15_000
    """A connection on a SASL listener that has not authenticated by then is closed
    (sending ApiVersions does not keep it open)."""
    failed_authentications_per_s: float = 1.0
    """Failed authentications per client address per second, after a burst of
    `failed_authentications_burst`; attempts beyond wait their turn."""
    failed_authentications_burst: int = 10

    def validate(self) -> None:
        for name in ("max_connections", "max_connections_per_address",
                     "connections_max_idle_ms", "max_buffered_bytes",
                     "authentication_timeout_ms", "failed_authentications_burst"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1")
        if self.join_rate < 0 or self.commit_rate < 0:
            raise ValueError("request rates must be 0 (unlimited) or more")
        if self.failed_authentications_per_s <= 0:
            raise ValueError("failed-authentications-per-s must be more than 0")


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


class FailureBudget:
    """Authentication attempts per client address, paid for by failures: a bucket of
    `burst` tokens refilled at `rate` per second. Every attempt takes a token and waits
    until the token is due (a failure keeps it spent, a success gives it back); with
    `burst` attempts already waiting, the next is refused at once. So an address
    guessing passwords is served at `rate` however many connections it opens, each guess
    costing the server one key derivation, while a client that logs in successfully
    never waits (one behind the same address as a guesser waits its turn)."""

    def __init__(self, rate: float, burst: int, max_keys: int = 100_000) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        """address -> (tokens at `at`, `at`); below 0 when attempts are queued."""

    def _tokens(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - at) * self.rate)

    def take(self, key: str, now: float) -> float | None:
        """Take a token for an attempt from `key`: how long the attempt must wait, or
        None when `burst` attempts already wait (refuse it now, without a check): the
        wait never passes about `burst / rate` seconds, within any authentication
        deadline, and the queue of attempts per address is bounded."""
        if len(self._buckets) >= self._max_keys and key not in self._buckets:
            self._buckets.clear()  # a flood of addresses: forget, rather than grow
        tokens = self._tokens(key, now) - 1
        if tokens < -self.burst:
            return None
        self._buckets[key] = (tokens, now)
        return 0.0 if tokens >= 0 else -tokens / self.rate

    def succeeded(self, key: str, now: float) -> None:
        """The attempt succeeded: its token is given back."""
        if key in self._buckets:
            self._buckets[key] = (min(self.burst, self._tokens(key, now) + 1), now)
