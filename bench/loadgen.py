"""A fast Kafka-protocol load generator for the benchmarks (raw asyncio, no client library).

It speaks just enough of the group protocol to put many members into a group and then
hammer the coordinator with pipelined requests. Kept separate from the coordinator's
code on purpose: it must measure the same thing against kgroups and against a Kafka
broker.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.heartbeat.v4 import request as hb_req
from kio.schema.heartbeat.v4 import response as hb_resp
from kio.schema.join_group.v9 import request as join_req
from kio.schema.join_group.v9 import response as join_resp
from kio.schema.leave_group.v5 import request as leave_req
from kio.schema.sync_group.v5 import request as sync_req
from kio.schema.sync_group.v5 import response as sync_resp

from kgroups.protocol.build import build
from kgroups.protocol.client import encode_request
from kgroups.protocol.tags import reader_for

SIZE = struct.Struct(">i")


def subscription(topic: str) -> bytes:
    raw = topic.encode()
    return (
        b"\x00\x00"
        + (1).to_bytes(4, "big")
        + len(raw).to_bytes(2, "big")
        + raw
        + b"\xff\xff\xff\xff"
    )


def assignment(topic: str, partitions: list[int]) -> bytes:
    raw = topic.encode()
    out = b"\x00\x00" + (1).to_bytes(4, "big") + len(raw).to_bytes(2, "big") + raw
    out += len(partitions).to_bytes(4, "big") + b"".join(p.to_bytes(4, "big") for p in partitions)
    return out + b"\xff\xff\xff\xff"


class Conn(asyncio.Protocol):
    """Pipelined request/response over one connection, responses matched in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiters: list[tuple[type, asyncio.Future[Any]]] = []
        self.on_frame: Callable[[bytes], None] | None = None
        self.next_id = 0
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        for _, fut in self.waiters:
            if not fut.done():
                fut.set_exception(ConnectionError("closed"))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while len(buf) >= 4:
            (size,) = SIZE.unpack_from(buf, 0)
            if len(buf) < 4 + size:
                return
            frame = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            if self.on_frame is not None:
                self.on_frame(frame)
                continue
            cls, fut = self.waiters.pop(0)
            # the correlation id, then a flexible response header's (empty) tagged fields
            body, _ = reader_for(cls)(memoryview(frame), 5 if cls.__flexible__ else 4)
            if not fut.done():  # its caller may have given up waiting (a timeout)
                fut.set_result(body)

    def frame(self, body: Any) -> bytes:
        self.next_id += 1
        return encode_request(body, self.next_id, "bench")

    async def request(self, body: Any, response_cls: type) -> Any:
        assert self.transport is not None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters.append((response_cls, fut))
        self.transport.write(self.frame(body))
        return await fut


@dataclass(frozen=True)
class Security:
    """TLS to the server (trusting `ca`), then SASL SCRAM-SHA-512 as `user`: how a
    secured client connects, to kgroups and to Kafka alike."""

    ca: Path
    user: str
    password: str
    mechanism: str = "SCRAM-SHA-512"

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.check_hostname = False
        return context


async def connect(host: str, port: int, security: Security | None = None) -> Conn:
    loop = asyncio.get_running_loop()
    tls = security.context() if security is not None else None
    _, conn = await loop.create_connection(Conn, host, port, ssl=tls)
    if security is not None:
        await authenticate(conn, security)
    return conn


async def authenticate(conn: Conn, security: Security) -> None:
    """SaslHandshake v1, then SaslAuthenticate v2 rounds of SCRAM."""
    from kio.schema.sasl_authenticate.v2 import request as auth_req
    from kio.schema.sasl_authenticate.v2 import response as auth_resp
    from kio.schema.sasl_handshake.v1 import request as hs_req
    from kio.schema.sasl_handshake.v1 import response as hs_resp

    from kgroups.security.sasl_client import ScramClient

    handshake = await conn.request(hs_req.SaslHandshakeRequest(mechanism=security.mechanism),
                                   hs_resp.SaslHandshakeResponse)  # fmt: skip
    if int(handshake.error_code) != 0:
        raise RuntimeError(f"SASL handshake refused: {handshake.error_code!r}")
    client = ScramClient(security.user, security.password, security.mechanism)
    token: bytes | None = client.first()
    while token is not None:
        answer = await conn.request(auth_req.SaslAuthenticateRequest(auth_bytes=token),
                                    auth_resp.SaslAuthenticateResponse)  # fmt: skip
        if int(answer.error_code) != 0:
            raise RuntimeError(f"SASL authentication failed: {answer.error_message}")
        token = client.step(answer.auth_bytes)


class Member:
    """One member of a bench group on its own connection."""

    def __init__(self, conn: Conn, group: str, topic: str, index: int, *, session_ms: int) -> None:
        self.conn = conn
        self.group = group
        self.topic = topic
        self.index = index
        self.session_ms = session_ms
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self.members: list[str] = []
        self.assignment = b""

    async def join(self, rebalance_ms: int = 60_000) -> None:
        moved = 0
        while True:
            body = build(
                join_req.JoinGroupRequest,
                {
                    "group_id": self.group,
                    "session_timeout": self.session_ms,
                    "rebalance_timeout": rebalance_ms,
                    "member_id": self.member_id,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": subscription(self.topic)}],
                },
            )
            response = await self.conn.request(body, join_resp.JoinGroupResponse)
            code = int(response.error_code)
            if code == 79:  # MEMBER_ID_REQUIRED
                self.member_id = response.member_id
                continue
            if code == 27:  # REBALANCE_IN_PROGRESS
                continue
            if code == 25 and self.member_id:  # UNKNOWN_MEMBER_ID: the id it was given is
                self.member_id = ""  # gone (its group moved to another coordinator, or
                continue  # expired before it came back); a Kafka client joins afresh
            if code in (14, 15):  # coordinator loading / not available
                await asyncio.sleep(0.1)
                continue
            if code == 16:  # not the coordinator: a broker just made one may say so a while;
                moved += 1  # past that, find it again, as a client does
                if moved > 50:
                    raise ConnectionError("not the coordinator")
                await asyncio.sleep(0.1)
                continue
            if code != 0:
                raise RuntimeError(f"join failed: {response.error_code!r}")
            self.member_id = response.member_id
            self.generation = response.generation_id
            self.leader = response.leader == self.member_id
            self.members = sorted(m.member_id for m in response.members)
            return

    async def sync(self, partitions_per_member: int) -> bool:
        assignments = []
        if self.leader:
            for i, m in enumerate(self.members):
                parts = list(range(i * partitions_per_member, (i + 1) * partitions_per_member))
                assignments.append({"member_id": m, "assignment": assignment(self.topic, parts)})
        body = build(
            sync_req.SyncGroupRequest,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": assignments,
            },
        )
        response = await self.conn.request(body, sync_resp.SyncGroupResponse)
        if int(response.error_code) != 0:
            return False
        self.assignment = response.assignment
        return True

    def heartbeat_body(self) -> Any:
        return build(
            hb_req.HeartbeatRequest,
            {"group_id": self.group, "generation_id": self.generation, "member_id": self.member_id},
        )

    async def heartbeat(self) -> int:
        response = await self.conn.request(self.heartbeat_body(), hb_resp.HeartbeatResponse)
        return int(response.error_code)

    def leave_frame(self) -> bytes:
        body = build(
            leave_req.LeaveGroupRequest,
            {"group_id": self.group, "members": [{"member_id": self.member_id}]},
        )
        return self.conn.frame(body)


async def find_coordinator(
    host: str, port: int, group: str, security: Security | None = None
) -> None:
    """What real clients do first; a Kafka broker creates __consumer_offsets on demand."""
    from kio.schema.find_coordinator.v6 import request as fc_req
    from kio.schema.find_coordinator.v6 import response as fc_resp

    conn = await connect(host, port, security)
    try:
        for _ in range(300):
            body = build(
                fc_req.FindCoordinatorRequest, {"key_type": 0, "coordinator_keys": [group]}
            )
            response = await conn.request(body, fc_resp.FindCoordinatorResponse)
            if int(response.coordinators[0].error_code) == 0:
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"no coordinator for {group}")
    finally:
        assert conn.transport is not None
        conn.transport.close()


async def form_group(
    host: str, port: int, group: str, topic: str, n: int, partitions_per_member: int,
    *, session_ms: int = 30_000, security: Security | None = None,
) -> list[Member]:  # fmt: skip
    """n members joined and synced into one generation, each behaving like a consumer:
    join, sync, heartbeat, and rejoin when the coordinator says a rebalance is on."""
    await find_coordinator(host, port, group, security)
    members = [
        Member(await connect(host, port, security), group, topic, i, session_ms=session_ms)
        for i in range(n)
    ]
    done = asyncio.Event()

    def formed() -> bool:
        gens = {m.generation for m in members}
        return len(gens) == 1 and all(m.assignment for m in members)

    async def run(m: Member) -> None:
        while not done.is_set():
            m.assignment = b""
            await m.join()
            if not await m.sync(partitions_per_member):
                continue
            while not done.is_set():
                if formed():
                    done.set()
                    return
                if await m.heartbeat() != 0:
                    break
                await asyncio.sleep(0.01)

    await asyncio.gather(*(run(m) for m in members))
    return members


def now() -> float:
    return time.perf_counter()
