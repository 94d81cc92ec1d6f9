"""The Helm chart: linted, rendered, accepted by a real API server (server-side dry run),
and its RBAC proven sufficient by running the operator as its service account."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import ControlPlane, Operator, condition
from tests.integration.harness import ROOT, Coordinator, Member, wait_until

CHART = ROOT / "charts" / "kgroups"
EXAMPLES = ROOT / "examples" / "k8s"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def helm(cp: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(cp.helm), *args], capture_output=True, text=True, timeout=60,
                            check=False)  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(cp: ControlPlane, release: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    out = helm(cp, "template", release, str(CHART), "--namespace", namespace, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def test_the_chart_lints_and_renders_what_it_promises(controlplane: ControlPlane) -> None:
    helm(controlplane, "lint", "--strict", str(CHART))
    docs = render(controlplane, "kg", "kgroups")
    assert kinds(docs) == [
        "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
        "PodDisruptionBudget", "Role", "RoleBinding", "RoleBinding", "Service", "Service",
        "ServiceAccount",
        "StatefulSet",
    ]  # fmt: skip
    by_kind = {d["kind"]: d for d in docs}
    sts = by_kind["StatefulSet"]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "1Gi"
    }
    for workload in (sts, by_kind["Deployment"]):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"] == {"drop": ["ALL"]}
    args = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--coordinator=kg-kgroups-coordinator.kgroups.svc:9092" in args
    assert "--namespace=kgroups" in args
    # ServiceMonitor only where the Prometheus Operator's API exists
    with_prometheus = render(controlplane, "kg", "kgroups", "--api-versions",
                             "monitoring.coreos.com/v1/ServiceMonitor")  # fmt: skip
    assert "ServiceMonitor" in kinds(with_prometheus)
    # cluster-wide: a ClusterRoleBinding instead of RoleBindings
    wide = render(controlplane, "kg", "kgroups", "--set", "operator.allNamespaces=true",
                  "--set", "networkPolicy.enabled=true")  # fmt: skip
    assert kinds(wide).count("ClusterRoleBinding") == 2
    # the only RoleBinding left is the operator's own, for Events about itself
    [own] = [d for d in wide if d["kind"] == "RoleBinding"]
    assert own["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                              "name": "kg-kgroups-operator-self"}  # fmt: skip
    assert "NetworkPolicy" in kinds(wide)


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "coordinator.port=0"],
        ["--set", "image.pullPolicy=Sometimes"],
        ["--set", "operator.watchNamespaces[0]=Not_A_Namespace"],
        ["--set", "unknownKey=1"],
    ],
    ids=["port", "pull-policy", "namespace", "unknown-key"],
)
def test_bad_values_are_refused_by_the_schema(
    controlplane: ControlPlane, values: list[str]
) -> None:
    result = helm(controlplane, "template", "kg", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "operator.allNamespaces=true", "--set", "networkPolicy.enabled=true"],
        ["--set", "operator.watchNamespaces={team-a,team-b}"],
    ],
    ids=["default", "cluster-wide", "two-namespaces"],
)
def test_rendered_manifests_pass_a_server_side_dry_run(
    controlplane: ControlPlane, namespace: str, values: list[str]
) -> None:
    for extra in ("team-a", "team-b"):
        if not controlplane.exists("namespace", extra, namespace="default"):
            controlplane.kubectl("create", "namespace", extra, check=False)
    manifest = helm(controlplane, "template", "kg", str(CHART), "--namespace", namespace,
                    "--include-crds", *values).stdout  # fmt: skip
    # No -n: every namespaced object names its namespace (RoleBindings go to team-a/b).
    result = controlplane.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest)
    assert "statefulset.apps/kg-kgroups-coordinator created (server dry run)" in result.stdout


@pytest.fixture
def chart_operator(
    controlplane: ControlPlane, tmp_path: Path
) -> Iterator[tuple[Operator, Coordinator, str]]:
    """The coordinator, and the operator running as the chart's service account with only
    the chart's RBAC applied (for real) - no system:masters anywhere. Names are short: the
    user is the certificate's CN, which holds at most 64 characters."""
    cp = controlplane
    ns = f"rbac-{secrets.token_hex(3)}"
    cp.kubectl("create", "namespace", ns)
    docs = render(cp, "kg", ns, "--set", "serviceAccount.name=kgop")
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    # Cluster-scoped names are per release; suffix them per test so tests cannot share them.
    cluster_scoped = [d for d in rbac if d["kind"].startswith("Cluster")]
    for d in rbac:
        if d["kind"].startswith("Cluster"):
            d["metadata"]["name"] += f"-{ns}"
        if d.get("roleRef", {}).get("kind", "").startswith("Cluster"):
            d["roleRef"]["name"] += f"-{ns}"
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    kubeconfig = cp.user(f"system:serviceaccount:{ns}:kgop", "system:serviceaccounts")
    coord = Coordinator(tmp_path / "data", "--log-level", "INFO")
    coord.start()
    op = Operator(kubeconfig, coord.bootstrap, tmp_path / "operator.log", "--namespace", ns)
    try:
        yield op, coord, ns
    finally:
        op.stop()
        coord.kill()
        for d in cluster_scoped:
            cp.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], check=False)
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_chart_rbac_is_enough_to_run_the_operator(
    controlplane: ControlPlane,
    chart_operator: tuple[Operator, Coordinator, str],
    members: list[Member],
) -> None:
    cp = controlplane
    operator, coordinator, ns = chart_operator
    user = operator.kubeconfig

    # The operator's identity can do its job and nothing else.
    def can(*args: str, namespace: str = ns) -> str:
        result = cp.kubectl("auth", "can-i", *args, "-n", namespace, kubeconfig=user, check=False)
        return result.stdout.strip()

    assert can("patch", "consumergroups.kgroups.io/status") == "yes"
    assert can("list", "secrets") == "no"
    assert can("delete", "consumergroups.kgroups.io") == "no"
    assert can("list", "consumergroups.kgroups.io", namespace="default") == "no"

    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "consumergroup.yaml"))
    wait_until(lambda: (condition(cp.get("cg", "billing", ns), "Ready") or {}).get("reason")
               == "NoMembers", 30, "the group registered", poll=0.2)  # fmt: skip
    members.append(Member("kgroups", coordinator.bootstrap, "billing", ["orders"],
                          client_id="m0", session_timeout_ms=4000))  # fmt: skip
    wait_until(lambda: (condition(cp.get("cg", "billing", ns), "Ready") or {}).get("status")
               == "True", 40, "Ready with one member", poll=0.2)  # fmt: skip
    events = cp.kubectl("get", "events", "-n", ns, "--field-selector", "reason=Rebalanced").stdout
    assert "generation" in events
    members[0].close()
    cp.kubectl("delete", "cg", "billing", "-n", ns, "--wait=false")
    wait_until(lambda: not cp.exists("cg", "billing", ns), 40, "the group deleted")
    log = operator.log()
    assert "Forbidden" not in log and "403" not in log, log[-3000:]


def test_the_alerting_rules_render_only_with_the_prometheus_operator(
    controlplane: ControlPlane, tmp_path: Path
) -> None:
    """A PrometheusRule only where its API exists; its rules are dashboards/alerts.yaml (and
    promtool accepts them as rendered); values adjust the rules; one ConfigMap carries
    every dashboard."""
    import json
    import re

    from tests.observability.prom import promtool

    api = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
    assert "PrometheusRule" not in kinds(render(controlplane, "kg", "kgroups"))
    off = render(controlplane, "kg", "kgroups", *api, "--set", "prometheusRule.enabled=false")
    assert "PrometheusRule" not in kinds(off)
    docs = render(controlplane, "kg", "kgroups", *api, "--set", "prometheusRule.labels.release=kps")
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    source = yaml.safe_load((ROOT / "dashboards" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    # The source's coordinator selector matches the Service the ServiceMonitor scrapes (its
    # job label is the Service's name), whatever the release is called.
    [svc] = [d for d in docs if d["kind"] == "Service" and "headless" not in d["metadata"]["name"]]
    assert re.fullmatch(".*kgroups.*coordinator.*", svc["metadata"]["name"])

    tuned = render(controlplane, "kg", "kgroups", *api,
                   "--set", 'prometheusRule.coordinatorSelector=job="kg-kgroups-coordinator"',
                   "--set", "prometheusRule.rules.KGroupsRebalanceStorm.for=30m",
                   "--set", "prometheusRule.rules.KGroupsRebalanceStorm.severity=info",
                   "--set", "prometheusRule.rules.KGroupsCommitsFailing.enabled=false")  # fmt: skip
    [rule] = [d for d in tuned if d["kind"] == "PrometheusRule"]
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "KGroupsCommitsFailing" not in rules and len(rules) == 4
    assert (rules["KGroupsRebalanceStorm"]["for"], rules["KGroupsRebalanceStorm"]["labels"]) == (
        "30m", {"severity": "info"})  # fmt: skip
    assert 'up{job="kg-kgroups-coordinator"} == 0' in rules["KGroupsCoordinatorDown"]["expr"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = promtool("check", "rules", str(tmp_path / "rules.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr

    [dashboards] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in dashboards["data"].items()} == {
        p.name: json.loads(p.read_text()) for p in (ROOT / "dashboards").glob("*.json")
    }
