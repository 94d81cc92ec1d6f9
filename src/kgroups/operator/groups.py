"""ConsumerGroups: settings applied, the live group mirrored, offsets reset, deletion.

Each ConsumerGroup is polled by a one-second timer that applies its settings when they
changed and mirrors the live group into `.status`, writing only when something differs,
and posting a Rebalanced event when the generation moves (and a FrequentRebalances
warning when it keeps moving). Offset requests (`kubectl kgroups reset-offsets` /
`delete-offsets`) are carried out by `resets`. Deletion goes through a finalizer: a
`Delete` group is removed from the coordinator once it is Empty, and until then a
condition says what it waits for. An unreachable coordinator is a condition and a
backed-off retry, never a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from kgroups.admin import LATEST, TP, Admin, AdminError, Cluster
from kgroups.api.models import ConsumerGroupSpec, DeletionPolicy
from kgroups.operator import resets
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
from kgroups.protocol.groups import GroupConfig

SETTING_NAMES = {
    "minSessionTimeoutMs": GroupConfig.MIN_SESSION_TIMEOUT_MS,
    "maxSessionTimeoutMs": GroupConfig.MAX_SESSION_TIMEOUT_MS,
    "initialRebalanceDelayMs": GroupConfig.INITIAL_REBALANCE_DELAY_MS,
    "maxSize": GroupConfig.MAX_SIZE,
    "offsetsRetentionMinutes": GroupConfig.OFFSETS_RETENTION_MINUTES,
    "consumerSessionTimeoutMs": GroupConfig.CONSUMER_SESSION_TIMEOUT_MS,
    "consumerHeartbeatIntervalMs": GroupConfig.CONSUMER_HEARTBEAT_INTERVAL_MS,
}
"""ConsumerGroup spec.settings field -> the coordinator's per-group config name."""
POLL_INTERVAL_S = 1.0


@dataclass
class GroupMemo:
    """Per-ConsumerGroup state kept between timer runs."""

    applied: dict[str, int | None] | None = None
    rejected: tuple[dict[str, int | None], str] | None = None
    failures: int = 0
    next_try: float = 0.0
    storm: st.RebalanceStorm = field(default_factory=st.RebalanceStorm)


class GroupReconciler:
    """The ConsumerGroup handlers, all talking to the coordinator through one `Admin`.
    `settings` gives kopf's settings once the operator started (offset requests make
    API calls of their own)."""

    def __init__(
        self,
        admin: Admin,
        metrics: OperatorMetrics,
        settings: Callable[[], kopf.OperatorSettings],
    ) -> None:
        self._admin = admin
        self._metrics = metrics
        self._settings = settings
        self._cluster = Cluster(admin.host, admin.port, bootstrap=admin, security=admin.security,
                                client_id="kgroups-operator")  # fmt: skip
        """Each group's own coordinator (with replicas sharing the groups, not the one the
        operator was given): FindCoordinator through `admin`, one connection per replica."""

    async def mirror(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        memo: kopf.Memo,
        **kwargs: Any,
    ) -> None:
        """The one-second timer: settings applied, status mirrored, events posted."""
        claims: ClaimIndex = kwargs["group_claims"]  # kopf passes an index by its id
        group_memo: GroupMemo = memo.setdefault("group", GroupMemo())
        found = conflict(claims, body, "groupId")
        if found is not None:
            # Another team's group: nothing is applied, read or shown for this one.
            group_memo.applied = None
            report_conflict(body, meta, status, patch, st.GROUP_ID_CONFLICT, found)
            return
        loop = asyncio.get_running_loop()
        if loop.time() < group_memo.next_try:
            return
        with self._metrics.reconciling("ConsumerGroup"):
            await self._mirror(body, spec, name, meta, status, patch, group_memo)

    async def _mirror(
        self,
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        group_memo: GroupMemo,
    ) -> None:
        admin = self._admin
        loop = asyncio.get_running_loop()
        cg = ConsumerGroupSpec.model_validate(dict(spec))
        group_id = cg.groupId or name
        generation = meta.get("generation")
        old = dict(status)
        try:
            problem = await self._apply_settings(group_id, cg, group_memo)
            node, coordinator = await self._cluster.group_admin(group_id)
            group = await coordinator.describe_group(group_id)
            offsets = await coordinator.committed_offsets(group_id)
            seen = st.GroupObservation(
                group=group,
                offsets=offsets,
                topics=await admin.topics(cg.topics) if cg.topics else await admin.topics(),
                ends=await self._log_ends(offsets),
            )
        except (CoordinatorUnavailable, AdminError) as exc:
            # Apply the settings again once it answers: it may have come back without them.
            group_memo.applied = None
            group_memo.failures += 1
            group_memo.next_try = loop.time() + backoff(group_memo.failures)
            self._metrics.failed("ConsumerGroup")
            new = st.unreachable_status(old, str(exc), generation=generation, now=now(),
                                        reason=failure_reason(exc))  # fmt: skip
            apply_status(patch, old, new)
            return
        group_memo.failures = 0
        new, event = st.group_status(
            old,
            cg.topics,
            seen,
            group_id=group_id,
            generation=generation,
            now=now(),
            problem=problem,
            coordinator=f"{node.host}:{node.port}",
        )
        apply_status(patch, old, new)
        if event is not None:
            kopf.event(body, type="Normal", reason="Rebalanced", message=event)
            if (storm := group_memo.storm.seen(loop.time())) is not None:
                kopf.event(body, type="Warning", reason="FrequentRebalances", message=storm)

    async def _apply_settings(
        self, group_id: str, cg: ConsumerGroupSpec, memo: GroupMemo
    ) -> tuple[str, str] | None:
        """Send the spec's settings when they differ from what was last applied; returns
        a (reason, message) problem when the coordinator refuses them (until the spec
        changes)."""
        desired: dict[str, int | None] = {
            config: getattr(cg.settings, fieldname) for fieldname, config in SETTING_NAMES.items()
        }
        if memo.rejected is not None and memo.rejected[0] == desired:
            return ("InvalidSettings", memo.rejected[1])
        if memo.applied == desired:
            return None
        try:
            await self._admin.alter_group_configs(group_id, desired)
        except AdminError as exc:
            if exc.code is ErrorCode.invalid_config:
                memo.rejected = (desired, str(exc))
                return ("InvalidSettings", str(exc))
            raise
        memo.applied, memo.rejected = desired, None
        return None

    async def _log_ends(self, offsets: dict[tuple[str, int], int]) -> dict[TP, int]:
        """Where the committed partitions' logs end (for their lag); unknown ones are
        left out."""
        if not offsets:
            return {}
        listed = await self._admin.list_offsets(dict.fromkeys(offsets, LATEST))
        return {tp: e for tp, e in listed.items() if not isinstance(e, ErrorCode) and e >= 0}

    async def offset_request(
        self, name: str, namespace: str | None, logger: kopf.Logger, **kwargs: Any
    ) -> None:
        """`kubectl kgroups reset-offsets` / `delete-offsets`: see `resets`. A request on
        a ConsumerGroup whose group id another one owns is recorded Refused, untried."""
        claims: ClaimIndex = kwargs["group_claims"]
        if namespace is None:  # ConsumerGroups are namespaced; kopf's type allows None
            return

        def refusal(body: dict[str, Any]) -> str | None:
            return conflict(claims, body, "groupId")

        with self._metrics.reconciling("ConsumerGroup"):
            try:
                await resets.handle(self._admin, namespace, name, settings=self._settings(),
                                    logger=logger, refusal=refusal)  # fmt: skip
            except resets.API_FAILURES as exc:  # the object's next event tries again
                self._metrics.failed("ConsumerGroup")
                logger.warning("offset request not handled yet: %s", exc)

    async def delete(
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
        """The finalizer: a `Delete` group leaves the coordinator once it is Empty."""
        claims: ClaimIndex = kwargs["group_claims"]
        if conflict(claims, body, "groupId") is not None:
            return  # another ConsumerGroup's group: deleting this one deletes nothing
        with self._metrics.reconciling("ConsumerGroup"):
            await self._delete(spec, name, meta, status, patch, retry)

    async def _delete(
        self,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        retry: int,
    ) -> None:
        admin = self._admin
        cg = ConsumerGroupSpec.model_validate(dict(spec))
        if cg.deletionPolicy is not DeletionPolicy.DELETE:
            return  # Retain: the group and its offsets stay on the coordinator
        group_id = cg.groupId or name
        old = dict(status)

        def wait(reason: str, message: str) -> kopf.TemporaryError:
            not_ready(patch, old, reason, message, meta.get("generation"), observed=False)
            return kopf.TemporaryError(message, delay=min(backoff(retry + 1), 5.0))

        try:
            _, coordinator = await self._cluster.group_admin(group_id)
            code = await coordinator.delete_group(group_id)
            if code is ErrorCode.non_empty_group:
                members = len((await coordinator.describe_group(group_id)).members)
                raise wait(
                    "WaitingForEmptyGroup",
                    f"deletionPolicy is Delete: waiting until the group is Empty "
                    f"({members} members still joined)",
                )
            if code not in (ErrorCode.none, ErrorCode.group_id_not_found):
                raise wait("CoordinatorRejected", f"DeleteGroups: {code.name}")
            await admin.alter_group_configs(group_id, dict.fromkeys(SETTING_NAMES.values()))
        except CoordinatorUnavailable as exc:
            raise wait("CoordinatorUnreachable", str(exc)) from exc
        except AdminError as exc:
            raise wait("CoordinatorRejected", str(exc)) from exc
