"""Sidecar mode: a group member in its own process, for an application in any language.

The application never speaks the Kafka protocol. It reads its assignment from a file
(rewritten atomically: write, fsync, rename) or from local HTTP, and tells the sidecar
when it has stopped working on revoked partitions:

    GET  /assignment  {"generation", "member_id", "state", "assignment": {"t": [0, 1]},
                       "revoking": {"t": [1]}, "lost": {"t": [2]}, "version"}
    POST /revoked     acknowledge that work on "revoking" has stopped
    POST /commit      {"offsets": {"t": {"0": 42}}, "generation": 7,
                       "log_ends": {"t": {"0": 90}}}
                      (assigned or revoking partitions; "generation", optional, pins the
                      commit to the generation the work was read in: 409 unless that is
                      the member's generation or it has held the partitions since;
                      "log_ends", optional, says where the application's source ends, so
                      Kafka's tools show the true end and lag of the group)
    GET  /healthz     200 while the member is alive, 503 once it has failed
    GET  /metrics     the member's Kafka consumer-coordinator metrics in Prometheus' text
                      format (kgroups_member_*, labelled by group; `metrics` in this
                      package), from the sidecar's own registry: scrape this port,
                      or `--metrics HOST:PORT`, which serves only /metrics and /healthz
                      (so Prometheus can reach them while this API stays on loopback)

The non-overlap guarantee comes from ordering. When partitions are revoked, the sidecar
first publishes the assignment without them (listed under "revoking"), then waits for
POST /revoked before the member protocol goes on and lets anyone else have them: eagerly
before rejoining, cooperatively before the follow-up rebalance. The member keeps
heartbeating meanwhile, so a slow acknowledgement costs nobody their membership; if none
comes within the rebalance timeout, the partitions are reported lost (the coordinator is
about to give them away). Lost partitions (the member was expelled, or the coordinator
unreachable for a session timeout) are withdrawn at once and listed under "lost" until
the next assignment: stop work on them now, without acknowledging. An application that
acts only on "assignment" and acknowledges revocations therefore never works on a
partition another sidecar's application holds.

The batch pattern: read "generation" with the assignment, do the work, and commit with
that generation; a commit for work read in an older generation is refused (409), even if
the partition has come back to this member since.

On SIGTERM the sidecar revokes everything and waits for POST /revoked at most
`close_timeout` (the application's container is usually stopping too), then leaves.

Without HTTP there is nobody to acknowledge, so a revocation waits `revoke_timeout` (a
grace period for the application to notice the file) before proceeding; with HTTP and an
explicit `revoke_timeout`, an unacknowledged revocation is released after it (for
applications known to stop within that time that do not acknowledge).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any, NamedTuple

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kgroups.client.consumer_member import ConsumerProtocolMember
from kgroups.client.errors import (
    CommitError,
    CommitFailedError,
    MemberError,
    RebalanceInProgressError,
    TopicPartition,
)
from kgroups.client.link import CoordinatorUnavailable
from kgroups.client.member import GroupMember, Partitions
from kgroups.exposition import HttpEndpoints, metrics_route, probe_route
from kgroups.files import write_atomically
from kgroups.protocol.consumer import partitions_by_topic
from kgroups.tasks import wait_set

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20


def _by_topic(partitions: Partitions) -> dict[str, list[int]]:
    return {t: list(ps) for t, ps in sorted(partitions_by_topic(partitions).items())}


class _Text(NamedTuple):
    """A reply body that is not JSON."""

    content_type: str
    data: bytes


class Sidecar:
    """Publishes a `GroupMember`'s assignment and gates its revocations on the app.

    `member_factory(sidecar)` makes the member, with the sidecar as its listener and
    `sidecar.registry` as its metrics registry: a registry of its own (unless given),
    so that GET /metrics shows this member alone even beside others in one process."""

    def __init__(
        self,
        member_factory: Any,
        *,
        assignment_file: Path | None,
        http: tuple[str, int] | None,
        revoke_timeout: float | None,
        close_timeout: float = 10.0,
        registry: CollectorRegistry | None = None,
        metrics: tuple[str, int] | None = None,
    ) -> None:
        """`metrics`: also serve GET /metrics and /healthz there, alone (the address can
        face Prometheus while `http`, which takes commits, stays on loopback)."""
        self.registry = CollectorRegistry() if registry is None else registry
        self._endpoints = HttpEndpoints(
            {"/metrics": metrics_route(self.registry), "/healthz": probe_route(self._unhealthy)}
        )
        self.metrics = metrics
        self.member: GroupMember | ConsumerProtocolMember = member_factory(self)
        self.assignment_file = assignment_file
        self.http = http
        self.revoke_timeout = revoke_timeout
        self.close_timeout = close_timeout
        self.version = 0
        self._revoking: Partitions = frozenset()
        self._lost: Partitions = frozenset()
        self._acked = asyncio.Event()
        self._held: Partitions = frozenset()
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    # -- the listener --------------------------------------------------------------------

    async def on_partitions_revoked(self, partitions: Partitions) -> None:
        self._held = self._held - partitions
        self._revoking = self._revoking | partitions
        self._acked.clear()
        self._publish()
        try:
            if self.revoke_timeout is None:
                await self._acked.wait()
            elif not await wait_set(self._acked, self.revoke_timeout) and self.http is not None:
                log.warning(
                    "the application did not acknowledge revoking %s within %.1f s; "
                    "releasing them anyway (--revoke-timeout-ms)",
                    sorted(partitions),
                    self.revoke_timeout,
                )
        finally:  # acknowledged, timed out, or cancelled because they are lost now
            self._revoking = self._revoking - partitions
            self._publish()

    def on_partitions_lost(self, partitions: Partitions) -> None:
        self._held = self._held - partitions
        self._revoking = self._revoking - partitions
        self._lost = self._lost | partitions
        self._publish()

    def on_partitions_assigned(self, partitions: Partitions) -> None:
        self._held = self.member.assignment - self.member.revoking
        self._lost = self._lost - self._held
        self._publish()

    # -- publishing ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        m = self.member
        return {
            "version": self.version,
            "generation": m.generation,
            "member_id": m.member_id,
            "state": m.state,
            "assignment": _by_topic(self._held),
            "revoking": _by_topic(self._revoking),
            "lost": _by_topic(self._lost),
        }

    def _publish(self) -> None:
        self.version += 1
        if self.assignment_file is not None:
            body = json.dumps(self.snapshot(), sort_keys=True).encode() + b"\n"
            write_atomically(self.assignment_file, body)

    # -- HTTP ----------------------------------------------------------------------------------

    async def start_http(self) -> None:
        if self.http is None:
            return
        self._server = await asyncio.start_server(self._serve, *self.http)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    request_line = await reader.readline()
                    if not request_line:
                        return
                    method, path, _ = request_line.decode("latin-1").split(" ", 2)
                    length = 0
                    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                        name, _, value = line.decode("latin-1").partition(":")
                        if name.strip().lower() == "content-length":
                            length = int(value.strip())
                    if length > MAX_BODY:
                        raise ValueError("request body too large")
                    body = await reader.readexactly(length) if length else b""
                except (ValueError, asyncio.IncompleteReadError):
                    await self._reply(writer, 400, {"error": "malformed HTTP request"})
                    return
                status, payload = await self._route(method, path.split("?", 1)[0], body)
                await self._reply(writer, status, payload)
        except ConnectionError:
            return
        finally:
            writer.close()

    async def _reply(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        reasons = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                   409: "Conflict", 503: "Service Unavailable"}  # fmt: skip
        if isinstance(payload, _Text):
            kind, data = payload
        else:
            kind, data = "application/json", json.dumps(payload, sort_keys=True).encode()
        head = (
            f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()

    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        routes = {
            ("GET", "/assignment"): self._get_assignment,
            ("GET", "/healthz"): self._healthz,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/revoked"): self._post_revoked,
            ("POST", "/commit"): self._post_commit,
        }
        handler = routes.get((method, path))
        if handler is None:
            known = any(p == path for _, p in routes)
            return (405 if known else 404), {"error": f"no route {method} {path}"}
        return await handler(body)

    async def _get_assignment(self, body: bytes) -> tuple[int, Any]:
        return 200, self.snapshot()

    async def _healthz(self, body: bytes) -> tuple[int, Any]:
        ok = self.member.state not in ("failed", "closed")
        return (200 if ok else 503), {"state": self.member.state}

    async def _metrics(self, body: bytes) -> tuple[int, Any]:
        return 200, _Text(CONTENT_TYPE_LATEST, generate_latest(self.registry))

    async def _post_revoked(self, body: bytes) -> tuple[int, Any]:
        pending = bool(self._revoking)
        self._acked.set()
        return 200, {"acknowledged": pending}

    async def _post_commit(self, body: bytes) -> tuple[int, Any]:
        try:
            doc = json.loads(body or b"{}")
            offsets = {
                TopicPartition(topic, int(p)): int(offset)
                for topic, per_partition in doc["offsets"].items()
                for p, offset in per_partition.items()
            }
            ends = {
                TopicPartition(topic, int(p)): int(end)
                for topic, per_partition in doc.get("log_ends", {}).items()
                for p, end in per_partition.items()
            }
            generation = doc.get("generation")
            if generation is not None and (
                isinstance(generation, bool) or not isinstance(generation, int)
            ):
                raise TypeError("generation must be an integer")
        except (ValueError, KeyError, TypeError, AttributeError):
            return 400, {
                "error": 'expected {"offsets": {"topic": {"partition": offset}}, '
                '"generation": N (optional), "log_ends": {"topic": {"partition": end}} '
                "(optional)}"
            }
        foreign = sorted(tp for tp in offsets if tp not in self._held | self._revoking)
        if foreign:
            return 409, {"error": "not assigned to this member", "partitions": foreign}
        try:
            await self.member.commit(offsets, generation=generation, log_ends=ends)
        except CommitFailedError as exc:
            return 409, {"error": str(exc), "code": getattr(exc.code, "name", None)}
        except (RebalanceInProgressError, CoordinatorUnavailable) as exc:
            return 503, {"error": str(exc), "retry": True}
        except CommitError as exc:
            return 400, {"error": str(exc)}
        except MemberError as exc:
            return 503, {"error": str(exc)}
        return 200, {"committed": len(offsets), "generation": self.member.generation}

    # -- lifecycle -----------------------------------------------------------------------------

    def _unhealthy(self) -> str | None:
        return None if self.member.error is None else f"member failed: {self.member.error}"

    @property
    def metrics_port(self) -> int:
        return self._endpoints.port

    async def run(self, stop: asyncio.Event) -> int:
        """Serve until `stop` is set; 0 on a clean stop, 1 if the member failed."""
        await self.start_http()
        if self.metrics is not None:
            await self._endpoints.serve(*self.metrics)
        self._publish()
        if self.address is not None:
            print(
                json.dumps({"event": "listening", "http": f"{self.address[0]}:{self.address[1]}"}),
                flush=True,
            )
        starting = asyncio.create_task(self.member.start())
        stopping = asyncio.create_task(stop.wait())
        code = 0
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done() and starting.exception() is not None:
                log.error("the member failed: %s", starting.exception())
                code = 1
            else:
                failed = asyncio.create_task(self.member.wait_failed())
                await asyncio.wait({failed, stopping}, return_when=asyncio.FIRST_COMPLETED)
                failed.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await failed
                if self.member.error is not None:
                    code = 1
        finally:
            for task in (starting, stopping):
                task.cancel()
            # Shutting down, the application may be gone too: bound the last revocation.
            self.revoke_timeout = min(self.revoke_timeout or self.close_timeout,
                                      self.close_timeout)  # fmt: skip
            await self.member.close()
            self._publish()
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
            await self._endpoints.close()
        return code
