"""Which Kubernetes resource owns a Kafka name: the oldest claim wins.

RBAC is namespaced, Kafka names are not. A ConsumerGroup `team-a/billing` and a
ConsumerGroup `team-b/spy` with `spec.groupId: billing` both claim Kafka group `billing`;
so may two Topics claim one topic name. One rule decides, everywhere it matters (the
coordinator's RBAC-by-resource, `coordinator/declared.py`; the operator, which acts only
for the owner and reports every later claimant as conflicting): the claim created first
owns the name, then the first by namespace and name (creation times have one-second
resolution). A claim stays while its resource exists, finalizers included, so a name is
released only once its owner is really gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class Claim:
    """One resource's claim on a Kafka name; ordered oldest first."""

    created: str
    """metadata.creationTimestamp (RFC 3339 in UTC: its text order is its time order)."""
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def kafka_name(obj: Mapping[str, Any], name_field: str) -> str:
    """The Kafka name a resource claims: `spec.<name_field>`, else its own name."""
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    return str(spec.get(name_field) or meta.get("name", ""))


def claim_of(obj: Mapping[str, Any]) -> Claim:
    meta = obj.get("metadata") or {}
    return Claim(str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""),
                 str(meta.get("name") or ""))  # fmt: skip


def owner(claims: Iterable[Claim]) -> Claim | None:
    """The claim that owns the name (None: nobody claims it)."""
    return min(claims, default=None)
