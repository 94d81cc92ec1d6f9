"""Kubernetes RBAC decides who may join and commit, on a real API server.

The coordinator authenticates members with SCRAM (user names are ServiceAccount names:
RBAC reads `system:serviceaccount:NS:NAME` as that ServiceAccount) and asks the API server
SubjectAccessReviews about verbs on kgroups.io ConsumerGroups and Topics, caching answers
for RBAC_TTL seconds. A member without a RoleBinding is refused with Kafka's
GROUP_AUTHORIZATION_FAILED and nothing is created; a RoleBinding lets it in within the
TTL; deleting it stops new joins; committing to a topic the Role does not grant gets
TOPIC_AUTHORIZATION_FAILED. Real kafka-python consumers, real RBAC.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

from tests.e2e.kube import ControlPlane
from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, polled_assignment, refused_while_polling

RBAC_TTL = 2.0
# Kafka names no ConsumerGroup or Topic of the examples (applied by other e2e tests, in
# other namespaces, on this shared API server) declares: a declared name is authorized in
# its declaring resource's namespace, which these tests are not about.
GROUP, TOPIC, PAYROLL = "rbac-billing", "rbac-orders", "rbac-payroll"
PASSWORD = "pw-" + uuid.uuid4().hex[:8]


def sa(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def scram_rbac_coordinator(
    controlplane: ControlPlane, namespace: str, tmp_path: Path, users: list[str]
) -> Coordinator:
    """A coordinator (not started) on SASL_PLAINTEXT with SCRAM users `users` (password
    PASSWORD), authorizing with RBAC on `controlplane`, `namespace` as the fallback."""
    entries = {u: {"password": PASSWORD} for u in users}
    (tmp_path / "users.yaml").write_text(yaml.safe_dump({"users": entries}))
    return Coordinator(
        tmp_path / "data", *FAST,
        "--sasl-mechanisms", "SCRAM-SHA-512", "--credentials", str(tmp_path / "users.yaml"),
        "--rbac-namespace", namespace, "--rbac-cache-ttl", str(RBAC_TTL),
        "--kubeconfig", str(controlplane.kubeconfig),
        listeners=("SASL_PLAINTEXT",),
    )  # fmt: skip


@pytest.fixture
def secured(controlplane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Coordinator]:
    users = [sa(namespace, n) for n in ("billing", "ops")]
    coord = scram_rbac_coordinator(controlplane, namespace, tmp_path, users)
    # ops: creates topics and looks at groups, as a platform team would.
    apply(controlplane, namespace, role("ops", [
        {"apiGroups": ["kgroups.io"], "resources": ["topics"], "verbs": ["create", "get"]},
        {"apiGroups": ["kgroups.io"], "resources": ["consumergroups"], "verbs": ["get", "list"]},
    ]), binding("ops", "ops", namespace))  # fmt: skip
    # billing may join and commit to group GROUP and consume topic TOPIC only.
    apply(controlplane, namespace, role("billing-member", [
        {"apiGroups": ["kgroups.io"], "resources": ["consumergroups"], "resourceNames": [GROUP],
         "verbs": ["join", "commit", "get"]},
        {"apiGroups": ["kgroups.io"], "resources": ["topics"], "resourceNames": [TOPIC],
         "verbs": ["get", "consume"]},
    ]))  # fmt: skip
    coord.start()
    yield coord
    coord.kill()


def role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name}, "rules": rules}  # fmt: skip


def binding(
    name: str, role_name: str, namespace: str, account: str | None = None
) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": account or name,
                          "namespace": namespace}]}  # fmt: skip


def apply(cp: ControlPlane, namespace: str, *objects: dict[str, Any]) -> None:
    cp.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objects))


def config(coord: Coordinator, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": coord.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": user,
            "sasl_plain_password": PASSWORD, "request_timeout_ms": 10_000}  # fmt: skip


def create_topics(coord: Coordinator, namespace: str, *names: str) -> None:
    admin = KafkaAdminClient(**config(coord, sa(namespace, "ops")))
    try:
        admin.create_topics([NewTopic(n, 2, 1) for n in names])
    finally:
        admin.close()


def groups(coord: Coordinator, namespace: str) -> set[str]:
    admin = KafkaAdminClient(**config(coord, sa(namespace, "ops")))
    try:
        return {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


def join(coord: Coordinator, namespace: str, topic: str = TOPIC) -> KafkaConsumer:
    consumer = KafkaConsumer(group_id=GROUP, enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500,
                             **config(coord, sa(namespace, "billing")))  # fmt: skip
    consumer.subscribe([topic])
    return consumer


def test_rbac_grants_and_revokes_joining_and_committing(
    controlplane: ControlPlane, namespace: str, secured: Coordinator
) -> None:
    create_topics(secured, namespace, TOPIC, PAYROLL)
    # No RoleBinding: refused, and nothing was created.
    c = join(secured, namespace)
    try:
        refused_while_polling(c, GroupAuthorizationFailedError, 5)
    finally:
        c.close()
    assert GROUP not in groups(secured, namespace)

    # Granted: within the cache's TTL the member joins, gets both partitions, commits.
    apply(controlplane, namespace, binding("billing", "billing-member", namespace))
    time.sleep(RBAC_TTL)
    c = join(secured, namespace)
    try:
        tps = polled_assignment(c)
        assert len(tps) == 2
        c.commit({tp: OffsetAndMetadata(5, "", -1) for tp in tps})
        assert {c.committed(tp) for tp in tps} == {5}
    finally:
        c.close()

    # A topic the Role does not grant: a member of the group committing offsets for it is
    # refused with TOPIC_AUTHORIZATION_FAILED, and nothing is stored.
    c = join(secured, namespace)
    try:
        polled_assignment(c)
        payroll = {TopicPartition(PAYROLL, p): OffsetAndMetadata(9, "", -1) for p in (0, 1)}
        with pytest.raises(TopicAuthorizationFailedError):
            c.commit(payroll)
    finally:
        c.close()
    assert f"refused READ TOPIC:{PAYROLL}" in secured.log()

    # Revoked: after the TTL, a new join is refused again.
    controlplane.kubectl("delete", "rolebinding", "billing", "-n", namespace)
    time.sleep(RBAC_TTL + 0.5)
    c = join(secured, namespace)
    try:
        refused_while_polling(c, GroupAuthorizationFailedError, 5)
    finally:
        c.close()
    assert f"refused DESCRIBE GROUP:{GROUP}" in secured.log()  # FindCoordinator, first


def test_a_declared_groups_own_namespace_decides_who_may_join_it(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Group `payments` is declared by the ConsumerGroup shop/payments-consumers and topic
    `payments-in` by the Topic shop/incoming: RBAC questions about them are about those
    resources, in the team's namespace. The team's RoleBinding lets its worker in; once it
    is deleted the worker is refused, although a Role in the coordinator's fallback
    namespace grants it `payments` by its Kafka name (names nobody declares)."""
    shop = f"{namespace}-shop"
    controlplane.kubectl("create", "namespace", shop)
    worker = sa(shop, "worker")
    coord = scram_rbac_coordinator(
        controlplane, namespace, tmp_path, [worker, sa(namespace, "ops")]
    )
    try:
        apply(controlplane, namespace, role("ops", [
            {"apiGroups": ["kgroups.io"], "resources": ["topics"], "verbs": ["create", "get"]},
        ]), binding("ops", "ops", namespace), role("by-kafka-name", [
            {"apiGroups": ["kgroups.io"], "resources": ["consumergroups"],
             "resourceNames": ["payments"], "verbs": ["join", "commit", "get"]},
            {"apiGroups": ["kgroups.io"], "resources": ["topics"],
             "resourceNames": ["payments-in"], "verbs": ["get", "consume"]},
        ]), binding("by-kafka-name", "by-kafka-name", shop, account="worker"))  # fmt: skip
        coord.start()
        create_topics(coord, namespace, "payments-in")  # before the Topic declares it
        apply(controlplane, shop, {
            "apiVersion": "kgroups.io/v1alpha1", "kind": "Topic", "metadata": {"name": "incoming"},
            "spec": {"topicName": "payments-in", "partitions": 2},
        }, {
            "apiVersion": "kgroups.io/v1alpha1", "kind": "ConsumerGroup",
            "metadata": {"name": "payments-consumers"},
            "spec": {"groupId": "payments", "topics": ["payments-in"]},
        }, role("payments-member", [
            {"apiGroups": ["kgroups.io"], "resources": ["consumergroups"],
             "resourceNames": ["payments-consumers"], "verbs": ["join", "commit", "get"]},
            {"apiGroups": ["kgroups.io"], "resources": ["topics"], "resourceNames": ["incoming"],
             "verbs": ["get", "consume"]},
        ]), binding("worker", "payments-member", shop))  # fmt: skip

        def consumer() -> KafkaConsumer:
            c = KafkaConsumer(group_id="payments", enable_auto_commit=False,
                              session_timeout_ms=6000, heartbeat_interval_ms=500,
                              **config(coord, worker))  # fmt: skip
            c.subscribe(["payments-in"])
            return c

        c = consumer()
        try:
            tps = polled_assignment(c, timeout=30)
            assert len(tps) == 2
            c.commit({tp: OffsetAndMetadata(4, "", -1) for tp in tps})
        finally:
            c.close()

        controlplane.kubectl("delete", "rolebinding", "worker", "-n", shop)
        time.sleep(RBAC_TTL + 0.5)
        c = consumer()
        try:
            refused_while_polling(c, GroupAuthorizationFailedError, 5)
        finally:
            c.close()
        assert f"({'User:' + worker}) refused DESCRIBE GROUP:payments" in coord.log()
    finally:
        coord.kill()
        controlplane.kubectl("delete", "namespace", shop, "--wait=false", check=False)
