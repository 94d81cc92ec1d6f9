"""The kopf handlers: Topics and ConsumerGroups reconciled against the coordinator.

Everything here reaches the coordinator through the Kafka admin
protocol (`kgroups.admin.Admin`, one shared connection). Topics are created or grown when
their spec changes, and checked every five seconds so a coordinator that lost its data gets
them back. Each ConsumerGroup is polled by a one-second timer that applies its
settings when they changed and mirrors the live group into `.status`, writing only when
something differs, and posting a Rebalanced event when the generation moves. Deletion goes
through a finalizer: a `Delete` group is removed from the coordinator once it is Empty,
and until then a condition says what it waits for. An unreachable coordinator is a
condition and a backed-off retry, never a crash.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf
from kopf._cogs.clients import api as kopf_api  # kopf==1.45.2 pinned: its authenticated client
from kopf._cogs.clients import errors as kopf_errors

from kgroups.admin import LATEST, TP, Admin, AdminError
from kgroups.api import offset_requests as rq
from kgroups.api.models import (
    API_GROUP,
    API_VERSION,
    ConsumerGroupSpec,
    DeletionPolicy,
    TopicSpec,
)
from kgroups.claims import Claim, claim_of, kafka_name, owner
from kgroups.operator import access, resets
from kgroups.operator import status as st
from kgroups.operator.metrics import OperatorMetrics
from kgroups.protocol.client import CoordinatorUnavailable
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import GroupConfig
from kgroups.tasks import Tasks

ClaimIndex = kopf.Index[str, Claim]

log = logging.getLogger(__name__)

SETTING_NAMES = {
    "minSessionTimeoutMs": GroupConfig.MIN_SESSION_TIMEOUT_MS,
    "maxSessionTimeoutMs": GroupConfig.MAX_SESSION_TIMEOUT_MS,
    "initialRebalanceDelayMs": GroupConfig.INITIAL_REBALANCE_DELAY_MS,
    "maxSize": GroupConfig.MAX_SIZE,
    "offsetsRetentionMinutes": GroupConfig.OFFSETS_RETENTION_MINUTES,
}
"""ConsumerGroup spec.settings field -> the coordinator's per-group config name."""
MAX_BACKOFF_S = 30.0
POLL_INTERVAL_S = 1.0
TOPIC_CHECK_S = 5.0
"""How often each Topic is checked against the coordinator (one Metadata request)."""
MIRROR_ID = "group-status"
SSAR_URL = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def backoff(failures: int) -> float:
    """Seconds to wait after `failures` consecutive failures: 1, 2, 4, ... up to 30."""
    return float(min(2 ** max(failures - 1, 0), MAX_BACKOFF_S))


NOT_AUTHORIZED = frozenset(
    {
        ErrorCode.group_authorization_failed,
        ErrorCode.topic_authorization_failed,
        ErrorCode.cluster_authorization_failed,
    }
)


def _failure_reason(exc: Exception) -> str:
    """A condition reason for why the coordinator could not be used: it was not
    reached, it refused the operator's identity, or it answered with another error."""
    if isinstance(exc, AdminError):
        return "NotAuthorized" if exc.code in NOT_AUTHORIZED else "CoordinatorRejected"
    return "CoordinatorUnreachable"


def _conflict(index: ClaimIndex, body: Mapping[str, Any], name_field: str) -> str | None:
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


def _not_deleting(meta: kopf.Meta, **_: Any) -> bool:
    return not meta.get("deletionTimestamp")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class GroupMemo:
    """Per-ConsumerGroup state kept between timer runs."""

    applied: dict[str, int | None] | None = None
    rejected: tuple[dict[str, int | None], str] | None = None
    failures: int = 0
    next_try: float = 0.0
    storm: st.RebalanceStorm = field(default_factory=st.RebalanceStorm)


def _status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning `old` into `new` (keys gone from `new` are removed)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def _apply_status(patch: kopf.Patch, old: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in _status_patch(old, new).items():
        patch.status[key] = value


def _not_ready(
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
        generation=generation, now=_now(),
    )  # fmt: skip
    new = {**old, "conditions": conditions}
    if observed:
        new["observedGeneration"] = generation
    _apply_status(patch, old, new)


def _own_pod() -> dict[str, Any] | None:
    """The operator's own Pod, to post Events about itself on (the chart passes its name,
    namespace and uid through the downward API); None outside a pod."""
    name, namespace, uid = (os.environ.get(k) for k in ("POD_NAME", "POD_NAMESPACE", "POD_UID"))
    if not (name and namespace and uid):
        return None
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}}


async def _missing_access(
    settings: kopf.OperatorSettings, namespaces: list[str], logger: kopf.Logger
) -> list[str]:
    """Every permission in access.NEEDED the API server says this identity lacks."""
    asked = [(p, ns) for ns in namespaces or [""] for p in access.NEEDED]
    answers = await asyncio.gather(
        *(
            kopf_api.post(SSAR_URL, payload=access.review(p, ns), settings=settings, logger=logger)
            for p, ns in asked
        )
    )
    return [p.describe(ns) for (p, ns), answer in zip(asked, answers, strict=True)
            if not access.allowed(answer)]  # fmt: skip


async def _post_event(
    settings: kopf.OperatorSettings,
    logger: kopf.Logger,
    own: dict[str, Any],
    said: tuple[str, str, str],
) -> None:
    """Post an Event on the operator's own Pod now (not through kopf's queue, which a
    refused watch may stop the operator before it flushes)."""
    type_, reason, message = said
    meta = own["metadata"]
    now = _now()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", **meta},
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": "kgroups-operator"},
        "reportingComponent": "kgroups.io/operator",
        "reportingInstance": meta["name"],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await kopf_api.post(
            f"/api/v1/namespaces/{meta['namespace']}/events",
            payload=event, settings=settings, logger=logger,
        )  # fmt: skip
    except (kopf_errors.APIError, aiohttp.ClientError, TimeoutError, OSError) as exc:
        logger.warning("cannot post the %s event on the operator's pod: %s", reason, exc)


async def _check_access(
    settings: kopf.OperatorSettings,
    namespaces: list[str],
    watch: access.AccessWatch,
    logger: kopf.Logger,
) -> None:
    """Ask once what the operator may do; say a change in its log and on its own Pod."""
    try:
        said = watch.seen(await _missing_access(settings, namespaces, logger))
    except (kopf_errors.APIError, aiohttp.ClientError, TimeoutError, OSError) as exc:
        # The API server away, or refusing even this: kopf's own watches say so too.
        logger.warning("cannot ask the API server what the operator may do: %s", exc)
        return
    if said is None:
        return
    type_, reason, message = said
    logger.log(logging.ERROR if type_ == "Warning" else logging.INFO, "%s: %s", reason, message)
    own = _own_pod()
    if own is not None:
        await _post_event(settings, logger, own, said)


async def _watch_access(
    settings: kopf.OperatorSettings,
    namespaces: list[str],
    watch: access.AccessWatch,
    logger: kopf.Logger,
) -> None:
    while True:
        await _check_access(settings, namespaces, watch, logger)
        await asyncio.sleep(access.CHECK_INTERVAL_S)


def register(
    registry: kopf.OperatorRegistry,
    admin: Admin,
    namespaces: list[str] | None = None,
    metrics: OperatorMetrics | None = None,
) -> None:
    """Attach every handler to `registry`, all talking to the coordinator through `admin`.
    `namespaces` are the ones watched (none: every namespace), whose access is checked;
    `metrics` counts reconciles and watched objects."""
    watch = access.AccessWatch()
    metrics = metrics or OperatorMetrics()
    tasks = Tasks("kgroups-operator")

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    started: list[kopf.OperatorSettings] = []  # for API calls from handlers kopf gives none

    @kopf.on.startup(registry=registry)
    async def check_access(settings: kopf.OperatorSettings, logger: kopf.Logger, **_: Any) -> None:
        started.append(settings)
        # In the background: kopf's API client answers only once startup is done.
        coroutine = _watch_access(settings, namespaces or [], watch, logger)
        tasks.spawn("access-checks", coroutine)

    @kopf.on.probe(id="missingPermissions", registry=registry)
    def missing_permissions(**_: Any) -> list[str]:
        return list(watch.missing)

    @kopf.on.cleanup(registry=registry)
    async def close(**_: Any) -> None:
        await tasks.close()
        await admin.close()

    @kopf.index(API_GROUP, API_VERSION, "consumergroups", id="group_claims", registry=registry)
    def group_claims(body: kopf.Body, **_: Any) -> dict[str, Claim]:
        """Kafka group id -> this ConsumerGroup's claim on it (`kgroups.claims`)."""
        return {kafka_name(body, "groupId"): claim_of(body)}

    @kopf.index(API_GROUP, API_VERSION, "topics", id="topic_claims", registry=registry)
    def topic_claims(body: kopf.Body, **_: Any) -> dict[str, Claim]:
        """Kafka topic name -> this Topic's claim on it."""
        return {kafka_name(body, "topicName"): claim_of(body)}

    @kopf.on.event(API_GROUP, API_VERSION, "topics", registry=registry)
    def topic_event(name: str, namespace: str | None, event: kopf.RawEvent, **_: Any) -> None:
        metrics.event("Topic", event.get("type"), namespace, name)

    @kopf.on.event(API_GROUP, API_VERSION, "consumergroups", registry=registry)
    def group_event(name: str, namespace: str | None, event: kopf.RawEvent, **_: Any) -> None:
        metrics.event("ConsumerGroup", event.get("type"), namespace, name)

    # --- Topics -------------------------------------------------------------------------

    @kopf.on.resume(API_GROUP, API_VERSION, "topics", id="topic", registry=registry)
    @kopf.on.create(API_GROUP, API_VERSION, "topics", id="topic", registry=registry)
    @kopf.on.update(API_GROUP, API_VERSION, "topics", field="spec", id="topic", registry=registry)
    async def reconcile_topic(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        retry: int,
        **kwargs: Any,
    ) -> None:
        topic_claims: ClaimIndex = kwargs["topic_claims"]  # kopf passes an index by its id
        with metrics.reconciling("Topic"):
            if _topic_conflict(body, meta, status, patch, topic_claims):
                return
            problem = await _ensure_topic(admin, spec, name, meta, status, patch)
            if problem is not None:
                raise kopf.TemporaryError(problem, delay=backoff(retry + 1))

    @kopf.timer(
        API_GROUP,
        API_VERSION,
        "topics",
        id="topic-check",
        interval=TOPIC_CHECK_S,
        initial_delay=TOPIC_CHECK_S,
        when=_not_deleting,
        registry=registry,
    )
    async def check_topic(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        **kwargs: Any,
    ) -> None:
        topic_claims: ClaimIndex = kwargs["topic_claims"]  # kopf passes an index by its id
        """A coordinator that came back without its data (a lost volume) gets its topics
        again without anyone touching the Topic; the status says so if it cannot."""
        with metrics.reconciling("Topic"):
            if _topic_conflict(body, meta, status, patch, topic_claims):
                return
            if await _ensure_topic(admin, spec, name, meta, status, patch) is not None:
                metrics.failed("Topic")

    @kopf.on.delete(API_GROUP, API_VERSION, "topics", id="topic-delete", registry=registry)
    async def delete_topic(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        retry: int,
        **kwargs: Any,
    ) -> None:
        topic_claims: ClaimIndex = kwargs["topic_claims"]  # kopf passes an index by its id
        topic_name = spec.get("topicName") or name
        if _conflict(topic_claims, body, "topicName") is not None:
            return  # not its topic: deleting this resource deletes nothing on the coordinator
        with metrics.reconciling("Topic"):
            try:
                await admin.delete_topic(topic_name)
            except AdminError as exc:
                if exc.code is not ErrorCode.unknown_topic_or_partition:
                    raise kopf.TemporaryError(str(exc), delay=backoff(retry + 1)) from exc
            except CoordinatorUnavailable as exc:
                raise kopf.TemporaryError(str(exc), delay=backoff(retry + 1)) from exc

    # --- ConsumerGroups -----------------------------------------------------------------

    @kopf.timer(
        API_GROUP,
        API_VERSION,
        "consumergroups",
        id=MIRROR_ID,
        interval=POLL_INTERVAL_S,
        when=_not_deleting,
        registry=registry,
    )
    async def mirror_group(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        memo: kopf.Memo,
        **kwargs: Any,
    ) -> None:
        group_claims: ClaimIndex = kwargs["group_claims"]  # kopf passes an index by its id
        group_memo: GroupMemo = memo.setdefault("group", GroupMemo())
        conflict = _conflict(group_claims, body, "groupId")
        if conflict is not None:
            # Another team's group: nothing is applied, read or shown for this one.
            group_memo.applied = None
            _report_conflict(body, meta, status, patch, st.GROUP_ID_CONFLICT, conflict)
            return
        loop = asyncio.get_running_loop()
        if loop.time() < group_memo.next_try:
            return
        with metrics.reconciling("ConsumerGroup"):
            await _mirror(body, spec, name, meta, status, patch, group_memo)

    async def _mirror(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        group_memo: GroupMemo,
    ) -> None:
        loop = asyncio.get_running_loop()
        cg = ConsumerGroupSpec.model_validate(dict(spec))
        group_id = cg.groupId or name
        generation = meta.get("generation")
        old = dict(status)
        try:
            problem = await _apply_settings(admin, group_id, cg, group_memo)
            group = await admin.describe_group(group_id)
            offsets = await admin.committed_offsets(group_id)
            seen = st.GroupObservation(
                group=group,
                offsets=offsets,
                topics=await admin.topics(cg.topics) if cg.topics else await admin.topics(),
                ends=await _log_ends(admin, offsets),
            )
        except (CoordinatorUnavailable, AdminError) as exc:
            # Apply the settings again once it answers: it may have come back without them.
            group_memo.applied = None
            group_memo.failures += 1
            group_memo.next_try = loop.time() + backoff(group_memo.failures)
            metrics.failed("ConsumerGroup")
            new = st.unreachable_status(old, str(exc), generation=generation, now=_now(),
                                        reason=_failure_reason(exc))  # fmt: skip
            _apply_status(patch, old, new)
            return
        group_memo.failures = 0
        new, event = st.group_status(
            old,
            cg.topics,
            seen,
            group_id=group_id,
            generation=generation,
            now=_now(),
            problem=problem,
            coordinator=f"{admin.host}:{admin.port}",
        )
        _apply_status(patch, old, new)
        if event is not None:
            kopf.event(body, type="Normal", reason="Rebalanced", message=event)
            if (storm := group_memo.storm.seen(loop.time())) is not None:
                kopf.event(body, type="Warning", reason="FrequentRebalances", message=storm)

    @kopf.on.event(
        API_GROUP,
        API_VERSION,
        "consumergroups",
        id="offset-requests",
        annotations={rq.ANNOTATION: kopf.PRESENT},
        when=_not_deleting,
        registry=registry,
    )
    async def offset_request(
        name: str,
        namespace: str | None,
        logger: kopf.Logger,
        **kwargs: Any,
    ) -> None:
        """`kubectl kgroups reset-offsets` / `delete-offsets`: see `resets`. A request on
        a ConsumerGroup whose group id another one owns is recorded Refused, untried."""
        group_claims: ClaimIndex = kwargs["group_claims"]
        if namespace is None:  # ConsumerGroups are namespaced; kopf's type allows None
            return

        def refusal(body: dict[str, Any]) -> str | None:
            return _conflict(group_claims, body, "groupId")

        with metrics.reconciling("ConsumerGroup"):
            try:
                await resets.handle(admin, namespace, name, settings=started[0], logger=logger,
                                    refusal=refusal)  # fmt: skip
            except resets.API_FAILURES as exc:  # the object's next event tries again
                metrics.failed("ConsumerGroup")
                logger.warning("offset request not handled yet: %s", exc)

    @kopf.on.delete(API_GROUP, API_VERSION, "consumergroups", id="group-delete", registry=registry)
    async def delete_group(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        retry: int,
        **kwargs: Any,
    ) -> None:
        group_claims: ClaimIndex = kwargs["group_claims"]  # kopf passes an index by its id
        if _conflict(group_claims, body, "groupId") is not None:
            return  # another ConsumerGroup's group: deleting this one deletes nothing
        with metrics.reconciling("ConsumerGroup"):
            await _delete(spec, name, meta, status, patch, retry)

    async def _delete(
        spec: kopf.Spec,
        name: str,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        retry: int,
    ) -> None:
        cg = ConsumerGroupSpec.model_validate(dict(spec))
        if cg.deletionPolicy is not DeletionPolicy.DELETE:
            return  # Retain: the group and its offsets stay on the coordinator
        group_id = cg.groupId or name
        old = dict(status)

        def wait(reason: str, message: str) -> kopf.TemporaryError:
            _not_ready(patch, old, reason, message, meta.get("generation"), observed=False)
            return kopf.TemporaryError(message, delay=min(backoff(retry + 1), 5.0))

        try:
            code = await admin.delete_group(group_id)
            if code is ErrorCode.non_empty_group:
                members = len((await admin.describe_group(group_id)).members)
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


def _report_conflict(
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
    new = st.conflict_status(old, reason, message, generation=meta.get("generation"), now=_now())
    _apply_status(patch, old, new)


def _topic_conflict(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, index: ClaimIndex
) -> bool:
    conflict = _conflict(index, body, "topicName")
    if conflict is not None:
        _report_conflict(body, meta, status, patch, st.TOPIC_NAME_CONFLICT, conflict)
    return conflict is not None


async def _log_ends(admin: Admin, offsets: dict[tuple[str, int], int]) -> dict[TP, int]:
    """Where the committed partitions' logs end (for their lag); unknown ones are left out."""
    if not offsets:
        return {}
    listed = await admin.list_offsets(dict.fromkeys(offsets, LATEST))
    return {tp: end for tp, end in listed.items() if not isinstance(end, ErrorCode) and end >= 0}


async def _ensure_topic(
    admin: Admin,
    spec: kopf.Spec,
    name: str,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
) -> str | None:
    """Create or grow the topic on the coordinator and patch the Topic's status; returns
    what went wrong (already in the status) or None."""
    topic = TopicSpec.model_validate(dict(spec))
    topic_name = topic.topicName or name
    generation = meta.get("generation")
    old = dict(status)
    try:
        existing = (await admin.topics([topic_name])).get(topic_name)
        if existing is None:
            await _create_topic(admin, topic_name, topic.partitions)
            actual = topic.partitions
        elif existing < topic.partitions:
            await admin.create_partitions(topic_name, topic.partitions)
            actual = topic.partitions
        else:
            actual = existing
    except (CoordinatorUnavailable, AdminError) as exc:
        _not_ready(patch, old, _failure_reason(exc), str(exc), generation)
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
            conditions, "Ready", *ready, generation=generation, now=_now()
        ),
    }
    _apply_status(patch, old, new)
    return None


async def _create_topic(admin: Admin, name: str, partitions: int) -> None:
    """Create a topic; losing a race with another creator (the change handler and the
    periodic check) is not an error."""
    try:
        await admin.create_topic(name, partitions)
    except AdminError as exc:
        if exc.code is not ErrorCode.topic_already_exists:
            raise


async def _apply_settings(
    admin: Admin, group_id: str, cg: ConsumerGroupSpec, memo: GroupMemo
) -> tuple[str, str] | None:
    """Send the spec's settings when they differ from what was last applied; returns a
    (reason, message) problem when the coordinator refuses them (until the spec changes)."""
    desired: dict[str, int | None] = {
        config: getattr(cg.settings, fieldname) for fieldname, config in SETTING_NAMES.items()
    }
    if memo.rejected is not None and memo.rejected[0] == desired:
        return ("InvalidSettings", memo.rejected[1])
    if memo.applied == desired:
        return None
    try:
        await admin.alter_group_configs(group_id, desired)
    except AdminError as exc:
        if exc.code is ErrorCode.invalid_config:
            memo.rejected = (desired, str(exc))
            return ("InvalidSettings", str(exc))
        raise
    memo.applied, memo.rejected = desired, None
    return None
