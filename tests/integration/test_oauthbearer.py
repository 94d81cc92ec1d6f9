"""OAUTHBEARER with real clients, against an issuer whose keys are a JWKS file.

Each client library brings its own OAUTHBEARER code: kafka-python (a token provider),
aiokafka (an async one), librdkafka (confluent-kafka's oauth_cb), the Java client (Kafka's
file token retriever) and kgroups' own member (KGROUPS_SASL_TOKEN_FILE). The coordinator
verifies each token (signature, issuer, audience, expiry), takes its subject as the
principal, ends the session when the token expires (KIP-368: clients re-authenticate with a
fresh token on the same connection), and refuses a bad token saying why. The Kubernetes
API server as the issuer (its own keys, TokenReview) is tests/e2e/test_serviceaccount_tokens.py.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, PolicyViolationError
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.structs import OffsetAndMetadata

from tests.integration.conftest import FAST
from tests.integration.harness import (
    PYTHON,
    ROOT,
    Coordinator,
    Member,
    keeps_assignment,
    no_overlap_per_generation,
    wait_converged,
    wait_until,
)
from tests.pki import Pki
from tests.tokens import Issuer

ISSUER = Issuer(iss="https://issuer.kgroups.test")
SUB = "system:serviceaccount:shop:billing"


class Tokens(AbstractTokenProvider):
    """kafka-python asks for a token at every (re-)authentication."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.handed = 0

    def token(self) -> str:
        self.handed += 1
        return str(self.make())


def jwks_coordinator(
    tmp: Path, *extra: str, listeners: tuple[str, ...] = ("SASL_PLAINTEXT",)
) -> Coordinator:
    (tmp / "jwks.json").write_text(json.dumps(ISSUER.jwks()))
    return Coordinator(
        tmp / "data", *FAST,
        "--sasl-mechanisms", "OAUTHBEARER", "--oauthbearer-jwks", str(tmp / "jwks.json"),
        "--oauthbearer-issuer", ISSUER.iss, "--oauthbearer-audience", "kgroups",
        "--reload-interval", "0.2", *extra,
        listeners=listeners,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Coordinator]:
    """SASL_PLAINTEXT and SASL_SSL (a server certificate from `pki`)."""
    server = pki.issue_server(stem="oauthbearer-server")
    coord = jwks_coordinator(
        tmp_path_factory.mktemp("oauthbearer"), "--tls-cert", str(server.cert),
        "--tls-key", str(server.key), listeners=("SASL_PLAINTEXT", "SASL_SSL"),
    )  # fmt: skip
    coord.start()
    yield coord
    coord.kill()


def config(coord: Coordinator, tokens: Tokens) -> dict[str, Any]:
    return {"bootstrap_servers": coord.address("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": tokens, "request_timeout_ms": 10_000}  # fmt: skip


def create_topic(coord: Coordinator, partitions: int = 2) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    a = KafkaAdminClient(**config(coord, Tokens(lambda: ISSUER.token("ops"))))
    try:
        a.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        a.close()
    return topic


def test_kafka_python_joins_and_commits_as_the_tokens_subject(coordinator: Coordinator) -> None:
    topic, group = create_topic(coordinator), f"g-{uuid.uuid4().hex[:8]}"
    c = KafkaConsumer(group_id=group, enable_auto_commit=False,
                      **config(coordinator, Tokens(lambda: ISSUER.token(SUB))))  # fmt: skip
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(timeout_ms=200) is not None and len(c.assignment()) == 2, 30,
                   "an assignment", poll=0)  # fmt: skip
        tps = c.assignment()
        c.commit({tp: OffsetAndMetadata(5, "", -1) for tp in tps})
        assert {c.committed(tp) for tp in tps} == {5}
    finally:
        c.close()
    assert f"authenticated as User:{SUB} (OAUTHBEARER)" in coordinator.log()


REFUSED = {
    "wrong audience": (lambda: ISSUER.token(SUB, "https://kubernetes.default.svc"),
                       "invalid token: audience"),
    "expired": (lambda: ISSUER.token(SUB, now=time.time() - 3600), "invalid token: the token expired"),
    "another issuer's key": (lambda: Issuer(iss=ISSUER.iss).token(SUB),
                             "invalid token: signed with an unknown key"),
    "forged with our key id": (lambda: Issuer(kid=ISSUER.kid, iss=ISSUER.iss).token(SUB),
                               "invalid token: the signature does not verify"),
    "another issuer": (lambda: Issuer(ISSUER.key, ISSUER.kid, "https://evil.test").token(SUB),
                       "invalid token: issuer"),
    "not a JWT": (lambda: "not-a-jwt", "invalid token: not a JWT"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_bad_token_is_refused_saying_why(
    coordinator: Coordinator, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's exchange: a JSON error challenge, the client's 0x01, then
    SASL_AUTHENTICATION_FAILED; kafka-python shows the coordinator's reason."""
    make, reason = REFUSED[case]
    tokens = Tokens(make)
    with pytest.raises(KafkaError):
        KafkaAdminClient(**config(coordinator, tokens), bootstrap_timeout_ms=3000)
    assert tokens.handed >= 1
    assert reason in caplog.text, caplog.text
    assert f"SASL authentication failed: Authentication failed: {reason}" in coordinator.log()


def test_every_client_joins_one_group_with_a_token_file(
    coordinator: Coordinator, pki: Pki, members: list[Member], tmp_path: Path
) -> None:
    """kgroups, kafka-python, aiokafka, librdkafka and the Java client read the same kind
    of token file a projected ServiceAccount token is and, over TLS (SASL_SSL, each
    trusting the CA with its own TLS code), split a topic exactly once."""
    topic = create_topic(coordinator, partitions=8)
    partitions = {(topic, p) for p in range(8)}
    group = f"g-{uuid.uuid4().hex[:8]}"
    for client in ("kgroups", "kafka-python", "aiokafka", "confluent", "java"):
        token_file = tmp_path / f"{client}.token"
        token_file.write_text(ISSUER.token(f"system:serviceaccount:shop:{client}"))
        env = {"KGROUPS_SECURITY_PROTOCOL": "SASL_SSL", "KGROUPS_SSL_CA_FILE": str(pki.ca),
               "KGROUPS_SASL_MECHANISM": "OAUTHBEARER", "KGROUPS_SASL_TOKEN_FILE": str(token_file)}  # fmt: skip
        members.append(Member(client, coordinator.address("SASL_SSL"), group, [topic],
                              client_id=client, session_timeout_ms=6000, env=env))  # fmt: skip
    wait_converged(members, partitions, 90)
    members[0].close()
    wait_converged(members[1:], partitions, 60)
    no_overlap_per_generation(members)
    log = coordinator.log()
    for client in ("kgroups", "kafka-python", "aiokafka", "confluent", "java"):
        assert f"authenticated as User:system:serviceaccount:shop:{client} (OAUTHBEARER)" in log


def test_a_session_lasts_as_long_as_its_token_and_members_renew_it(
    coordinator: Coordinator,
) -> None:
    """Tokens valid for 4 s: the session ends with the token, kafka-python
    re-authenticates with a fresh one on the same connection (KIP-368) and its
    generation never moves; a client that kept its old token would be closed."""
    lifetime = 4.0
    topic, group = create_topic(coordinator), f"g-{uuid.uuid4().hex[:8]}"
    tokens = Tokens(lambda: ISSUER.token(SUB, lifetime_s=lifetime))
    before = coordinator.log().count(f"authenticated as User:{SUB} (OAUTHBEARER) again")
    c = KafkaConsumer(group_id=group, enable_auto_commit=False, session_timeout_ms=6000,
                      heartbeat_interval_ms=500, **config(coordinator, tokens))  # fmt: skip
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(timeout_ms=200) is not None and len(c.assignment()) == 2, 30,
                   "an assignment", poll=0)  # fmt: skip
        keeps_assignment(c, 3 * lifetime)
    finally:
        c.close()
    log = coordinator.log()
    assert log.count(f"authenticated as User:{SUB} (OAUTHBEARER) again") - before >= 2
    assert "expired; it did not re-authenticate" not in log


def test_a_rotated_key_set_applies_to_the_next_authentication(tmp_path: Path) -> None:
    coord = jwks_coordinator(tmp_path)
    coord.start()
    try:
        old_tokens = Tokens(lambda: ISSUER.token(SUB))
        KafkaAdminClient(**config(coord, old_tokens)).close()
        rotated = Issuer(iss=ISSUER.iss)
        (tmp_path / "jwks.json").write_text(json.dumps(rotated.jwks()))
        wait_until(lambda: "reloaded" in coord.log(), 10, "the key set to reload")
        with pytest.raises(KafkaError):
            KafkaAdminClient(**config(coord, old_tokens), bootstrap_timeout_ms=3000)
        KafkaAdminClient(**config(coord, Tokens(lambda: rotated.token(SUB)))).close()
    finally:
        coord.kill()


def test_offering_oauthbearer_needs_an_audience_and_a_readable_key_set(tmp_path: Path) -> None:
    base = [PYTHON, "-m", "kgroups", "coordinator", "--listen", "SASL_PLAINTEXT://127.0.0.1:0",
            "--data-dir", str(tmp_path / "data"), "--sasl-mechanisms", "OAUTHBEARER"]  # fmt: skip
    for extra, why in (
        (["--oauthbearer-jwks", str(tmp_path / "missing.json")], "missing.json"),
        (["--oauthbearer-audience", ""], "at least one audience"),
    ):
        run = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60,
                             cwd=ROOT, check=False)  # fmt: skip
        assert run.returncode != 0
        assert why in run.stdout + run.stderr


def test_a_principal_creates_at_most_its_share_of_groups(tmp_path: Path) -> None:
    """--max-groups-per-principal: billing's third new group is refused with
    POLICY_VIOLATION, which kafka-python raises from poll; another principal, and
    billing joining an existing group, are not affected."""
    coord = jwks_coordinator(tmp_path, "--max-groups-per-principal", "2")
    coord.start()
    try:
        topic = create_topic(coord)

        def poll_in(group: str, subject: str) -> None:
            c = KafkaConsumer(group_id=group, enable_auto_commit=False,
                              **config(coord, Tokens(lambda: ISSUER.token(subject))))  # fmt: skip
            try:
                c.subscribe([topic])
                wait_until(lambda: c.poll(timeout_ms=200) is not None and c.assignment(), 30,
                           f"an assignment in {group}", poll=0)  # fmt: skip
            finally:
                c.close()

        poll_in("first", SUB)
        poll_in("second", SUB)
        c = KafkaConsumer(group_id="third", enable_auto_commit=False,
                          **config(coord, Tokens(lambda: ISSUER.token(SUB))))  # fmt: skip
        try:
            c.subscribe([topic])
            with pytest.raises(PolicyViolationError):
                wait_until(lambda: c.poll(timeout_ms=200) and False, 30, "POLICY_VIOLATION", poll=0)
        finally:
            c.close()
        poll_in("third", "system:serviceaccount:shop:ops")
        poll_in("first", SUB)
    finally:
        coord.kill()


def test_kgroups_member_rereads_its_token_file_and_keeps_its_generation(
    coordinator: Coordinator, members: list[Member], tmp_path: Path
) -> None:
    """A projected token is rewritten by the kubelet before it expires: kgroups' member
    reads the file at every re-authentication (KIP-368, at 85-95% of the session), so
    with 10-second tokens rewritten every second it re-authenticates again and again on
    the same connection and is never assigned anew. (With 4-second tokens the margin was
    0.2-0.6 s, and a loaded machine's member once re-authenticated after its session.)"""
    subject = f"system:serviceaccount:shop:renewing-{uuid.uuid4().hex[:6]}"
    token_file = tmp_path / "token"
    token_file.write_text(ISSUER.token(subject, lifetime_s=10))
    stop = threading.Event()

    def kubelet() -> None:
        while not stop.wait(1.0):
            tmp = tmp_path / "token.new"
            tmp.write_text(ISSUER.token(subject, lifetime_s=10))
            tmp.replace(token_file)

    topic = create_topic(coordinator)
    env = {"KGROUPS_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KGROUPS_SASL_MECHANISM": "OAUTHBEARER",
           "KGROUPS_SASL_TOKEN_FILE": str(token_file)}  # fmt: skip
    renewer = threading.Thread(target=kubelet, daemon=True)
    renewer.start()
    try:
        member = Member("kgroups", coordinator.address("SASL_PLAINTEXT"), f"g-{subject[-6:]}",
                        [topic], client_id="renewing", session_timeout_ms=6000, env=env)  # fmt: skip
        members.append(member)
        member.wait_event("assigned", timeout=30)
        time.sleep(20)
        assert [e for e in member.events if e["event"] == "assigned"][1:] == []
        assert not [e for e in member.events if e["event"] in ("lost", "failed")]
    finally:
        stop.set()
        renewer.join()
    again = coordinator.log().count(f"authenticated as User:{subject} (OAUTHBEARER) again")
    assert again >= 2, again
    assert f"SASL session of User:{subject} expired" not in coordinator.log()
