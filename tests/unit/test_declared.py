"""Which resource declares a Kafka name (kgroups.coordinator.declared), from list and watch
events as the API server sends them: spec.groupId / spec.topicName or metadata.name, the
oldest claim wins, deletions and renames (a changed spec is a MODIFIED event) apply."""

from __future__ import annotations

from typing import Any

from kgroups.coordinator.declared import GROUPS, TOPICS, Declaration, DeclaredNames
from kgroups.coordinator.kubeapi import KubeApi


def obj(ns: str, name: str, created: str, uid: str, **spec: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "creationTimestamp": created,
                         "uid": uid}, "spec": spec}  # fmt: skip


def names() -> DeclaredNames:
    return DeclaredNames(KubeApi("https://unused", None))  # type: ignore[arg-type]


def test_names_come_from_the_spec_or_the_resource_name_and_the_oldest_claim_wins() -> None:
    d = names()
    assert not d.ready
    d.replace(GROUPS, [obj("shop", "payments-consumers", "2026-01-02T00:00:00Z", "1",
                           groupId="payments"),
                       obj("ops", "audit", "2026-01-01T00:00:00Z", "2")])  # fmt: skip
    assert not d.ready  # topics not listed yet
    d.replace(TOPICS, [])
    assert d.ready
    assert d.locate(GROUPS, "payments") == Declaration("2026-01-02T00:00:00Z", "shop",
                                                       "payments-consumers")  # fmt: skip
    assert d.locate(GROUPS, "audit") == Declaration("2026-01-01T00:00:00Z", "ops", "audit")
    assert d.locate(GROUPS, "payments-consumers") is None
    assert d.locate(TOPICS, "payments") is None
    d.apply(GROUPS, "ADDED", obj("late", "p", "2026-03-01T00:00:00Z", "3", groupId="payments"))
    assert d.locate(GROUPS, "payments").namespace == "shop"  # type: ignore[union-attr]
    d.apply(GROUPS, "DELETED", obj("shop", "payments-consumers", "", "1"))
    assert d.locate(GROUPS, "payments").namespace == "late"  # type: ignore[union-attr]
    d.apply(GROUPS, "MODIFIED", obj("late", "p", "2026-03-01T00:00:00Z", "3", groupId="other"))
    assert d.locate(GROUPS, "payments") is None
    assert d.locate(GROUPS, "other").name == "p"  # type: ignore[union-attr]
