"""Admin operations against a coordinator (or any Kafka broker) over the Kafka protocol.

Topics are managed with the standard admin APIs, so the coordinator stays a plain Kafka
endpoint: the CLI, the operator and any Kafka admin client do the same thing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_topics.v7 import request as ct
from kio.schema.delete_topics.v6 import request as dt
from kio.schema.metadata.v12 import request as md

from kgroups.protocol.build import build
from kgroups.protocol.client import KafkaConnection
from kgroups.protocol.errors import ErrorCode

TIMEOUT_MS = 30_000


class AdminError(RuntimeError):
    """An admin request failed with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(f"{code.name}: {message or 'no message'}")
        self.code = code


@asynccontextmanager
async def _connect(host: str, port: int) -> AsyncIterator[KafkaConnection]:
    conn = await KafkaConnection.open(host, port, client_id="kgroups-admin")
    try:
        yield conn
    finally:
        await conn.close()


def _check(code: ErrorCode, message: str | None) -> None:
    if code is not ErrorCode.none:
        raise AdminError(code, message)


async def create_topic(host: str, port: int, name: str, partitions: int) -> None:
    req = build(
        ct.CreateTopicsRequest,
        {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1}],
            "timeout": TIMEOUT_MS,
        },
    )
    async with _connect(host, port) as conn:
        response = await conn.request(req)
    result = response.topics[0]
    _check(result.error_code, result.error_message)


async def create_partitions(host: str, port: int, name: str, partitions: int) -> None:
    req = build(
        cp.CreatePartitionsRequest,
        {
            "topics": [{"name": name, "count": partitions, "assignments": None}],
            "timeout": TIMEOUT_MS,
        },
    )
    async with _connect(host, port) as conn:
        response = await conn.request(req)
    result = response.results[0]
    _check(result.error_code, result.error_message)


async def delete_topic(host: str, port: int, name: str) -> None:
    req = build(dt.DeleteTopicsRequest, {"topics": [{"name": name}], "timeout": TIMEOUT_MS})
    async with _connect(host, port) as conn:
        response = await conn.request(req)
    result = response.responses[0]
    _check(result.error_code, result.error_message)


async def list_topics(host: str, port: int) -> list[tuple[str, int]]:
    req = build(md.MetadataRequest, {"topics": None})
    async with _connect(host, port) as conn:
        response = await conn.request(req)
    return sorted((t.name or "", len(t.partitions)) for t in response.topics)
