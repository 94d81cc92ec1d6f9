"""A group member that times every heartbeat: what "still served" means, measured.

`HeartbeatProbe` joins a one-member group of its own (raw protocol, `bench.loadgen`) and
heartbeats every 50 ms on its own connection, in a thread with its own event loop, timing
each round trip and keeping every error code it gets. An attack test marks when the attack
starts and ends and asserts on the round trips in between (p99, the worst) and on the
errors (none: the member kept its generation).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

from bench.loadgen import Member, connect


class HeartbeatProbe:
    def __init__(self, host: str, port: int, *, interval_s: float = 0.05,
                 session_ms: int = 30_000, group: str | None = None) -> None:  # fmt: skip
        self.host, self.port = host, port
        self.interval_s = interval_s
        self.session_ms = session_ms
        self.group = group or f"probe-{uuid.uuid4().hex[:8]}"
        self.samples: list[tuple[float, float]] = []
        """(time.monotonic() the heartbeat was sent, its round trip in seconds)."""
        self.errors: list[str] = []
        self.generation = -1
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        assert self._ready.wait(30), f"the probe did not join: {self.errors}"

    async def _run(self) -> None:
        try:
            conn = await connect(self.host, self.port)
            member = Member(conn, self.group, "probe", 0, session_ms=self.session_ms)
            await member.join()
            if not await member.sync(1):
                raise RuntimeError("the probe's SyncGroup failed")
            self.generation = member.generation
        except Exception as exc:  # noqa: BLE001  (reported by the constructor's assert)
            self.errors.append(f"join: {exc!r}")
            return
        self._ready.set()
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                code = await asyncio.wait_for(member.heartbeat(), 30)
            except (TimeoutError, ConnectionError) as exc:
                self.errors.append(f"heartbeat: {exc!r}")
                return
            self.samples.append((sent, time.monotonic() - sent))
            if code != 0:
                self.errors.append(f"heartbeat error code {code}")
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - sent)))
        assert conn.transport is not None
        conn.transport.close()

    def round_trips(self, since: float, until: float | None = None) -> list[float]:
        end = time.monotonic() if until is None else until
        return sorted(rtt for sent, rtt in self.samples if since <= sent <= end)

    def p99(self, since: float, until: float | None = None) -> float:
        trips = self.round_trips(since, until)
        assert len(trips) >= 3, f"only {len(trips)} heartbeats between the marks"
        return trips[min(len(trips) - 1, int(len(trips) * 0.99))]

    def assert_served(self, since: float, until: float | None = None,
                      p99_s: float = 0.5) -> None:  # fmt: skip
        """Heartbeats between the marks: answered, no error, p99 within `p99_s`."""
        assert not self.errors, self.errors
        assert self._thread.is_alive(), "the probe stopped"
        p99 = self.p99(since, until)
        assert p99 <= p99_s, (
            f"heartbeat p99 {p99 * 1000:.0f} ms (worst {max(self.round_trips(since, until)) * 1000:.0f} ms)"
        )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
