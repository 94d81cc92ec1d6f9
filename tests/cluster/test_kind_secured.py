"""Issue 15 on a kind cluster: the chart installed secured (examples/k8s/secured/values.yaml:
one SASL_PLAINTEXT listener, OAUTHBEARER with ServiceAccount tokens and TokenReview, RBAC
authorization, the operator authenticating with its own token) and the billing team's
example applied as is (examples/k8s/secured/billing.yaml: a Role granting its workers
exactly join and commit on group billing and consume on topic orders).

Real pods with real projected tokens: the workers join and stay; the operator reports the
group through the secured coordinator; a pod whose ServiceAccount has no RoleBinding is
refused and never joins; a pod presenting the API server's own token (another audience)
cannot authenticate. Runs after test_kind.py, which uninstalls its release at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.kind import KindCluster, holds, ready, wait_for
from tests.integration.harness import ROOT

SECURED = ROOT / "examples" / "k8s" / "secured"
CHART = ROOT / "charts" / "kgroups"
NS = "shop"
PARTITIONS = 4  # billing.yaml's Topic


def k(cluster: KindCluster, *args: str, input: str | None = None) -> str:
    return cluster.kubectl("-n", NS, *args, input=input).stdout


def billing(cluster: KindCluster) -> dict[str, Any]:
    got = cluster.kubectl("-n", NS, "get", "cg", "billing", "-o", "json", check=False)
    return dict(json.loads(got.stdout).get("status") or {}) if got.returncode == 0 else {}


def settled(cluster: KindCluster, members: int) -> dict[str, Any] | None:
    s = billing(cluster)
    ok = (
        s.get("state") == "Stable"
        and s.get("memberCount") == members
        and (s.get("partitions") or {}).get("summary") == f"{PARTITIONS}/{PARTITIONS}"
        and ready(s).get("status") == "True"
    )
    return s if ok else None


def coordinator_log(cluster: KindCluster) -> str:
    return k(cluster, "logs", "kgroups-coordinator-0", "--tail=2000")


@pytest.fixture(scope="module")
def secured(cluster: KindCluster) -> Iterator[KindCluster]:
    cluster.helm(
        "install", "kgroups", str(CHART), "--namespace", NS, "--create-namespace",
        "-f", str(SECURED / "values.yaml"), "--wait", "--timeout", "5m",
    )  # fmt: skip
    k(cluster, "apply", "-f", str(SECURED / "billing.yaml"))
    try:
        yield cluster
    finally:
        cluster.helm("uninstall", "kgroups", "--namespace", NS, "--wait", "--timeout", "3m")
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def worker(name: str, account: str, token: dict[str, Any]) -> str:
    """billing.yaml's worker Deployment under another name, ServiceAccount and token."""
    docs = list(yaml.safe_load_all((SECURED / "billing.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["metadata"] = {"name": name, "labels": {"app": name}}
    spec = deployment["spec"]
    spec["replicas"] = 1
    spec["selector"]["matchLabels"] = {"app": name}
    spec["template"]["metadata"]["labels"] = {"app": name}
    pod = spec["template"]["spec"]
    pod["serviceAccountName"] = account
    pod.update(token)
    account_doc = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}
    return yaml.safe_dump_all([account_doc, deployment])


def test_the_billing_workers_join_with_their_tokens_and_stay(secured: KindCluster) -> None:
    status = wait_for(lambda: settled(secured, 2), 300, "billing Stable with both workers")
    generation = status["generation"]
    holds(lambda: settled(secured, 2) and billing(secured)["generation"] == generation, 20,
          "billing Stable, same generation")  # fmt: skip
    log = coordinator_log(secured)
    assert f"authenticated as User:system:serviceaccount:{NS}:billing-worker (OAUTHBEARER)" in log
    # The operator reached the secured coordinator as its own ServiceAccount.
    assert f"User:system:serviceaccount:{NS}:kgroups-operator (OAUTHBEARER)" in log


def test_a_workload_without_a_rolebinding_is_refused_and_never_joins(
    secured: KindCluster,
) -> None:
    before = wait_for(lambda: settled(secured, 2), 300, "billing Stable with both workers")
    k(secured, "apply", "-f", "-", input=worker("intruder", "intruder", {}))
    try:
        wait_for(lambda: "refused" in coordinator_log(secured)
                 and f"(User:system:serviceaccount:{NS}:intruder) refused" in coordinator_log(secured),
                 180, "the intruder refused", poll=3)  # fmt: skip
        holds(lambda: settled(secured, 2) and billing(secured)["generation"] == before["generation"],
              15, "billing untouched by the intruder")  # fmt: skip
    finally:
        k(secured, "delete", "deployment", "intruder", "--ignore-not-found")


def test_a_token_for_another_audience_does_not_authenticate(secured: KindCluster) -> None:
    """The API server's own token (audience: the API server), which every pod may have,
    must not work here."""
    token = {"automountServiceAccountToken": True, "volumes": []}
    manifest = worker("wrong-audience", "wrong-audience", token)
    manifest = manifest.replace("/var/run/secrets/kgroups/token",
                                "/var/run/secrets/kubernetes.io/serviceaccount/token")  # fmt: skip
    docs = list(yaml.safe_load_all(manifest))
    docs[1]["spec"]["template"]["spec"]["containers"][0].pop("volumeMounts")
    k(secured, "apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:
        wait_for(lambda: "invalid token: audience" in coordinator_log(secured), 180,
                 "the API server's token refused", poll=3)  # fmt: skip
        assert settled(secured, 2)
    finally:
        k(secured, "delete", "deployment", "wrong-audience", "--ignore-not-found")
