"""The Helm chart: linted, rendered, accepted by a real API server (server-side dry run),
and its RBAC proven sufficient by running the operator as its service account. Secured
(ci/secured-values.yaml): listeners, TLS, SASL and RBAC authorization rendered into the
coordinator's and operator's pods, contradictions refused before anything is installed.
ServiceAccount tokens (ci/oauthbearer-values.yaml): OAUTHBEARER without any Secret, the
operator authenticating with a projected token."""

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
SECURED = CHART / "ci" / "secured-values.yaml"
OAUTHBEARER = CHART / "ci" / "oauthbearer-values.yaml"
REPLICAS = CHART / "ci" / "replicas-values.yaml"
CERT_MANAGER = ("--api-versions", "cert-manager.io/v1")
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


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def pod(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [workload] = [d for d in docs if d["kind"] == kind]
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def named(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


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
    assert "--bootstrap-server=kg-kgroups-coordinator.kgroups.svc:9092" in args
    assert "--namespace=kgroups" in args
    # No security by default: one PLAINTEXT listener in the arguments charts had before
    # listeners (an upgrade does not restart the coordinator), no token, no secrets.
    coordinator = sts["spec"]["template"]["spec"]
    assert coordinator["containers"][0]["args"][:3] == [
        "coordinator", "--listen=0.0.0.0:9092",
        "--advertise=kg-kgroups-coordinator.kgroups.svc:9092",
    ]  # fmt: skip
    assert not [a for a in coordinator["containers"][0]["args"] if a.startswith(
        ("--tls", "--sasl", "--credentials", "--rbac", "--acl"))]  # fmt: skip
    assert coordinator["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in coordinator
    assert [v["name"] for v in coordinator["volumes"]] == ["tmp"]
    assert not [e for e in by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
                ["env"] if e["name"].startswith("KGROUPS_")]  # fmt: skip
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
        ["--set-json", 'coordinator.listeners=[{"protocol":"TLS","port":9093}]'],
        ["--set-json", 'coordinator.listeners=[{"protocol":"SSL"}]'],
        ["--set-json", "coordinator.listeners=[]"],
        ["--set", "coordinator.tls.clientAuth=optional"],
        ["--set", "coordinator.sasl.mechanisms={GSSAPI}"],
        ["--set", "coordinator.authorization.mode=opa"],
        ["--set", "operator.coordinatorSecurity.securityProtocol=SASL_TLS"],
        ["--set", "operator.coordinatorSecurity.sasl.tokenExpirationSeconds=60"],
        ["--set", "coordinator.database.url=postgresql://kgroups:secret@db/kgroups"],
        ["--set", "coordinator.database.sslMode=always"],
        ["--set", "coordinator.replicas=0"],
    ],
    ids=[
        "port",
        "pull-policy",
        "namespace",
        "unknown-key",
        "listener-protocol",
        "listener-without-port",
        "no-listener",
        "client-auth",
        "sasl-mechanism",
        "authorization-mode",
        "operator-protocol",
        "token-lifetime",
        "password-in-database-url",
        "ssl-mode",
        "no-replicas",
    ],
)
def test_bad_values_are_refused_by_the_schema(
    controlplane: ControlPlane, values: list[str]
) -> None:
    result = helm(controlplane, "template", "kg", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr


def test_the_secured_values_lint_and_render_tls_sasl_and_rbac(controlplane: ControlPlane) -> None:
    """ci/secured-values.yaml: SSL and SASL_SSL listeners only, each a port of the pod and
    both Services and advertised with its own port; the TLS Secret and the users file
    mounted read-only; RBAC authorization with the coordinator's own ServiceAccount, its
    token and a ClusterRole for SubjectAccessReviews; the operator on the SASL_SSL listener
    as its ServiceAccount, trusting only the Secret's ca.crt, its password a file."""
    helm(controlplane, "lint", "--strict", str(CHART), "-f", str(SECURED))
    docs = render(controlplane, "kg", "kgroups", "-f", str(SECURED))
    host = "kg-kgroups-coordinator.kgroups.svc"

    coordinator = pod(docs, "StatefulSet")
    [container] = coordinator["containers"]
    args = container["args"]
    assert [a for a in args if a.startswith(("--listen", "--advertise"))] == [
        "--listen=SSL://0.0.0.0:9093", f"--advertise=SSL={host}:9093",
        "--listen=SASL_SSL://0.0.0.0:9094", f"--advertise=SASL_SSL={host}:9094",
    ]  # fmt: skip
    assert [a for a in args if a.startswith(("--tls", "--sasl", "--credentials", "--max-reauth",
                                             "--rbac", "--acl"))] == [
        "--tls-cert=/etc/kgroups/tls/tls.crt", "--tls-key=/etc/kgroups/tls/tls.key",
        "--tls-client-ca=/etc/kgroups/tls/ca.crt", "--tls-client-auth=requested",
        "--sasl-mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        "--credentials=/etc/kgroups/sasl/users.yaml", "--max-reauth-ms=3600000",
        "--rbac-namespace=kgroups", "--rbac-cache-ttl=30",
    ]  # fmt: skip
    assert container["ports"] == [
        {"name": "kafka-ssl", "containerPort": 9093},
        {"name": "kafka-sasl-ssl", "containerPort": 9094},
        {"name": "metrics", "containerPort": 9404},
    ]
    mounts = named(container["volumeMounts"])
    # Directories, not subPaths: the kubelet rewrites them in place and the coordinator
    # reloads them.
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/kgroups/tls", "readOnly": True}
    assert mounts["credentials"]["readOnly"] is True and "subPath" not in mounts["credentials"]
    volumes = named(coordinator["volumes"])
    assert volumes["tls"]["secret"] == {"secretName": "kgroups-coordinator-tls",
                                        "defaultMode": 0o440}  # fmt: skip
    assert volumes["credentials"]["secret"]["secretName"] == "kgroups-users"
    assert volumes["credentials"]["secret"]["items"] == [{"key": "users.yaml",
                                                          "path": "users.yaml"}]  # fmt: skip

    for name in ("kg-kgroups-coordinator", "kg-kgroups-coordinator-headless"):
        ports = one(docs, "Service", name)["spec"]["ports"]
        assert [(p["name"], p["port"], p["targetPort"]) for p in ports if p["name"] != "metrics"
                ] == [("kafka-ssl", 9093, "kafka-ssl"),
                      ("kafka-sasl-ssl", 9094, "kafka-sasl-ssl")]  # fmt: skip
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 9093, "protocol": "TCP"},
                                                     {"port": 9094, "protocol": "TCP"}]  # fmt: skip

    # RBAC authorization: the coordinator's own identity, able to ask and nothing else.
    assert coordinator["serviceAccountName"] == "kg-kgroups-coordinator"
    assert coordinator["automountServiceAccountToken"] is True
    assert one(docs, "ServiceAccount", "kg-kgroups-coordinator")
    role = one(docs, "ClusterRole", "kg-kgroups-coordinator")
    assert role["rules"] == [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
         "verbs": ["create"]},
        # which ConsumerGroup or Topic declares a Kafka name (--rbac-by-resource)
        {"apiGroups": ["kgroups.io"], "resources": ["consumergroups", "topics"],
         "verbs": ["list", "watch"]},
        # and no TokenReviews: nothing here offers OAUTHBEARER
    ]  # fmt: skip
    binding = one(docs, "ClusterRoleBinding", "kg-kgroups-coordinator")
    assert binding["roleRef"]["name"] == "kg-kgroups-coordinator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kg-kgroups-coordinator",
                                    "namespace": "kgroups"}]  # fmt: skip
    # The operator is a super user of the coordinator (Kafka's super.users): it manages
    # ConsumerGroups and Topics in every namespace, with no Kubernetes verbs granted for it.
    [coordinator_container] = coordinator["containers"]
    assert ("--super-users=User:system:serviceaccount:kgroups:kg-kgroups-operator"
            in coordinator_container["args"])  # fmt: skip
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Role", "kg-kgroups-operator-kafka") not in names

    operator = pod(docs, "Deployment")
    [op] = operator["containers"]
    assert f"--bootstrap-server={host}:9094" in op["args"]
    env = {e["name"]: e.get("value") for e in op["env"]}
    assert {k: v for k, v in env.items() if k.startswith("KGROUPS_")} == {
        "KGROUPS_SECURITY_PROTOCOL": "SASL_SSL",
        "KGROUPS_SSL_CA_FILE": "/etc/kgroups/coordinator-ca/ca.crt",
        "KGROUPS_SASL_MECHANISM": "SCRAM-SHA-512",
        "KGROUPS_SASL_USERNAME": "system:serviceaccount:kgroups:kg-kgroups-operator",
        "KGROUPS_SASL_PASSWORD_FILE": "/etc/kgroups/sasl/password",
    }
    assert "KGROUPS_SASL_PASSWORD" not in env
    op_volumes = named(operator["volumes"])
    # The CA of the coordinator's Secret, never its private key.
    assert op_volumes["coordinator-ca"]["secret"] == {
        "secretName": "kgroups-coordinator-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert op_volumes["sasl-password"]["secret"]["items"] == [{"key": "password",
                                                              "path": "password"}]  # fmt: skip
    assert {m["mountPath"]: m["readOnly"] for m in op["volumeMounts"] if m["name"] != "tmp"} == {
        "/etc/kgroups/coordinator-ca": True,
        "/etc/kgroups/sasl": True,
    }
    assert "automountServiceAccountToken" not in operator  # kopf needs its token, as before


def test_the_coordinator_gets_a_token_and_sar_rights_only_with_rbac_authorization(
    controlplane: ControlPlane,
) -> None:
    acl = render(controlplane, "kg", "kgroups",
                 "--set", "coordinator.authorization.mode=acl",
                 "--set", "coordinator.authorization.acl.configMap.name=kgroups-acls")  # fmt: skip
    for docs in (render(controlplane, "kg", "kgroups"), acl):
        coordinator = pod(docs, "StatefulSet")
        assert coordinator["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in coordinator
        names = {(d["kind"], d["metadata"]["name"]) for d in docs}
        assert ("ClusterRole", "kg-kgroups-coordinator") not in names
        assert ("ServiceAccount", "kg-kgroups-coordinator") not in names
        assert ("Role", "kg-kgroups-operator-kafka") not in names
    [container] = pod(acl, "StatefulSet")["containers"]
    assert "--acl-file=/etc/kgroups/acl/acls.yaml" in container["args"]
    assert named(pod(acl, "StatefulSet")["volumes"])["acl"]["configMap"] == {
        "name": "kgroups-acls",
        "items": [{"key": "acls.yaml", "path": "acls.yaml"}],
    }
    assert named(container["volumeMounts"])["acl"]["readOnly"] is True

    # RBAC in another namespace, without the chart's RBAC objects: the identity and its
    # token stay (the ClusterRole is then the cluster admin's to grant).
    elsewhere = render(controlplane, "kg", "kgroups", "-f", str(SECURED),
                       "--set", "coordinator.authorization.rbac.namespace=kafka-acls")  # fmt: skip
    assert "--rbac-namespace=kafka-acls" in pod(elsewhere, "StatefulSet")["containers"][0]["args"]
    args = pod(elsewhere, "StatefulSet")["containers"][0]["args"]
    assert "--super-users=User:system:serviceaccount:kgroups:kg-kgroups-operator" in args
    extra = render(controlplane, "kg", "kgroups", "-f", str(SECURED),
                   "--set", "coordinator.authorization.operatorSuperUser=false",
                   "--set", "coordinator.authorization.superUsers={User:admin}")  # fmt: skip
    assert "--super-users=User:admin" in pod(extra, "StatefulSet")["containers"][0]["args"]
    bare = render(controlplane, "kg", "kgroups", "-f", str(SECURED), "--set", "rbac.create=false")
    assert pod(bare, "StatefulSet")["automountServiceAccountToken"] is True
    assert not [d for d in bare if d["kind"] in ("ClusterRole", "Role", "RoleBinding")]


def test_the_oauthbearer_values_lint_and_render_serviceaccount_tokens(
    controlplane: ControlPlane,
) -> None:
    """ci/oauthbearer-values.yaml: the coordinator checks tokens for its audience and asks
    TokenReviews, with no users file; its own ServiceAccount and token, and a ClusterRole
    that adds TokenReviews to RBAC's needs; the operator authenticates with a projected
    token for that audience, no password anywhere."""
    helm(controlplane, "lint", "--strict", str(CHART), "-f", str(OAUTHBEARER))
    docs = render(controlplane, "kg", "kgroups", "-f", str(OAUTHBEARER))

    coordinator = pod(docs, "StatefulSet")
    [container] = coordinator["containers"]
    assert [a for a in container["args"] if a.startswith(("--sasl", "--credentials",
                                                          "--oauthbearer"))] == [
        "--sasl-mechanisms=OAUTHBEARER", "--oauthbearer-audience=kgroups",
        "--oauthbearer-review", "--oauthbearer-review-cache=30",
    ]  # fmt: skip
    assert "credentials" not in named(coordinator["volumes"])
    assert "credentials" not in named(container["volumeMounts"])
    assert coordinator["serviceAccountName"] == "kg-kgroups-coordinator"
    assert coordinator["automountServiceAccountToken"] is True
    assert one(docs, "ServiceAccount", "kg-kgroups-coordinator")
    rules = one(docs, "ClusterRole", "kg-kgroups-coordinator")["rules"]
    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
            "verbs": ["create"]} in rules  # fmt: skip

    operator = pod(docs, "Deployment")
    [op] = operator["containers"]
    env = {e["name"]: e.get("value") for e in op["env"]}
    assert {k: v for k, v in env.items() if k.startswith("KGROUPS_")} == {
        "KGROUPS_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KGROUPS_SASL_MECHANISM": "OAUTHBEARER",
        "KGROUPS_SASL_TOKEN_FILE": "/var/run/secrets/kgroups/token",
    }
    volumes = named(operator["volumes"])
    assert "sasl-password" not in volumes
    assert volumes["sasl-token"]["projected"]["sources"] == [
        {"serviceAccountToken": {"audience": "kgroups", "expirationSeconds": 3600,
                                 "path": "token"}},
    ]  # fmt: skip
    assert named(op["volumeMounts"])["sasl-token"] == {
        "name": "sasl-token", "mountPath": "/var/run/secrets/kgroups", "readOnly": True,
    }  # fmt: skip


def test_oauthbearer_alone_gives_the_coordinator_a_token_but_no_cluster_role(
    controlplane: ControlPlane,
) -> None:
    """Without review or RBAC authorization the coordinator only reads the issuer's keys,
    which every ServiceAccount may (system:service-account-issuer-discovery): its own
    identity and token, and nothing granted to it."""
    docs = render(controlplane, "kg", "kgroups", "-f", str(OAUTHBEARER),
                  "--set", "coordinator.sasl.oauthbearer.review=false",
                  "--set", "coordinator.authorization.mode=none")  # fmt: skip
    coordinator = pod(docs, "StatefulSet")
    assert coordinator["serviceAccountName"] == "kg-kgroups-coordinator"
    assert coordinator["automountServiceAccountToken"] is True
    assert one(docs, "ServiceAccount", "kg-kgroups-coordinator")
    assert not [d for d in docs if d["metadata"]["name"] == "kg-kgroups-coordinator"
                and d["kind"] in RBAC_KINDS and d["kind"] != "ServiceAccount"]  # fmt: skip
    assert not [a for a in coordinator["containers"][0]["args"]
                if a.startswith(("--oauthbearer-review", "--rbac"))]  # fmt: skip


def test_coordinator_port_still_sets_the_plaintext_listener(controlplane: ControlPlane) -> None:
    """Values written before listeners keep meaning what they meant."""
    docs = render(controlplane, "kg", "kgroups", "--set", "coordinator.port=9093")
    args = pod(docs, "StatefulSet")["containers"][0]["args"]
    assert args[1:3] == ["--listen=0.0.0.0:9093",
                         "--advertise=kg-kgroups-coordinator.kgroups.svc:9093"]  # fmt: skip
    assert one(docs, "Service", "kg-kgroups-coordinator")["spec"]["ports"][0] == {
        "name": "kafka",
        "port": 9093,
        "targetPort": "kafka",
    }
    assert "--bootstrap-server=kg-kgroups-coordinator.kgroups.svc:9093" in pod(
        docs, "Deployment")["containers"][0]["args"]  # fmt: skip
    # Beside another listener, it is still the PLAINTEXT one's port.
    both = render(controlplane, "kg", "kgroups", "--set", "coordinator.port=9093",
                  "--set-json", 'coordinator.listeners=[{"protocol":"PLAINTEXT","port":9092},'
                  '{"protocol":"SASL_PLAINTEXT","port":9095}]',
                  "--set", "coordinator.sasl.mechanisms={PLAIN}",
                  "--set", "coordinator.sasl.credentialsSecret.name=users")  # fmt: skip
    args = pod(both, "StatefulSet")["containers"][0]["args"]
    host = "kg-kgroups-coordinator.kgroups.svc"
    assert args[1:5] == [
        "--listen=PLAINTEXT://0.0.0.0:9093", f"--advertise=PLAINTEXT={host}:9093",
        "--listen=SASL_PLAINTEXT://0.0.0.0:9095", f"--advertise=SASL_PLAINTEXT={host}:9095",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            [
                "--set-json",
                'coordinator.listeners=[{"protocol":"SSL","port":9093}]',
                "--set",
                "operator.coordinatorSecurity.securityProtocol=SSL",
            ],
            "coordinator.listeners has an SSL or SASL_SSL listener: set coordinator.tls.enabled",
        ),
        (
            ["--set-json", 'coordinator.listeners=[{"protocol":"SSL","port":9093}]'],
            "securityProtocol is PLAINTEXT, and coordinator.listeners has no PLAINTEXT listener",
        ),
        (
            [
                "--set-json",
                'coordinator.listeners=[{"protocol":"PLAINTEXT","port":9092},'
                '{"protocol":"PLAINTEXT","port":9093}]',
            ],
            "two PLAINTEXT listeners",
        ),
        (
            ["--set-json", 'coordinator.listeners=[{"protocol":"PLAINTEXT","port":9404}]'],
            "port 9404 of the PLAINTEXT listener is taken by coordinator.metricsPort",
        ),
        (
            ["-f", str(SECURED), "--set", "coordinator.port=9092"],
            "coordinator.listeners has no PLAINTEXT listener: give every port",
        ),
        (
            ["-f", str(SECURED), "--set-json", "coordinator.sasl.mechanisms=[]"],
            "coordinator.listeners has a SASL listener: set coordinator.sasl.mechanisms",
        ),
        (
            ["-f", str(SECURED), "--set", "coordinator.sasl.credentialsSecret.name="],
            "PLAIN and SCRAM need coordinator.sasl.credentialsSecret.name",
        ),
        (
            ["-f", str(OAUTHBEARER), "--set", "coordinator.sasl.mechanisms={OAUTHBEARER,PLAIN}"],
            "PLAIN and SCRAM need coordinator.sasl.credentialsSecret.name",
        ),
        (
            ["-f", str(OAUTHBEARER), "--set-json", "coordinator.sasl.oauthbearer.audiences=[]"],
            "OAUTHBEARER: set coordinator.sasl.oauthbearer.audiences",
        ),
        (
            ["-f", str(SECURED), "--set", "coordinator.tls.secretName="],
            "set coordinator.tls.secretName (a kubernetes.io/tls Secret) or",
        ),
        (
            ["-f", str(SECURED), "--set", "operator.coordinatorSecurity.sasl.mechanism=PLAIN"],
            'sasl.mechanism "PLAIN" is not in coordinator.sasl.mechanisms',
        ),
        (
            [
                "-f",
                str(SECURED),
                "--set",
                "operator.coordinatorSecurity.sasl.mechanism=OAUTHBEARER",
            ],
            'sasl.mechanism "OAUTHBEARER" is not in coordinator.sasl.mechanisms',
        ),
        (
            ["-f", str(SECURED), "--set", "operator.coordinatorSecurity.sasl.passwordSecret.name="],
            "securityProtocol SASL_SSL: set operator.coordinatorSecurity.sasl.passwordSecret.name",
        ),
        (
            ["--set", "coordinator.authorization.mode=acl"],
            "set coordinator.authorization.acl.configMap.name",
        ),
        (  # what `helm upgrade --reuse-values` from a chart before listeners looks like
            ["--set", "coordinator.tls=null", "--set", "operator.coordinatorSecurity=null"],
            "coordinator.tls is missing from the values: upgrading with --reuse-values",
        ),
    ],
    ids=[
        "ssl-without-tls",
        "operator-without-listener",
        "two-listeners-one-protocol",
        "port-taken",
        "old-port-without-plaintext",
        "sasl-without-mechanisms",
        "sasl-without-users",
        "oauthbearer-and-plain-without-users",
        "oauthbearer-without-audiences",
        "tls-without-secret",
        "operator-mechanism-not-offered",
        "operator-oauthbearer-not-offered",
        "operator-without-password",
        "acl-without-configmap",
        "reused-old-values",
    ],
)
def test_contradictory_security_values_fail_naming_what_to_set(
    controlplane: ControlPlane, values: list[str], message: str
) -> None:
    result = helm(controlplane, "template", "kg", str(CHART), *values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_certificate_renders_only_where_cert_manager_serves(
    controlplane: ControlPlane,
) -> None:
    """With coordinator.tls.certManager the chart renders a Certificate for the names
    clients are given, into the Secret the pods mount; where cert-manager.io/v1 is not
    served it fails, saying what to do, rather than leave the coordinator waiting for a
    Secret nobody writes."""
    values = ("-f", str(SECURED), "--set", "coordinator.tls.secretName=",
              "--set", "coordinator.tls.certManager.enabled=true",
              "--set", "coordinator.tls.certManager.issuerRef.name=kgroups-ca",
              "--set", "coordinator.tls.certManager.issuerRef.kind=ClusterIssuer",
              "--set", "coordinator.tls.certManager.dnsNames={kgroups.example.com}")  # fmt: skip
    docs = render(controlplane, "kg", "kgroups", *values, *CERT_MANAGER)
    cert = one(docs, "Certificate", "kg-kgroups-coordinator")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["metadata"]["namespace"] == "kgroups"
    assert cert["spec"]["issuerRef"] == {"name": "kgroups-ca", "kind": "ClusterIssuer",
                                         "group": "cert-manager.io"}  # fmt: skip
    assert (cert["spec"]["duration"], cert["spec"]["renewBefore"]) == ("2160h", "360h")
    assert cert["spec"]["dnsNames"] == [
        "kg-kgroups-coordinator", "kg-kgroups-coordinator.kgroups",
        "kg-kgroups-coordinator.kgroups.svc",  # what --advertise names, so what clients check
        "kg-kgroups-coordinator-0.kg-kgroups-coordinator-headless.kgroups.svc",
        "kgroups.example.com",
    ]  # fmt: skip
    secret = cert["spec"]["secretName"]
    assert secret == "kg-kgroups-coordinator-tls"
    assert named(pod(docs, "StatefulSet")["volumes"])["tls"]["secret"]["secretName"] == secret
    ca = named(pod(docs, "Deployment")["volumes"])["coordinator-ca"]
    assert ca["secret"]["secretName"] == secret

    missing = helm(controlplane, "template", "kg", str(CHART), *values, check=False)
    assert missing.returncode != 0
    assert "the cluster does not serve cert-manager.io/v1" in missing.stderr
    # Without cert-manager enabled nothing asks for its API.
    assert "Certificate" not in kinds(render(controlplane, "kg", "kgroups", "-f", str(SECURED),
                                             *CERT_MANAGER))  # fmt: skip


# The parts of cert-manager's Certificate schema the chart relies on (its real CRD is not
# available here): enough for the API server to check kind, version, scope and those fields.
CERTIFICATE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "certificates.cert-manager.io"},
    "spec": {
        "group": "cert-manager.io",
        "scope": "Namespaced",
        "names": {"kind": "Certificate", "listKind": "CertificateList",
                  "plural": "certificates", "singular": "certificate"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "required": ["secretName", "issuerRef"],
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "secretName": {"type": "string"},
                    "duration": {"type": "string"},
                    "renewBefore": {"type": "string"},
                    "dnsNames": {"type": "array", "items": {"type": "string"}},
                    "issuerRef": {"type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string"}, "kind": {"type": "string"},
                        "group": {"type": "string"}}},
                },
            }},
        }}}],
    },
}  # fmt: skip


@pytest.fixture
def certificate_crd(controlplane: ControlPlane) -> Iterator[None]:
    controlplane.kubectl("apply", "-f", "-", input=yaml.safe_dump(CERTIFICATE_CRD))
    controlplane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                         "crd/certificates.cert-manager.io")  # fmt: skip
    yield
    controlplane.kubectl("delete", "crd", "certificates.cert-manager.io", "--wait=false",
                         check=False)  # fmt: skip


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "operator.allNamespaces=true", "--set", "networkPolicy.enabled=true"],
        ["--set", "operator.watchNamespaces={team-a,team-b}"],
        ["-f", str(SECURED)],
        [
            "-f",
            str(SECURED),
            "--set",
            "coordinator.tls.certManager.enabled=true",
            "--set",
            "coordinator.tls.certManager.issuerRef.name=kgroups-ca",
            *CERT_MANAGER,
        ],
        [
            "--set",
            "coordinator.authorization.mode=acl",
            "--set",
            "coordinator.authorization.acl.configMap.name=kgroups-acls",
        ],
        ["-f", str(OAUTHBEARER)],
        ["-f", str(REPLICAS)],
    ],
    ids=[
        "default",
        "cluster-wide",
        "two-namespaces",
        "secured",
        "secured-cert-manager",
        "acl",
        "oauthbearer",
        "replicas",
    ],
)
def test_rendered_manifests_pass_a_server_side_dry_run(
    controlplane: ControlPlane, namespace: str, values: list[str], request: pytest.FixtureRequest
) -> None:
    for extra in ("team-a", "team-b"):
        if not controlplane.exists("namespace", extra, namespace="default"):
            controlplane.kubectl("create", "namespace", extra, check=False)
    if CERT_MANAGER[1] in values:
        request.getfixturevalue("certificate_crd")
    manifest = helm(controlplane, "template", "kg", str(CHART), "--namespace", namespace,
                    "--include-crds", *values).stdout  # fmt: skip
    # No -n: every namespaced object names its namespace (RoleBindings go to team-a/b).
    result = controlplane.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest)
    assert "statefulset.apps/kg-kgroups-coordinator created (server dry run)" in result.stdout
    if CERT_MANAGER[1] in values:
        assert "certificate.cert-manager.io/kg-kgroups-coordinator created" in result.stdout


def apply_rbac(cp: ControlPlane, docs: list[dict[str, Any]], ns: str) -> list[dict[str, Any]]:
    """Apply the rendered RBAC objects for real; returns the cluster-scoped ones to delete.
    Their names are per release: suffixed per test so tests cannot share them."""
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    cluster_scoped = [d for d in rbac if d["kind"].startswith("Cluster")]
    for d in rbac:
        if d["kind"].startswith("Cluster"):
            d["metadata"]["name"] += f"-{ns}"
        if d.get("roleRef", {}).get("kind", "").startswith("Cluster"):
            d["roleRef"]["name"] += f"-{ns}"
    if rbac:
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    return cluster_scoped


def delete_kgroups_objects(cp: ControlPlane, ns: str) -> None:
    """Delete the namespace's Topics and ConsumerGroups while the operator still runs. Left
    to the namespace's deletion, the operator's finalizer keeps them, claiming their Kafka
    names cluster-wide for later tests (a coordinator with RBAC asks about the oldest
    resource declaring a name, in its namespace)."""
    cp.kubectl("delete", "topics,consumergroups", "--all", "-n", ns, "--timeout=30s",
               check=False)  # fmt: skip


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
    cluster_scoped = apply_rbac(cp, docs, ns)
    kubeconfig = cp.user(f"system:serviceaccount:{ns}:kgop", "system:serviceaccounts")
    coord = Coordinator(tmp_path / "data", "--log-level", "INFO")
    coord.start()
    op = Operator(kubeconfig, coord.bootstrap, tmp_path / "operator.log", "--namespace", ns)
    try:
        yield op, coord, ns
    finally:
        delete_kgroups_objects(cp, ns)
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


def test_with_rbac_authorization_the_chart_lets_the_operator_work_in_every_namespace(
    controlplane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The secured chart's coordinator arguments and operator environment, run for real:
    the coordinator (as its chart ServiceAccount, with only the chart's ClusterRole) asks
    the API server about each request, about the resource declaring each Kafka name, in
    that resource's namespace; the operator authenticates with SCRAM as its own
    ServiceAccount. Issue 23, finding 7: before, the chart granted the operator its Kafka
    verbs in the fallback namespace alone, so a Topic or ConsumerGroup declared anywhere
    else sat at CoordinatorUnreachable. Without super-user status the operator is refused,
    and the status says NotAuthorized (not unreachable); with the chart's default (the
    operator's identity a super user, Kafka's super.users), Topics and ConsumerGroups in
    two namespaces are created, registered and deleted through the coordinator.
    SASL_PLAINTEXT stands in for SASL_SSL (the certificates are not the question here)."""
    cp = controlplane
    ns, other = f"sec-{secrets.token_hex(3)}", f"team-{secrets.token_hex(3)}"
    for name in (ns, other):
        cp.kubectl("create", "namespace", name)
    docs = render(cp, "kg", ns, "-f", str(SECURED), "--set", "serviceAccount.name=kgop",
                  "--set", "coordinator.serviceAccount.name=kgco",
                  "--set-json", 'coordinator.listeners=[{"protocol":"SASL_PLAINTEXT","port":9095}]',
                  "--set", "coordinator.tls.enabled=false",
                  "--set", "coordinator.authorization.rbac.cacheTtlSeconds=1",
                  "--set", "operator.coordinatorSecurity.securityProtocol=SASL_PLAINTEXT",
                  "--set-json", f'operator.watchNamespaces=["{ns}","{other}"]')  # fmt: skip
    cluster_scoped = apply_rbac(cp, docs, ns)

    password = secrets.token_hex(8)
    [op_container] = pod(docs, "Deployment")["containers"]
    env = {e["name"]: e["value"] for e in op_container["env"] if e["name"].startswith("KGROUPS_")}
    users = {"users": {env["KGROUPS_SASL_USERNAME"]: {"password": password}}}
    (tmp_path / "users.yaml").write_text(yaml.safe_dump(users))
    (tmp_path / "password").write_text(password)
    # The chart's arguments and environment, with the pod's paths made local.
    local = {"/etc/kgroups/sasl/users.yaml": str(tmp_path / "users.yaml"),
             "/etc/kgroups/sasl/password": str(tmp_path / "password")}  # fmt: skip

    def localized(arg: str) -> str:
        flag, _, value = arg.partition("=")
        return f"{flag}={local[value]}" if value in local else arg

    args = [localized(a) for a in pod(docs, "StatefulSet")["containers"][0]["args"]
            if a.startswith(("--sasl", "--credentials", "--max-reauth", "--rbac",
                             "--super-users"))]  # fmt: skip
    assert f"--credentials={tmp_path / 'users.yaml'}" in args
    assert f"--rbac-namespace={ns}" in args
    supers = f"--super-users=User:system:serviceaccount:{ns}:kgop"
    assert supers in args
    coordinator_user = cp.user(f"system:serviceaccount:{ns}:kgco", "system:serviceaccounts")
    operator_user = cp.user(f"system:serviceaccount:{ns}:kgop", "system:serviceaccounts")
    for name, value in env.items():
        monkeypatch.setenv(name, local.get(value, value))

    def ready(kind: str, name: str, namespace: str) -> dict[str, Any]:
        return condition(cp.get(kind, name, namespace), "Ready") or {}

    refused_coord = Coordinator(tmp_path / "refused", *[a for a in args if a != supers],
                                "--kubeconfig", str(coordinator_user),
                                listeners=("SASL_PLAINTEXT",))  # fmt: skip
    coord = Coordinator(tmp_path / "data", *args, "--kubeconfig", str(coordinator_user),
                        listeners=("SASL_PLAINTEXT",))  # fmt: skip
    operator: Operator | None = None
    try:
        refused_coord.start()
        operator = Operator(operator_user, refused_coord.bootstrap, tmp_path / "operator.log",
                            "--namespace", ns, "--namespace", other)  # fmt: skip
        cp.kubectl("apply", "-n", other, "-f", str(EXAMPLES / "topic.yaml"))
        refused = wait_until(lambda: ready("kt", "orders", other).get("reason") == "NotAuthorized"
                             and ready("kt", "orders", other), 30, "the operator refused",
                             poll=0.2)  # fmt: skip
        assert "AUTHORIZATION" in refused["message"].upper(), refused
        operator.stop()
        refused_coord.kill()

        coord.start()
        operator = Operator(operator_user, coord.bootstrap, tmp_path / "operator2.log",
                            "--namespace", ns, "--namespace", other)  # fmt: skip
        for where in (other, ns):
            if where == ns:
                cp.kubectl("apply", "-n", ns, "-f", "-", input=(EXAMPLES / "topic.yaml")
                           .read_text().replace("name: orders", "name: invoices"))  # fmt: skip
            topic = "orders" if where == other else "invoices"
            wait_until(lambda: ready("kt", topic, where).get("status") == "True",  # noqa: B023
                       60, f"the Topic in {where} created", poll=0.5)  # fmt: skip
        cp.kubectl("apply", "-n", other, "-f", str(EXAMPLES / "consumergroup.yaml"))
        wait_until(lambda: ready("cg", "billing", other).get("reason") == "NoMembers", 30,
                   "the group registered", poll=0.2)  # fmt: skip
        cp.kubectl("delete", "cg", "billing", "-n", other, "--wait=false")
        wait_until(lambda: not cp.exists("cg", "billing", other), 40, "the group deleted")
    finally:
        if operator is not None:
            for where in (ns, other):
                delete_kgroups_objects(cp, where)
            operator.stop()
        refused_coord.kill()
        coord.kill()
        for d in cluster_scoped:
            cp.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], check=False)
        for where in (ns, other):
            cp.kubectl("delete", "namespace", where, "--wait=false", check=False)


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


def test_with_a_database_the_coordinator_is_a_set_of_replicas(controlplane: ControlPlane) -> None:
    """ci/replicas-values.yaml: three pods sharing the groups through PostgreSQL, each
    advertising its own pod name (FindCoordinator sends members to the replica owning their
    group), its replica name the pod's, no volume, the password and CA from Secrets, spread
    over nodes, one at a time disrupted; the operator still bootstraps through the Service."""
    docs = render(controlplane, "kg", "ns", "-f", str(REPLICAS))
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    spec = sts["spec"]
    assert (spec["replicas"], spec["podManagementPolicy"]) == (3, "Parallel")
    assert "volumeClaimTemplates" not in spec
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert "--advertise=$(POD_NAME).kg-kgroups-coordinator-headless.ns.svc:9092" in args
    assert "--replica-name=$(POD_NAME)" in args and "--lease-ttl=5" in args
    assert not [a for a in args if a.startswith("--data-dir")]
    env = {e["name"]: e.get("value") or e.get("valueFrom") for e in container["env"]}
    assert env == {
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "KGROUPS_STORE": "postgresql://kgroups@kgroups-postgresql.databases.svc:5432/kgroups",
        "PGPASSWORD": {"secretKeyRef": {"name": "kgroups-postgresql", "key": "password"}},
        "PGSSLMODE": "verify-full",
        "PGSSLROOTCERT": "/etc/kgroups/postgresql/ca.crt",
    }
    assert {"name": "postgresql-ca", "mountPath": "/etc/kgroups/postgresql",
            "readOnly": True} in container["volumeMounts"]  # fmt: skip
    assert all(m["name"] != "data" for m in container["volumeMounts"])
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["maxUnavailable"] == 1
    default = next(d for d in render(controlplane, "kg", "ns") if d["kind"] == "StatefulSet")
    assert default["spec"]["replicas"] == 1 and "volumeClaimTemplates" in default["spec"]


def test_the_cloudnativepg_example_values_point_at_what_cloudnativepg_creates(
    controlplane: ControlPlane,
) -> None:
    """examples/k8s/cloudnativepg-values.yaml names the Service and Secrets CloudNativePG
    makes for examples/k8s/cloudnativepg.yaml's Cluster (its CRDs are not here: the
    Cluster is checked as YAML), with synchronous replication that waits for a standby."""
    cluster = yaml.safe_load((ROOT / "examples/k8s/cloudnativepg.yaml").read_text())
    name = cluster["metadata"]["name"]
    assert cluster["spec"]["instances"] == 3
    assert cluster["spec"]["postgresql"]["synchronous"] == {
        "method": "any", "number": 1, "dataDurability": "required",
    }  # fmt: skip
    owner = cluster["spec"]["bootstrap"]["initdb"]["owner"]
    database = cluster["spec"]["bootstrap"]["initdb"]["database"]
    docs = render(controlplane, "kg", "kgroups", "-f",
                  str(ROOT / "examples/k8s/cloudnativepg-values.yaml"))  # fmt: skip
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    env = {e["name"]: e.get("value") or e.get("valueFrom")
           for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert env["KGROUPS_STORE"] == f"postgresql://{owner}@{name}-rw.kgroups.svc:5432/{database}"
    assert env["PGPASSWORD"] == {"secretKeyRef": {"name": f"{name}-app", "key": "password"}}
    volumes = sts["spec"]["template"]["spec"]["volumes"]
    assert {"name": "postgresql-ca", "secret": {"secretName": f"{name}-ca", "items": [
        {"key": "ca.crt", "path": "ca.crt"}]}} in volumes  # fmt: skip
