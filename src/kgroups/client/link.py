"""The member's connection to its group coordinator, found through the bootstrap servers.

FindCoordinator is asked of each bootstrap address in turn; the answer's host and port
get a connection that is kept until something goes wrong. Any failure (connection refused
or dropped, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) "marks the coordinator unknown",
as Java's `AbstractCoordinator.markCoordinatorUnknown` does: the connection is dropped and
the next request finds the coordinator again. Callers see `CoordinatorUnavailable`, which
is always safe to retry after a backoff.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.metadata.v12 import request as md

from kgroups.protocol.build import build
from kgroups.protocol.client import KafkaConnection
from kgroups.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

COORDINATOR_MOVED = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
    }
)
"""Errors that mean "ask FindCoordinator again" (retriable)."""


class CoordinatorUnavailable(ConnectionError):
    """No coordinator could be reached right now; retry after a backoff."""


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' or ['h1:9092'] into (host, port) pairs."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in (i.strip() for i in items):
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap address {item!r} is not HOST:PORT")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no bootstrap addresses")
    return out


class CoordinatorLink:
    def __init__(
        self, bootstrap: list[tuple[str, int]], group_id: str, client_id: str, timeout: float
    ) -> None:
        self._bootstrap = bootstrap
        self._group_id = group_id
        self._client_id = client_id
        self._timeout = timeout
        self._conn: KafkaConnection | None = None
        self._lock = asyncio.Lock()

    async def _open(self, host: str, port: int) -> KafkaConnection:
        try:
            return await asyncio.wait_for(
                KafkaConnection.open(host, port, client_id=self._client_id), self._timeout
            )
        except (OSError, TimeoutError) as exc:
            raise CoordinatorUnavailable(f"cannot connect to {host}:{port}: {exc}") from exc

    async def _find(self) -> KafkaConnection:
        problems = []
        for host, port in self._bootstrap:
            try:
                conn = await self._open(host, port)
            except CoordinatorUnavailable as exc:
                problems.append(str(exc))
                continue
            keep = False
            try:
                body = build(
                    fc.FindCoordinatorRequest, {"key_type": 0, "coordinator_keys": [self._group_id]}
                )
                found = (await asyncio.wait_for(conn.request(body), self._timeout)).coordinators[0]
                if found.error_code is not ErrorCode.none:
                    problems.append(f"{host}:{port}: {found.error_code.name}")
                    continue
                address = (found.host, int(found.port))
                keep = address == (host, port)
                if keep:
                    return conn
            except (ConnectionError, TimeoutError) as exc:
                problems.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            finally:
                if not keep:
                    await conn.close()
            return await self._open(*address)
        raise CoordinatorUnavailable("no coordinator for the group: " + "; ".join(problems))

    async def connection(self) -> KafkaConnection:
        async with self._lock:
            if self._conn is None:
                self._conn = await self._find()
            return self._conn

    async def request(self, body: Any, *, timeout: float | None = None) -> Any:
        """Send to the coordinator; connection trouble becomes `CoordinatorUnavailable`."""
        conn = await self.connection()
        try:
            return await asyncio.wait_for(conn.request(body), timeout or self._timeout)
        except (ConnectionError, TimeoutError) as exc:
            await self.reset()
            raise CoordinatorUnavailable(f"coordinator connection failed: {exc}") from exc

    async def partitions(
        self, topics: list[str]
    ) -> tuple[dict[str, int], dict[str, list[frozenset[str]]]]:
        """Partition counts of the `topics` that exist, and each partition's replica racks
        (empty when the brokers declare no racks)."""
        body = build(md.MetadataRequest, {"topics": [{"name": t} for t in sorted(topics)]})
        response = await self.request(body)
        racks_of = {b.node_id: b.rack for b in response.brokers if b.rack}
        counts: dict[str, int] = {}
        racks: dict[str, list[frozenset[str]]] = {}
        for topic in response.topics:
            if topic.error_code is not ErrorCode.none or topic.name is None:
                continue
            ordered = sorted(topic.partitions, key=lambda p: p.partition_index)
            counts[topic.name] = len(ordered)
            if racks_of:
                racks[topic.name] = [
                    frozenset(racks_of[n] for n in p.replica_nodes if n in racks_of)
                    for p in ordered
                ]
        return counts, racks

    async def reset(self) -> None:
        """Forget the coordinator (Java's markCoordinatorUnknown)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        await self.reset()
