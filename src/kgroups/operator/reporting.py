"""What every reconciler shares: backoff, claim conflicts, and status patches.

Topics and ConsumerGroups are reconciled the same way: a failure becomes a Ready=False
condition with a reason a user can act on (unreachable, refused, not authorized) and a
backed-off retry; a resource whose Kafka name an older resource claims (`kgroups.claims`)
is reported as a conflict and not acted on; a status is written as a merge patch of
what changed, never whole.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import kopf

from kgroups.admin import AdminError
from kgroups.claims import Claim, claim_of, kafka_name, owner
from kgroups.operator import status as st
from kgroups.protocol.errors import ErrorCode

ClaimIndex = kopf.Index[str, Claim]

MAX_BACKOFF_S = 10.0
"""The longest wait between tries while the coordinator is away: a ConsumerGroup's status
catches up within this long of its return (one request per group each time is cheap)."""

NOT_AUTHORIZED = frozenset(
    {
        ErrorCode.group_authorization_failed,
        ErrorCode.topic_authorization_failed,
        ErrorCode.cluster_authorization_failed,
    }
)


def backoff(failures: int) -> float:
    """Seconds to wait after `failures` consecutive failures: 1, 2, 4, 8, then 10."""
    return float(min(2 ** max(failures - 1, 0), MAX_BACKOFF_S))


def failure_reason(exc: Exception) -> str:
    """A condition reason for why the coordinator could not be used: it was not
    reached, it refused the operator's identity, or it answered with another error."""
    if isinstance(exc, AdminError):
        return "NotAuthorized" if exc.code in NOT_AUTHORIZED else "CoordinatorRejected"
    return "CoordinatorUnreachable"


def conflict(index: ClaimIndex, body: Mapping[str, Any], name_field: str) -> str | None:
    """Why this resource must not act on its Kafka name: another, older resource owns it
    (`kgroups.claims`); None when it is the owner."""
    name = kafka_name(body, name_field)
    holder = owner(index.get(name, ()))
    if holder is None or holder == claim_of(body):
        return None
    kind = "ConsumerGroup" if name_field == "groupId" else "Topic"
    what = "group id" if name_field == "groupId" else "topic name"
    return (
        f"{what} {name!r} belongs to {kind} {holder} (claimed first): this {kind} "
        f"is not acted on while that one exists"
    )


def not_deleting(meta: kopf.Meta, **_: Any) -> bool:
    return not meta.get("deletionTimestamp")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning `old` into `new` (keys gone from `new` are removed)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def apply_status(patch: kopf.Patch, old: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in status_patch(old, new).items():
        patch.status[key] = value


def not_ready(
    patch: kopf.Patch,
    old: dict[str, Any],
    reason: str,
    message: str,
    generation: int | None,
    *,
    observed: bool = True,
) -> None:
    """Patch Ready=False with `reason`, keeping the rest of the status as last seen."""
    conditions = st.set_condition(
        list(old.get("conditions") or []), "Ready", "False", reason, message,
        generation=generation, now=now(),
    )  # fmt: skip
    new = {**old, "conditions": conditions}
    if observed:
        new["observedGeneration"] = generation
    apply_status(patch, old, new)


def report_conflict(
    body: kopf.Body,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    reason: str,
    message: str,
) -> None:
    """Ready=False with `reason`, nothing else of the named group or topic in the status,
    and a Warning event the first time."""
    old = dict(status)
    if not st.in_conflict(old, reason):
        kopf.event(body, type="Warning", reason=reason, message=message)
    new = st.conflict_status(old, reason, message, generation=meta.get("generation"), now=now())
    apply_status(patch, old, new)
