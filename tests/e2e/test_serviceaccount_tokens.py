"""ServiceAccount tokens as OAUTHBEARER credentials, on a real API server.

A workload authenticates to the coordinator with the token Kubernetes gives its
ServiceAccount (`kubectl create token SA --audience kgroups`, or a projected volume in a
pod). The coordinator verifies it with the keys the API server publishes
(/openid/v1/jwks, the issuer from /.well-known/openid-configuration) and the principal
is the ServiceAccount, which is what RBAC then authorizes. Tokens meant for another
audience, signed by another cluster, or expired are refused saying why; with
--oauthbearer-review a deleted ServiceAccount's token is refused before it expires.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import GroupAuthorizationFailedError, KafkaError
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.structs import OffsetAndMetadata

from tests.e2e.kube import ControlPlane
from tests.e2e.test_rbac_authorization import GROUP, TOPIC, apply, binding, role, sa
from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, polled_assignment, refused_while_polling
from tests.tokens import Issuer
from tests.waits import within

REVIEW_CACHE_S = 1.0
API_SERVER_TOKEN_CACHE_S = 10.0


class Token(AbstractTokenProvider):
    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token


def create_token(cp: ControlPlane, namespace: str, account: str, *audience: str) -> str:
    args = [a for aud in audience for a in ("--audience", aud)]
    out = cp.kubectl("create", "token", account, "-n", namespace, "--duration", "10m", *args)
    return out.stdout.strip()


def config(coord: Coordinator, token: str) -> dict[str, Any]:
    return {"bootstrap_servers": coord.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Token(token),
            "request_timeout_ms": 10_000}  # fmt: skip


def token_coordinator(cp: ControlPlane, tmp: Path, *extra: str) -> Coordinator:
    return Coordinator(
        tmp / "data", *FAST,
        "--sasl-mechanisms", "OAUTHBEARER", "--oauthbearer-audience", "kgroups",
        "--kubeconfig", str(cp.kubeconfig), *extra,
        listeners=("SASL_PLAINTEXT",),
    )  # fmt: skip


@pytest.fixture
def accounts(controlplane: ControlPlane, namespace: str) -> dict[str, str]:
    """ServiceAccounts billing and ops, and a kgroups-audience token for each."""
    for name in ("billing", "ops"):
        controlplane.kubectl("create", "serviceaccount", name, "-n", namespace)
    return {n: create_token(controlplane, namespace, n, "kgroups") for n in ("billing", "ops")}


@pytest.fixture
def coordinator(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[Coordinator]:
    coord = token_coordinator(controlplane, tmp_path, "--rbac-namespace", namespace,
                              "--rbac-cache-ttl", "1")  # fmt: skip
    apply(controlplane, namespace, role("ops", [
        {"apiGroups": ["kgroups.io"], "resources": ["topics"], "verbs": ["create", "get"]},
    ]), binding("ops", "ops", namespace), role("billing-member", [
        {"apiGroups": ["kgroups.io"], "resources": ["consumergroups"], "resourceNames": [GROUP],
         "verbs": ["join", "commit", "get"]},
        {"apiGroups": ["kgroups.io"], "resources": ["topics"], "resourceNames": [TOPIC],
         "verbs": ["get", "consume"]},
    ]), binding("billing", "billing-member", namespace))  # fmt: skip
    coord.start()
    yield coord
    coord.kill()


def refused(coord: Coordinator, token: str, caplog: pytest.LogCaptureFixture) -> str:
    """Why kafka-python was refused (the coordinator's message)."""
    caplog.clear()
    with pytest.raises(KafkaError):
        KafkaAdminClient(**config(coord, token), bootstrap_timeout_ms=3000)
    return caplog.text


def test_a_serviceaccount_token_is_the_serviceaccount_to_rbac(
    controlplane: ControlPlane, namespace: str, accounts: dict[str, str], coordinator: Coordinator
) -> None:
    """billing's token joins group billing and commits (its RoleBinding); ops's token
    authenticates too, but ops may not join: RBAC sees the ServiceAccount."""
    admin = KafkaAdminClient(**config(coordinator, accounts["ops"]))
    try:
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
    finally:
        admin.close()
    c = KafkaConsumer(group_id=GROUP, enable_auto_commit=False,
                      **config(coordinator, accounts["billing"]))  # fmt: skip
    try:
        c.subscribe([TOPIC])
        tps = polled_assignment(c)
        assert len(tps) == 2
        c.commit({tp: OffsetAndMetadata(3, "", -1) for tp in tps})
        assert {c.committed(tp) for tp in tps} == {3}
    finally:
        c.close()
    c = KafkaConsumer(group_id=GROUP, enable_auto_commit=False,
                      **config(coordinator, accounts["ops"]))  # fmt: skip
    try:
        c.subscribe([TOPIC])
        refused_while_polling(c, GroupAuthorizationFailedError, 5)
    finally:
        c.close()
    log = coordinator.log()
    assert f"authenticated as User:{sa(namespace, 'billing')} (OAUTHBEARER)" in log
    assert f"(User:{sa(namespace, 'ops')}) refused" in log


def cluster_signer(cp: ControlPlane) -> Issuer:
    """The control plane's own service-account signing key, as the API server uses it
    (its key id and issuer from what the API server publishes)."""
    issuer = json.loads(cp.kubectl("get", "--raw", "/.well-known/openid-configuration").stdout)
    jwks = json.loads(cp.kubectl("get", "--raw", "/openid/v1/jwks").stdout)
    return Issuer.from_pem(cp.dir / "pki" / "sa.key", jwks["keys"][0]["kid"], issuer["issuer"])


def test_tokens_not_meant_for_the_coordinator_are_refused_saying_why(
    controlplane: ControlPlane, namespace: str, accounts: dict[str, str],
    coordinator: Coordinator, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    subject = sa(namespace, "billing")
    # The API server's own audience: a token any pod has, which must not work here.
    default = create_token(controlplane, namespace, "billing")
    assert "invalid token: audience" in refused(coordinator, default, caplog)
    # Another cluster's signer with this cluster's issuer name.
    signer = cluster_signer(controlplane)
    stranger = Issuer(iss=signer.iss).token(subject)
    assert "signed with an unknown key" in refused(coordinator, stranger, caplog)
    # This cluster's real key, but expired an hour ago (TokenRequest will not make one).
    expired = signer.token(subject, now=time.time() - 7200, lifetime_s=3600)
    assert "the token expired" in refused(coordinator, expired, caplog)
    # The same key, in date: accepted, so the two refusals above were for the reasons given.
    KafkaAdminClient(**config(coordinator, signer.token(subject))).close()
    assert f"authenticated as User:{subject}" in coordinator.log()


def test_token_review_refuses_a_deleted_serviceaccounts_token_before_it_expires(
    controlplane: ControlPlane, namespace: str, accounts: dict[str, str], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A JWT stays valid until it expires; the API server knows the ServiceAccount is
    gone. Without --oauthbearer-review the token keeps working (documented); with it,
    the next authentication after the review cache expires is refused."""
    reviewed = token_coordinator(controlplane, tmp_path / "reviewed", "--oauthbearer-review",
                                 "--oauthbearer-review-cache", str(REVIEW_CACHE_S))  # fmt: skip
    local = token_coordinator(controlplane, tmp_path / "local")
    (tmp_path / "reviewed").mkdir()
    (tmp_path / "local").mkdir()
    reviewed.start()
    local.start()
    try:
        token = accounts["billing"]
        for coord in (reviewed, local):
            KafkaAdminClient(**config(coord, token)).close()
        controlplane.kubectl("delete", "serviceaccount", "billing", "-n", namespace)
        # The API server itself remembers a token it accepted for 10 s (its token cache),
        # then ours for REVIEW_CACHE_S: refused within both, and stays refused.
        deadline = time.monotonic() + within(API_SERVER_TOKEN_CACHE_S + REVIEW_CACHE_S + 20)
        while True:
            try:
                KafkaAdminClient(**config(reviewed, token), bootstrap_timeout_ms=3000).close()
            except KafkaError:
                break
            assert time.monotonic() < deadline, "a deleted ServiceAccount's token still works"
            time.sleep(1)
        why = refused(reviewed, token, caplog)
        assert "the API server does not accept the token" in why, why
        KafkaAdminClient(**config(local, token)).close()  # verified by signature alone
    finally:
        reviewed.kill()
        local.kill()
