"""Topics: created or grown on the coordinator, and checked until they are deleted.

A Topic's spec change creates the topic or adds partitions (Kafka cannot shrink one: a
coordinator holding more says so in a condition). Every five seconds each Topic is
checked again (one Metadata request), so a coordinator that lost its data gets its
topics back without anyone touching the resource. Deleting a Topic deletes the topic,
unless another, older Topic owns that name.
"""

from __future__ import annotations

from typing import Any

import kopf

from kgroups.admin import Admin, AdminError
from kgroups.api.models import TopicSpec
from kgroups.operator import status as st
from kgroups.operator.metrics import OperatorMetrics
from kgroups.operator.reporting import (
    ClaimIndex,
    apply_status,
    backoff,
    conflict,
    failure_reason,
    not_ready,
    now,
    report_conflict,
)
from kgroups.protocol.client import CoordinatorUnavailable
from kgroups.protocol.errors import ErrorCode

TOPIC_CHECK_S = 5.0
"""How often each Topic is checked against the coordinator (one Metadata request)."""


class TopicReconciler:
    """The Topic handlers, all talking to the coordinator through one `Admin`."""

    def __init__(self, admin: Admin, metrics: OperatorMetrics) -> None:
        self._admin = admin
        self._metrics = metrics

    async def reconcile(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        retry: int,
        **kwargs: Any,
    ) -> None:
        """On create, resume and spec change; a failure retries with backoff."""
        claims: ClaimIndex = kwargs["topic_claims"]  # kopf passes an index by its id
        with self._metrics.reconciling("Topic"):
            if _in_conflict(body, meta, status, patch, claims):
                return
            problem = await self._ensure(spec, name, meta, status, patch)
            if problem is not None:
                raise kopf.TemporaryError(problem, delay=backoff(retry + 1))

    async def check(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        **kwargs: Any,
    ) -> None:
        """A coordinator that came back without its data (a lost volume) gets its topics
        again without anyone touching the Topic; the status says so if it cannot."""
        claims: ClaimIndex = kwargs["topic_claims"]
        with self._metrics.reconciling("Topic"):
            if _in_conflict(body, meta, status, patch, claims):
                return
            if await self._ensure(spec, name, meta, status, patch) is not None:
                self._metrics.failed("Topic")

    async def delete(
        self, body: kopf.Body, spec: kopf.Spec, name: str, retry: int, **kwargs: Any
    ) -> None:
        claims: ClaimIndex = kwargs["topic_claims"]
        topic_name = spec.get("topicName") or name
        if conflict(claims, body, "topicName") is not None:
            return  # not its topic: deleting this resource deletes nothing on the coordinator
        with self._metrics.reconciling("Topic"):
            try:
                await self._admin.delete_topic(topic_name)
            except AdminError as exc:
                if exc.code is not ErrorCode.unknown_topic_or_partition:
                    raise kopf.TemporaryError(str(exc), delay=backoff(retry + 1)) from exc
            except CoordinatorUnavailable as exc:
                raise kopf.TemporaryError(str(exc), delay=backoff(retry + 1)) from exc

    async def _ensure(
        self,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
    ) -> str | None:
        """Create or grow the topic on the coordinator and patch the Topic's status;
        returns what went wrong (already in the status) or None."""
        admin = self._admin
        topic = TopicSpec.model_validate(dict(spec))
        topic_name = topic.topicName or name
        generation = meta.get("generation")
        old = dict(status)
        try:
            existing = (await admin.topics([topic_name])).get(topic_name)
            if existing is None:
                await self._create(topic_name, topic.partitions)
                actual = topic.partitions
            elif existing < topic.partitions:
                await admin.create_partitions(topic_name, topic.partitions)
                actual = topic.partitions
            else:
                actual = existing
        except (CoordinatorUnavailable, AdminError) as exc:
            not_ready(patch, old, failure_reason(exc), str(exc), generation)
            return str(exc)
        if actual > topic.partitions:
            ready = (
                "False",
                "MorePartitionsOnCoordinator",
                f"the coordinator has {actual} partitions; Kafka cannot shrink a topic",
            )
        else:
            ready = ("True", "Created", f"{actual} partitions")
        conditions = list(old.get("conditions") or [])
        new = {
            "observedGeneration": generation,
            "topicName": topic_name,
            "partitions": actual,
            "conditions": st.set_condition(
                conditions, "Ready", *ready, generation=generation, now=now()
            ),
        }
        apply_status(patch, old, new)
        return None

    async def _create(self, name: str, partitions: int) -> None:
        """Create a topic; losing a race with another creator (the change handler and the
        periodic check) is not an error."""
        try:
            await self._admin.create_topic(name, partitions)
        except AdminError as exc:
            if exc.code is not ErrorCode.topic_already_exists:
                raise


def _in_conflict(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, index: ClaimIndex
) -> bool:
    found = conflict(index, body, "topicName")
    if found is not None:
        report_conflict(body, meta, status, patch, st.TOPIC_NAME_CONFLICT, found)
    return found is not None
