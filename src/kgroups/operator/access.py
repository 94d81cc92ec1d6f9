"""What the operator must be allowed to do, and what it says when it is not.

An operator whose RBAC was taken away (a RoleBinding deleted, a rule trimmed) fails in
ways nobody sees: its watches and status patches are refused, the ConsumerGroups' status
simply stops moving, and it cannot write a condition on an object it may not patch. So
it asks the API server what it may do (SelfSubjectAccessReview, which every
authenticated identity may ask) for every verb it needs in every namespace it watches,
and says what is missing where it still can: a Warning Event on its own Pod (the chart
grants that through a Role of its own), its log, and its health endpoint. The decisions
are here, as pure functions; the operator's loop does the asking and the posting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHECK_INTERVAL_S = 15.0
"""How often access is asked again: an API server's authorizer answers in microseconds,
and RBAC changes are picked up by kopf's own retries within a similar time."""


@dataclass(frozen=True, slots=True)
class Permission:
    group: str
    resource: str
    verb: str
    subresource: str = ""

    def describe(self, namespace: str) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f"in namespace {namespace}" if namespace else "cluster-wide"
        return f"{self.verb} {what}{'.' + self.group if self.group else ''} {where}"


NEEDED: tuple[Permission, ...] = (
    *(
        Permission("kgroups.io", resource, verb)
        for resource in ("consumergroups", "topics")
        for verb in ("get", "list", "watch", "patch")
    ),
    Permission("kgroups.io", "consumergroups", "patch", "status"),
    Permission("kgroups.io", "topics", "patch", "status"),
    Permission("", "events", "create"),
)


def review(permission: Permission, namespace: str) -> dict[str, Any]:
    """The SelfSubjectAccessReview asking for `permission` in `namespace` ("": all)."""
    attributes: dict[str, Any] = {
        "group": permission.group,
        "resource": permission.resource,
        "verb": permission.verb,
    }
    if permission.subresource:
        attributes["subresource"] = permission.subresource
    if namespace:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


def allowed(answer: dict[str, Any]) -> bool:
    return bool((answer.get("status") or {}).get("allowed"))


@dataclass
class AccessWatch:
    """Remembers what was missing at the last check, so each change is said once:
    `seen(missing)` answers (type, reason, message) for an Event, or None."""

    missing: tuple[str, ...] = ()

    def seen(self, missing: list[str]) -> tuple[str, str, str] | None:
        now = tuple(sorted(missing))
        before, self.missing = self.missing, now
        if now == before:
            return None
        if now:
            return (
                "Warning",
                "Forbidden",
                f"the operator may not {'; '.join(now)}: ConsumerGroups and Topics there "
                f"are not reconciled and their status is stale (committed offsets on the "
                f"coordinator are untouched). Restore the chart's RBAC.",
            )
        return "Normal", "PermissionsRestored", "the operator has every permission it needs again"
