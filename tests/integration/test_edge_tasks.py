"""The coordinator's edge keeps every background task and knows what a crash in one
means (issue 24): a crash in work one connection waits on (its authentication, its
authorization) answers that connection's request with a refusal and closes it, logged,
while every other connection is served; a crash in work the server depends on stops the
server, as a bug in a handler does, instead of leaving it half alive.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v3 import request as av3

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.limits import Limits
from kgroups.coordinator.listeners import ListenerSettings, SecurityProtocol, SecuritySettings
from kgroups.coordinator.server import CoordinatorServer, ServerSettings
from kgroups.protocol.build import build
from kgroups.protocol.client import ConnectionClosed, KafkaConnection
from kgroups.protocol.errors import ErrorCode
from kgroups.security import credentials
from kgroups.security.actions import Action
from kgroups.security.client import ClientSecurity, SaslAuthenticationError
from tests.integration.test_server_pipeline import commit

HOST = "127.0.0.1"
API_VERSIONS = build(av3.ApiVersionsRequest, {"client_software_name": "t",
                                               "client_software_version": "1"})  # fmt: skip


class CrashingAuthorizer:
    """An authorizer with a bug: it never knows at once, and asking raises."""

    def __init__(self) -> None:
        self.asked = 0

    def denied_now(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                   reset: bool) -> frozenset[Action] | None:  # fmt: skip
        return None

    async def denied(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                     reset: bool) -> frozenset[Action]:  # fmt: skip
        self.asked += 1
        raise RuntimeError("a bug in the authorizer")

    def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[CoordinatorServer]:
    users = tmp_path / "users.yaml"
    users.write_text("users:\n  alice: {password: a-secret}\n")
    settings = ServerSettings(
        data_dir=tmp_path,
        coordinator=CoordinatorConfig(group_initial_rebalance_delay_ms=0),
        listeners=(ListenerSettings(SecurityProtocol.PLAINTEXT, HOST, 0),
                   ListenerSettings(SecurityProtocol.SASL_PLAINTEXT, HOST, 0)),
        security=SecuritySettings(sasl_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                                  credentials_file=users),
    )  # fmt: skip
    srv = CoordinatorServer(settings)
    yield srv
    if srv.failure is None and not srv.stopped:
        await srv.stop()


async def closed(conn: KafkaConnection) -> bool:
    try:
        await asyncio.wait_for(conn.request(API_VERSIONS), 5)
    except ConnectionClosed:
        return True
    return False


async def test_a_crash_while_authorizing_refuses_that_request_and_closes_its_connection(
    server: CoordinatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    authorizer = CrashingAuthorizer()
    server.authorizer = authorizer
    await server.start()
    port = server.ports["PLAINTEXT"]
    victim = await KafkaConnection.open(HOST, port)
    other = await KafkaConnection.open(HOST, port)
    try:
        answer: Any = await asyncio.wait_for(victim.request(commit("g", 5)), 5)
        error = answer.topics[0].partitions[0].error_code
        assert error is ErrorCode.group_authorization_failed
        assert authorizer.asked == 1
        assert await closed(victim)
        assert "authorize crashed" in caplog.text and "a bug in the authorizer" in caplog.text
        # Everyone else is served, and the coordinator did not stop.
        assert (await other.request(API_VERSIONS)).error_code is ErrorCode.none
        assert server.failure is None and not server.stopped
    finally:
        await victim.close()
        await other.close()


async def test_a_crash_while_authenticating_refuses_and_closes_that_connection_only(
    server: CoordinatorServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    await server.start()
    port = server.ports["SASL_PLAINTEXT"]
    alice = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism="PLAIN", username="alice",
                           password="a-secret")  # fmt: skip
    # Before the bug: alice gets in.
    ok = await KafkaConnection.open(HOST, port, authenticate=alice.authenticator())
    await ok.close()

    def derivation_bug(*_: Any) -> bytes:
        raise MemoryError("the key derivation failed")

    monkeypatch.setattr(credentials, "salted_password", derivation_bug)
    with pytest.raises((SaslAuthenticationError, ConnectionClosed)):
        await asyncio.wait_for(
            KafkaConnection.open(HOST, port, authenticate=alice.authenticator()), 10
        )
    assert "authenticate crashed" in caplog.text and "refusing its authentication" in caplog.text
    plain = await KafkaConnection.open(HOST, server.ports["PLAINTEXT"])
    try:
        assert (await plain.request(API_VERSIONS)).error_code is ErrorCode.none
    finally:
        await plain.close()
    assert server.failure is None


async def test_a_crash_in_a_task_the_server_depends_on_stops_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def sweeper_bug() -> None:
        raise RuntimeError("a bug in the idle sweeper")

    server = CoordinatorServer(ServerSettings(
        port=0, data_dir=tmp_path, limits=Limits(connections_max_idle_ms=400)
    ))  # fmt: skip
    monkeypatch.setattr(server, "close_idle", sweeper_bug)
    await server.start()
    with pytest.raises(RuntimeError, match="idle sweeper"):
        await asyncio.wait_for(server.serve_forever(), 30)
    assert "a bug in coordinator:idle-sweeper, stopping the coordinator" in caplog.text


async def test_logins_that_succeed_never_wait_however_many_steps_they_take(
    server: CoordinatorServer,
) -> None:
    """The failed-authentication budget (10 attempts, one more a second) counts exchanges,
    and a success gives its token back: 25 SCRAM logins (two SaslAuthenticate steps each)
    from one address in a few seconds are all answered at once. Before: each SCRAM login
    kept one token, the budget ran dry after ten, and every login of every client behind
    the address waited a second (re-authenticating clients lost their sessions)."""
    from prometheus_client import generate_latest

    await server.start()
    port = server.ports["SASL_PLAINTEXT"]
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        alice = ClientSecurity(protocol="SASL_PLAINTEXT", mechanism=mechanism,
                               username="alice", password="a-secret")  # fmt: skip
        for _ in range(25 if mechanism == "SCRAM-SHA-512" else 5):
            conn = await asyncio.wait_for(
                KafkaConnection.open(HOST, port, authenticate=alice.authenticator()), 10
            )
            await conn.close()
    scraped = generate_latest(server.metrics.registry).decode()
    throttled = [line for line in scraped.splitlines()
                 if line.startswith("kgroups_requests_throttled_total") and "SaslAuthenticate" in line]  # fmt: skip
    assert all(line.endswith(" 0.0") for line in throttled), throttled
