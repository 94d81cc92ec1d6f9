"""The member's connections to its group coordinator, found through the bootstrap servers.

FindCoordinator is asked of each bootstrap address in turn; the coordinator it names gets
two connections, each a `ReconnectingConnection` that finds the coordinator again after
any failure (Java's `markCoordinatorUnknown`):

* `request` carries JoinGroup, SyncGroup, commits, offset fetches and metadata;
* `heartbeat` carries only heartbeats. A coordinator answers one request at a time per
  connection and parks a JoinGroup until the rebalance's join phase ends, so heartbeats on
  the same connection would wait behind it. On their own connection they keep proving
  the member alive while a JoinGroup is parked or a revocation callback runs, and their
  answers tell it whether the coordinator still counts it a member.

Every call runs under one deadline that covers finding the coordinator too, so a
coordinator that accepts connections but never answers cannot stall a member past the
timeout it asked for. Callers see `CoordinatorUnavailable`, always safe to retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TypeVar

from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12 import response as mdr

from kgroups.protocol import addresses
from kgroups.protocol.build import build
from kgroups.protocol.client import (
    Authenticate,
    Connector,
    CoordinatorUnavailable,
    KafkaConnection,
    ReconnectingConnection,
)
from kgroups.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
R = TypeVar("R")

COORDINATOR_MOVED = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
    }
)
"""Errors that mean "ask FindCoordinator again" (retriable)."""

__all__ = ["COORDINATOR_MOVED", "CoordinatorLink", "CoordinatorUnavailable", "parse_bootstrap"]


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' or ['h1:9092'] into (host, port) pairs."""
    try:
        return addresses.parse_bootstrap(bootstrap)
    except ValueError as exc:
        raise ValueError(f"bootstrap address: {exc}") from None


class CoordinatorLink:
    """The member's two connections to the coordinator of `group_id`."""

    def __init__(
        self,
        bootstrap: list[tuple[str, int]],
        group_id: str,
        client_id: str,
        timeout: float,
        *,
        connect: Connector | None = None,
        authenticate: Authenticate | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._group_id = group_id
        self._client_id = client_id
        self._connect = connect
        self._authenticate = authenticate
        self.timeout = timeout
        self._requests, self._heartbeats = (
            ReconnectingConnection(self._find, client_id=client_id, timeout=timeout,
                                   connect=connect, authenticate=authenticate)
            for _ in range(2)
        )  # fmt: skip

    async def _find(self, deadline: float) -> tuple[str, int]:
        """FindCoordinator through each bootstrap address in turn, until `deadline`."""
        problems = []
        for host, port in self._bootstrap:
            conn: KafkaConnection | None = None
            try:
                async with asyncio.timeout_at(deadline):
                    conn = await KafkaConnection.open(
                        host, port, client_id=self._client_id, connect=self._connect,
                        authenticate=self._authenticate,
                    )  # fmt: skip
                    body = build(
                        fc.FindCoordinatorRequest,
                        {"key_type": 0, "coordinator_keys": [self._group_id]},
                    )
                    found = (await conn.request(body)).coordinators[0]
            except TimeoutError:
                problems.append(f"{host}:{port}: no answer in time")
                break
            except OSError as exc:
                problems.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            finally:
                if conn is not None:
                    await conn.close()
            if found.error_code is not ErrorCode.none:
                problems.append(f"{host}:{port}: {found.error_code.name}")
                continue
            return found.host, int(found.port)
        raise CoordinatorUnavailable("no coordinator for the group: " + "; ".join(problems))

    async def request(self, body: object, answer: type[R], *, timeout: float | None = None) -> R:
        """Send to the coordinator and get an `answer`; any trouble becomes
        `CoordinatorUnavailable`."""
        return await self._requests.ask(body, answer, timeout=timeout)

    async def heartbeat(self, body: object, answer: type[R], *, timeout: float) -> R:
        """Send a heartbeat on the heartbeat connection."""
        return await self._heartbeats.ask(body, answer, timeout=timeout)

    async def partitions(
        self, topics: list[str]
    ) -> tuple[dict[str, int], dict[str, list[frozenset[str]]]]:
        """Partition counts of the `topics` that exist, and each partition's replica racks
        (empty when the brokers declare no racks)."""
        body = build(md.MetadataRequest, {"topics": [{"name": t} for t in sorted(topics)]})
        response = await self.request(body, mdr.MetadataResponse)
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
        """Forget the coordinator (Java's markCoordinatorUnknown): both connections."""
        await self._requests.reset()
        await self._heartbeats.reset()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.reset()
