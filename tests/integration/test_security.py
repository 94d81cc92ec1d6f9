"""A secured coordinator with real clients: TLS, mutual TLS, SASL PLAIN and SCRAM, KIP-368
re-authentication, and rotated certificates and credentials.

The coordinator listens on SASL_SSL, SASL_PLAINTEXT and SSL (client certificates
required) and on no PLAINTEXT listener at all, as a secured deployment would. The clients
are kafka-python 3.0.12 and confluent-kafka (librdkafka) with their own SASL and TLS code.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from kgroups.admin import Admin
from kgroups.protocol.build import build
from kgroups.protocol.client import CoordinatorUnavailable, encode_request
from kgroups.security.client import ClientSecurity
from tests.integration.conftest import FAST
from tests.integration.harness import (
    PYTHON,
    Coordinator,
    Member,
    keeps_assignment,
    no_overlap_per_generation,
    wait_converged,
    wait_until,
)
from tests.pki import Pki
from tests.waits import within

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
MAX_REAUTH_MS = 3000


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def write_users(path: Path, users: dict[str, str]) -> None:
    """alice's password as it is; bob's as `kgroups credentials hash` prints it (SCRAM
    hashes only: the file holds no password of his, and PLAIN works for him all the same)."""
    entries: dict[str, Any] = {u: {"password": p} for u, p in users.items() if u != "bob"}
    if "bob" in users:
        hashed = subprocess.run([PYTHON, "-m", "kgroups", "credentials", "hash", "bob"],
                                input=users["bob"] + "\n", capture_output=True, text=True,
                                check=True, timeout=60).stdout  # fmt: skip
        assert users["bob"] not in hashed
        entries["bob"] = yaml.safe_load(hashed)["users"]["bob"]
    path.write_text(yaml.safe_dump({"users": entries}))


def secured_coordinator(tmp: Path, pki: Pki, *extra: str) -> Coordinator:
    """Its own server certificate (tmp/server.crt, .key), users.yaml in `tmp`."""
    server = pki.issue_server(stem=f"server-{tmp.name}")
    (tmp / "server.crt").write_bytes(server.cert.read_bytes())
    (tmp / "server.key").write_bytes(server.key.read_bytes())
    users = tmp / "users.yaml"
    write_users(users, USERS)
    return Coordinator(
        tmp / "data", *FAST,
        "--tls-cert", str(tmp / "server.crt"), "--tls-key", str(tmp / "server.key"),
        "--tls-client-ca", str(pki.ca), "--tls-client-auth", "required",
        "--sasl-mechanisms", ",".join(MECHANISMS), "--credentials", str(users),
        "--max-reauth-ms", str(MAX_REAUTH_MS), *extra,
        listeners=("SASL_SSL", "SASL_PLAINTEXT", "SSL"),
    )  # fmt: skip


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Coordinator]:
    coord = secured_coordinator(tmp_path_factory.mktemp("secured"), pki)
    coord.start()
    yield coord
    coord.kill()


def sasl_config(coord: Coordinator, pki: Pki, mechanism: str = "PLAIN", user: str = "alice",
                password: str | None = None, protocol: str = "SASL_SSL") -> dict[str, Any]:  # fmt: skip
    """kafka-python's settings for one user over one listener."""
    config: dict[str, Any] = {
        "bootstrap_servers": coord.address(protocol), "security_protocol": protocol,
        "sasl_mechanism": mechanism, "sasl_plain_username": user,
        "sasl_plain_password": USERS[user] if password is None else password,
        "request_timeout_ms": 10_000,
    }  # fmt: skip
    if protocol == "SASL_SSL":
        config["ssl_cafile"] = str(pki.ca)
    return config


def admin(config: dict[str, Any]) -> KafkaAdminClient:
    return KafkaAdminClient(**config, client_id="security-admin")


def refused(config: dict[str, Any]) -> None:
    """An admin client with `config` cannot connect (it stops trying after 3 s, not
    kafka-python's 30)."""
    with pytest.raises(KafkaError):
        admin({**config, "bootstrap_timeout_ms": 3000})


def create_topic(coord: Coordinator, pki: Pki, partitions: int = 2) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    a = admin(sasl_config(coord, pki))
    try:
        a.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        a.close()
    return topic


def groups_of(coord: Coordinator, pki: Pki) -> set[str]:
    a = admin(sasl_config(coord, pki, "SCRAM-SHA-512", "bob"))
    try:
        return {g["group_id"] for g in a.list_groups()}
    finally:
        a.close()


def consumer(config: dict[str, Any], group: str, topic: str) -> KafkaConsumer:
    c = KafkaConsumer(group_id=group, enable_auto_commit=False, session_timeout_ms=6000,
                      heartbeat_interval_ms=500, **config)  # fmt: skip
    c.subscribe([topic])
    return c


def try_to_join(config: dict[str, Any], group: str, topic: str) -> None:
    c = consumer(config, group, topic)
    try:
        c.poll(timeout_ms=3000)
    finally:
        c.close()


def wait_assigned(c: KafkaConsumer, partitions: int, timeout: float = 30) -> set[TopicPartition]:
    def assigned() -> set[TopicPartition] | None:
        c.poll(timeout_ms=200)
        got = c.assignment()
        return got if len(got) == partitions else None

    result: set[TopicPartition] = wait_until(assigned, timeout, "an assignment", poll=0)
    return result


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_joins_and_commits_with_each_mechanism(
    coordinator: Coordinator, pki: Pki, mechanism: str
) -> None:
    topic, group = create_topic(coordinator, pki), f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(sasl_config(coordinator, pki, mechanism), group, topic)
    try:
        tps = wait_assigned(c, 2)
        c.commit({tp: OffsetAndMetadata(7, "", -1) for tp in tps})
    finally:
        c.close()
    # Another user on another listener reads what alice committed.
    other = consumer(sasl_config(coordinator, pki, "SCRAM-SHA-512", "bob", protocol="SASL_PLAINTEXT"),
                     group, topic)  # fmt: skip
    try:
        assert {other.committed(tp) for tp in tps} == {7}
    finally:
        other.close()
    assert f"authenticated as User:alice ({mechanism})" in coordinator.log()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_refused_and_changes_nothing(
    coordinator: Coordinator, pki: Pki, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = create_topic(coordinator, pki), f"g-{uuid.uuid4().hex[:8]}"
    config = {**sasl_config(coordinator, pki, mechanism, password="guess"),
              "bootstrap_timeout_ms": 5000}  # fmt: skip
    with pytest.raises(KafkaError):
        try_to_join(config, group, topic)
    # kafka-python retries its bootstrap, then gives up; what it says on the way is
    # Kafka's error and the coordinator's message.
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "Authentication failed" in caplog.text
    assert group not in groups_of(coordinator, pki)
    assert "SASL authentication failed: Authentication failed" in coordinator.log()


def test_an_unknown_user_gets_the_same_answer_as_a_wrong_password(
    coordinator: Coordinator, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    messages = []
    for user, password in (("alice", "guess"), ("mallory", "guess")):
        config = sasl_config(coordinator, pki, "PLAIN", "alice", password)
        config["sasl_plain_username"] = user
        caplog.clear()
        with pytest.raises(KafkaError):
            admin({**config, "bootstrap_timeout_ms": 3000})
        refusals = [r.getMessage() for r in caplog.records if "Error 58" in r.getMessage()]
        assert refusals, caplog.text
        messages.append(refusals[0].split("Error 58]", 1)[1].replace(user, "USER"))
    assert messages[0] == messages[1]


def raw(port: int, body: Any, *, tls: ssl.SSLContext | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="localhost")
    sock.sendall(encode_request(body, 1))
    return sock


def test_a_request_before_authenticating_closes_the_connection_unanswered(
    coordinator: Coordinator,
) -> None:
    from kio.schema.join_group.v9.request import JoinGroupRequest
    from kio.schema.metadata.v12.request import MetadataRequest

    for body in (
        build(MetadataRequest, {"topics": None}),
        build(
            JoinGroupRequest,
            {
                "group_id": "sneaky",
                "session_timeout": 6000,
                "rebalance_timeout": 6000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [],
            },
        ),
    ):
        with raw(coordinator.ports["SASL_PLAINTEXT"], body) as sock:
            assert sock.recv(4096) == b""
    assert "Unexpected Kafka request of type metadata during SASL handshake" in coordinator.log()


def test_the_ssl_listener_takes_only_clients_with_a_certificate_from_its_ca(
    coordinator: Coordinator, pki: Pki, tmp_path: Path
) -> None:
    client = pki.issue_client("billing-worker", "acme")
    base = {"bootstrap_servers": coordinator.address("SSL"), "security_protocol": "SSL",
            "ssl_cafile": str(pki.ca), "request_timeout_ms": 10_000}  # fmt: skip
    a = admin({**base, "ssl_certfile": str(client.cert), "ssl_keyfile": str(client.key)})
    a.close()
    refused(base)  # no certificate
    stranger = Pki(tmp_path / "other-ca").issue_client("billing-worker", "acme")
    refused({**base, "ssl_certfile": str(stranger.cert), "ssl_keyfile": str(stranger.key)})


def test_librdkafka_joins_with_scram_over_tls(coordinator: Coordinator, pki: Pki) -> None:
    topic, group = create_topic(coordinator, pki, partitions=3), f"g-{uuid.uuid4().hex[:8]}"
    assigned: list[Any] = []
    c = confluent_kafka.Consumer({
        "bootstrap.servers": coordinator.address("SASL_SSL"), "group.id": group,
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "bob", "sasl.password": USERS["bob"], "ssl.ca.location": str(pki.ca),
        "enable.auto.commit": False, "session.timeout.ms": 6000,
    })  # fmt: skip
    try:
        c.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))

        def joined() -> bool:
            c.poll(0.2)
            return len(assigned) == 3

        wait_until(joined, 30, "librdkafka's assignment", poll=0)
        c.commit(offsets=[confluent_kafka.TopicPartition(topic, p.partition, 11)
                          for p in assigned], asynchronous=False)  # fmt: skip
        assert {p.offset for p in c.committed(assigned, timeout=10)} == {11}
    finally:
        c.close()
    c = confluent_kafka.Consumer({
        "bootstrap.servers": coordinator.address("SASL_SSL"), "group.id": "x",
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "bob", "sasl.password": "guess", "ssl.ca.location": str(pki.ca),
    })  # fmt: skip
    try:
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            c.list_topics(timeout=5)
    finally:
        c.close()
    assert "Authentication failed" in str(refused.value) or "_TRANSPORT" in str(refused.value)


def test_members_reauthenticate_before_their_session_ends_and_stay_in_the_group(
    coordinator: Coordinator, pki: Pki
) -> None:
    """KIP-368: the coordinator gives each session MAX_REAUTH_MS; kafka-python
    re-authenticates on the same connection, and the member's generation never moves.
    carol connects in this test only: another test's idle connection, closed when its
    own session ends, is not this member's."""
    topic, group = create_topic(coordinator, pki), f"g-{uuid.uuid4().hex[:8]}"
    # kafka-python re-authenticates at 85-95% of the session once nothing is in flight:
    # a fetch held for the default 500 ms could make it late on a loaded machine
    config = {**sasl_config(coordinator, pki, "SCRAM-SHA-256", "carol"), "fetch_max_wait_ms": 100}
    c = consumer(config, group, topic)
    try:
        wait_assigned(c, 2)
        keeps_assignment(c, 3 * MAX_REAUTH_MS / 1000)
    finally:
        c.close()
    assert coordinator.log().count("authenticated as User:carol (SCRAM-SHA-256) again") >= 2
    assert "User:carol expired; it did not re-authenticate" not in coordinator.log()


def test_rotated_credentials_apply_to_the_next_authentication(tmp_path: Path, pki: Pki) -> None:
    coord = secured_coordinator(tmp_path, pki, "--reload-interval", "0.2")
    coord.start()
    try:
        config = sasl_config(coord, pki, "SCRAM-SHA-512")
        admin(config).close()
        write_users(tmp_path / "users.yaml", {**USERS, "alice": "rotated"})
        wait_until(lambda: "reloaded" in coord.log(), 10, "the credentials to reload")
        refused(config)
        admin({**config, "sasl_plain_password": "rotated"}).close()
        # A broken file keeps the last good credentials.
        (tmp_path / "users.yaml").write_text("users: [not, a, mapping")
        wait_until(lambda: "cannot be used" in coord.log(), 10, "the broken file to be seen")
        admin({**config, "sasl_plain_password": "rotated"}).close()
    finally:
        coord.kill()


def test_a_renewed_certificate_is_served_to_new_connections(tmp_path: Path, pki: Pki) -> None:
    """kgroups' own admin client holds one connection across the renewal; new connections
    get the new certificate, which only the new CA vouches for."""
    coord = secured_coordinator(tmp_path, pki, "--reload-interval", "0.2")
    coord.start()
    renewed_ca = Pki(tmp_path / "renewed", "kgroups-renewed-ca")

    def security(ca: Path) -> ClientSecurity:
        return ClientSecurity("SASL_SSL", ca_file=ca, mechanism="SCRAM-SHA-512",
                              username="bob", password=USERS["bob"])  # fmt: skip

    async def scenario() -> None:
        async with Admin("127.0.0.1", coord.ports["SASL_SSL"], security=security(pki.ca),
                         timeout=10) as held:  # fmt: skip
            await held.topics()
            fresh = renewed_ca.issue_server()
            (tmp_path / "server.key").write_bytes(fresh.key.read_bytes())
            (tmp_path / "server.crt").write_bytes(fresh.cert.read_bytes())
            deadline = time.monotonic() + within(10)
            while coord.log().count("reloaded") < 2:
                assert time.monotonic() < deadline, "the certificate did not reload"
                await asyncio.sleep(0.1)
            async with Admin("127.0.0.1", coord.ports["SASL_SSL"],
                             security=security(renewed_ca.ca), timeout=10) as renewed:  # fmt: skip
                await renewed.topics()
            with pytest.raises(CoordinatorUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                async with Admin("127.0.0.1", coord.ports["SASL_SSL"],
                                 security=security(pki.ca), timeout=5) as old:  # fmt: skip
                    await old.topics()
            await held.topics()  # the connection opened before goes on
            assert held._conn.connected

    try:
        asyncio.run(scenario())
    finally:
        coord.kill()


def member_env(pki: Pki, tmp: Path, mechanism: str, user: str) -> dict[str, str]:
    """KGROUPS_* settings for a member (the password in a file, as from a Secret)."""
    secret = tmp / f"{user}-password"
    secret.write_text(USERS[user] + "\n")
    return {"KGROUPS_SECURITY_PROTOCOL": "SASL_SSL", "KGROUPS_SSL_CA_FILE": str(pki.ca),
            "KGROUPS_SASL_MECHANISM": mechanism, "KGROUPS_SASL_USERNAME": user,
            "KGROUPS_SASL_PASSWORD_FILE": str(secret)}  # fmt: skip


def test_every_client_shares_one_secured_group(
    coordinator: Coordinator, pki: Pki, members: list[Member], tmp_path: Path
) -> None:
    """kgroups' member, kafka-python, aiokafka, librdkafka and the Java client, each with
    its own SASL and TLS code and a different mechanism (Java: a PEM truststore and JAAS),
    split one topic exactly once per generation."""
    topic = create_topic(coordinator, pki, partitions=8)
    partitions = {(topic, p) for p in range(8)}
    group = f"g-{uuid.uuid4().hex[:8]}"
    plan = [("kgroups", "SCRAM-SHA-512", "alice"), ("kafka-python", "PLAIN", "bob"),
            ("aiokafka", "SCRAM-SHA-256", "alice"), ("confluent", "SCRAM-SHA-512", "bob"),
            ("java", "SCRAM-SHA-512", "alice")]  # fmt: skip
    for client, mechanism, user in plan:
        members.append(Member(client, coordinator.address("SASL_SSL"), group, [topic],
                              client_id=f"{client}-{user}", session_timeout_ms=6000,
                              env=member_env(pki, tmp_path, mechanism, user)))  # fmt: skip
    wait_converged(members, partitions, 90)
    members[0].close()
    wait_converged(members[1:], partitions, 60)
    no_overlap_per_generation(members)
