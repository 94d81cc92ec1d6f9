"""Kafka actions as RBAC questions: the verbs a Role grants (join, commit, reset, consume...)
and how a SASL or certificate principal becomes a Kubernetes user and groups."""

from __future__ import annotations

from kgroups.security.actions import Operation, cluster, group, topic
from kgroups.security.rbac import Attributes, attributes, subject

JOIN, COMMIT, OFFSET_DELETE, DELETE_GROUPS, FIND = 11, 8, 47, 42, 10


def verbs(action: object, api: int, reset: bool = False) -> list[str]:
    return [a.verb for a in attributes(action, api, reset=reset)]  # type: ignore[arg-type]


def test_group_verbs_follow_the_request() -> None:
    assert attributes(group(Operation.READ, "billing"), JOIN) == (
        Attributes("consumergroups", "join", "billing"),
    )
    assert verbs(group(Operation.READ, "g"), COMMIT) == ["commit"]
    assert verbs(group(Operation.READ, "g"), COMMIT, reset=True) == ["reset"]
    assert verbs(group(Operation.DELETE, "g"), OFFSET_DELETE) == ["reset"]
    assert verbs(group(Operation.DELETE, "g"), DELETE_GROUPS) == ["delete"]
    # Kafka's READ implies DESCRIBE: a member granted join or commit can find its
    # coordinator and read its offsets.
    assert verbs(group(Operation.DESCRIBE, "g"), FIND) == ["get", "join", "commit"]


def test_topic_and_cluster_verbs() -> None:
    assert verbs(topic(Operation.READ, "orders"), COMMIT) == ["consume"]
    assert verbs(topic(Operation.DESCRIBE, "orders"), 3) == ["get", "consume"]
    assert attributes(cluster(Operation.CREATE), 19) == (Attributes("topics", "create"),)
    assert attributes(cluster(Operation.DESCRIBE), 16) == (Attributes("consumergroups", "list"),)


def test_principals_become_kubernetes_users() -> None:
    assert subject("User:system:serviceaccount:team:billing") == (
        "system:serviceaccount:team:billing",
        ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"),
    )
    assert subject("User:CN=billing,O=payments") == (
        "billing", ("payments", "system:authenticated"),
    )  # fmt: skip
    assert subject("User:alice") == ("alice", ("system:authenticated",))
